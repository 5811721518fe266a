package postgres

import (
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// held collects the writes of a settle that nothing in the transaction
// reads back before the commit: the work rows settled, the events'
// dispositions, and the entities' counters and projections with their
// drained releases. A group of pages settles hundreds of items, and one
// statement per table costs the database far less than one per item (each
// statement opens every index of its table). They are queued before the
// next statement that reads (pipeTx.query), at Flush and before COMMIT,
// so every read in the transaction sees them as if they had run one by
// one.
type held struct {
	work []heldWork
	// dispositions in the order first set; a later set of the same event
	// replaces the value.
	dispositions []heldDisposition
	entities     []*heldEntity
	// supersedes and effects are the held supersede steps and effect
	// inserts (heldeffects.go).
	supersedes []heldSupersede
	effects    []heldEffect
}

// empty reports whether no write is held.
func (h *held) empty() bool {
	return len(h.work) == 0 && len(h.dispositions) == 0 && len(h.entities) == 0 && len(h.supersedes) == 0 && len(h.effects) == 0
}

type heldWork struct {
	id                               int64
	at                               time.Time
	disposition, reason, versionSort string
}

type heldDisposition struct {
	pk int64
	d  store.Disposition
}

// heldEntity is the net effect of WriteProjection and CountDown calls on
// one entity: pending - settled, settled_key raised to the greatest key,
// and the projection of the last WriteProjection, if any.
type heldEntity struct {
	flow, entity string
	settled      int
	settledKey   string
	projection   *heldProjection
	// release is the lease token the entity's update frees, when the
	// rules' count says its last item drains it (store.ApplyRow.Release).
	release string
}

type heldProjection struct {
	version, versionSort, state string
	eventPK                     int64
	at                          time.Time
}

func (h *held) settleWork(w heldWork) { h.work = append(h.work, w) }

func (h *held) setDisposition(pk int64, d store.Disposition) {
	for i := range h.dispositions {
		if h.dispositions[i].pk == pk {
			h.dispositions[i].d = d
			return
		}
	}
	h.dispositions = append(h.dispositions, heldDisposition{pk: pk, d: d})
}

// countDown adds one settled item of w's entity, and its drained release
// when w asks for one.
func (h *held) countDown(w *store.ApplyRow, settledKey string) *heldEntity {
	flow, entity := w.Flow, w.Entity
	var e *heldEntity
	for _, c := range h.entities {
		if c.flow == flow && c.entity == entity {
			e = c
			break
		}
	}
	if e == nil {
		e = &heldEntity{flow: flow, entity: entity}
		h.entities = append(h.entities, e)
	}
	e.settled++
	e.settledKey = max(e.settledKey, settledKey)
	if w.Release != "" {
		e.release = w.Release
	}
	return e
}

// queue queues every held write on t.
func (h *held) queue(t *pipeTx) {
	h.queueEffects(t)
	h.queueEntities(t)
	switch n := len(h.work); {
	case n == 1:
		w := h.work[0]
		t.exec("settle work", `UPDATE work SET done_at = $1, disposition = $2, reason = $3, version_sort = $4 WHERE id = $5`,
			w.at, w.disposition, w.reason, w.versionSort, w.id)
	case n > 1:
		ids, at := make([]int64, n), make([]time.Time, n)
		ds, reasons, sorts := make([]string, n), make([]string, n), make([]string, n)
		for i, w := range h.work {
			ids[i], at[i], ds[i], reasons[i], sorts[i] = w.id, w.at, w.disposition, w.reason, w.versionSort
		}
		t.exec("settle work", settleWorkSQL, ids, at, ds, reasons, sorts)
	}
	h.work = h.work[:0]
	switch n := len(h.dispositions); {
	case n == 1:
		t.exec("set disposition", `UPDATE events SET disposition = $1 WHERE pk = $2`, h.dispositions[0].d, h.dispositions[0].pk)
	case n > 1:
		pks, ds := make([]int64, n), make([]string, n)
		for i, d := range h.dispositions {
			pks[i], ds[i] = d.pk, string(d.d)
		}
		t.exec("set disposition", setDispositionsSQL, pks, ds)
	}
	h.dispositions = h.dispositions[:0]
}

// queueEntities queues the held entity writes: one UPDATE for one
// entity, one from unnest for several.
func (h *held) queueEntities(t *pipeTx) {
	es := h.entities
	h.entities = nil
	if len(es) == 1 {
		e := es[0]
		if p := e.projection; p != nil {
			t.exec("update projection", updateProjectionSQL,
				p.version, p.versionSort, p.state, p.eventPK, p.at, e.flow, e.entity, e.settled, e.settledKey, e.release)
			return
		}
		t.exec("count pending", countPendingSQL, e.flow, e.entity, e.settled, e.settledKey, e.release)
		return
	}
	if len(es) == 0 {
		return
	}
	n := len(es)
	flows, entities, versions, sorts, states, keys, tokens := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	proj, eventPKs, at, settled := make([]bool, n), make([]int64, n), make([]time.Time, n), make([]int64, n)
	for i, e := range es {
		flows[i], entities[i], settled[i], keys[i], tokens[i] = e.flow, e.entity, int64(e.settled), e.settledKey, e.release
		if p := e.projection; p != nil {
			proj[i], versions[i], sorts[i], states[i], eventPKs[i], at[i] = true, p.version, p.versionSort, p.state, p.eventPK, p.at
		} else {
			states[i], at[i] = "null", time.Unix(0, 0)
		}
	}
	t.exec("update projections", updateEntitiesSQL, flows, entities, proj, versions, sorts, states, eventPKs, at, settled, keys, distinct(flows), tokens)
}

// updateProjectionSQL and countPendingSQL write one entity's held
// counter, with its projection or without, and free its lease when the
// token parameter names it (an entity whose last item drains it,
// store.ApplyRow.Release; empty: the lease stays).
var (
	updateProjectionSQL = `UPDATE entities SET version = $1, version_sort = $2, state = $3::jsonb, applied_event_pk = $4, updated_at = $5,
		pending = pending - $8, settled_key = GREATEST(settled_key, $9), ` + releaseSet("$10") + ` WHERE flow = $6 AND entity = $7`
	countPendingSQL = `UPDATE entities SET pending = pending - $3, settled_key = GREATEST(settled_key, $4), ` + releaseSet("$5") + `
		WHERE flow = $1 AND entity = $2`
)

// releaseSet is the assignments that free the lease whose token the
// parameter token names, and leave it alone when that is empty.
func releaseSet(token string) string {
	return `lease_token = CASE WHEN ` + token + ` <> '' AND lease_token = ` + token + ` THEN '' ELSE lease_token END,
		lease_until = CASE WHEN ` + token + ` <> '' AND lease_token = ` + token + ` THEN '-infinity' ELSE lease_until END`
}

// settleWorkSQL settles work rows $1 (arrays $1-$5, one element per row);
// w.id = ANY($1) lets the rows be found by the primary key whatever the
// planner thinks of the unnest's size.
const settleWorkSQL = `UPDATE work w SET done_at = u.at, disposition = u.disposition, reason = u.reason, version_sort = u.version_sort
			FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::text[], $5::text[]) AS u(id, at, disposition, reason, version_sort)
			WHERE w.id = u.id AND w.id = ANY($1)`

// setDispositionsSQL sets the dispositions $2 of events $1.
const setDispositionsSQL = `UPDATE events e SET disposition = u.d
			FROM unnest($1::bigint[], $2::text[]) AS u(pk, d) WHERE e.pk = u.pk AND e.pk = ANY($1)`

// updateEntitiesSQL writes the held counters and projections of several
// entities: arrays $1-$10 and $12, one element per entity, $11 the
// distinct flows. An entity whose lease token $12 is set (its last item
// drains it, store.ApplyRow.Release) has its lease freed by the same
// write; the group fenced every entity earlier in the transaction
// (fenceEntitiesSQL: token checked, row locked).
var updateEntitiesSQL = `UPDATE entities e SET
			version = CASE WHEN u.proj THEN u.version ELSE e.version END,
			version_sort = CASE WHEN u.proj THEN u.version_sort ELSE e.version_sort END,
			state = CASE WHEN u.proj THEN u.state::jsonb ELSE e.state END,
			applied_event_pk = CASE WHEN u.proj THEN u.event_pk ELSE e.applied_event_pk END,
			updated_at = CASE WHEN u.proj THEN u.at ELSE e.updated_at END,
			pending = e.pending - u.n, settled_key = GREATEST(e.settled_key, u.settled_key COLLATE "C"),
			` + releaseSet("u.token") + `
		FROM unnest($1::text[], $2::text[], $3::bool[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::timestamptz[], $9::bigint[], $10::text[], $12::text[])
			AS u(flow, entity, proj, version, version_sort, state, event_pk, at, n, settled_key, token)
		WHERE e.flow = u.flow AND e.entity = u.entity AND e.flow = ANY($11) AND e.entity = ANY($2)`

// distinct returns ss without repeats, in first-seen order. A statement
// that finds rows by primary key names its keys with = ANY of distinct
// values: with statistics, the planner costs a repeated value as many
// index probes (30 entities of one flow as 900) and takes a sequential
// scan of the whole table instead.
func distinct(ss []string) []string {
	seen := make(map[string]bool, len(ss))
	out := make([]string, 0, len(ss))
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
