package postgres

import (
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// held collects the writes of a settle that nothing in the transaction
// reads back before the commit: the work rows settled, the events'
// dispositions and the entity's counters and projection. A page of one
// entity's work settles up to 50 items, and one statement per table costs
// the database far less than one per item (each statement opens every
// index of its table). They are queued, in the order of the tables' first
// held write, before the next statement that reads (pipeTx.query), before
// ReleaseDrained (which reads the entity's pending count) and before
// COMMIT, so every read in the transaction sees them as if they had run
// one by one.
type held struct {
	work []heldWork
	// dispositions in the order first set; a later set of the same event
	// replaces the value.
	dispositions []heldDisposition
	entity       *heldEntity
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

// countDown adds one settled item of flow/entity; a held write for
// another entity is queued first (a page has one entity, so this is only
// a guard).
func (h *held) countDown(t *pipeTx, flow, entity, settledKey string) *heldEntity {
	if h.entity != nil && (h.entity.flow != flow || h.entity.entity != entity) {
		h.queueEntity(t)
	}
	if h.entity == nil {
		h.entity = &heldEntity{flow: flow, entity: entity}
	}
	h.entity.settled++
	h.entity.settledKey = max(h.entity.settledKey, settledKey)
	return h.entity
}

// queue queues every held write on t.
func (h *held) queue(t *pipeTx) {
	h.queueEntity(t)
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
		// w.id = ANY($1) lets the rows be found by the primary key
		// whatever the planner thinks of the unnest's size.
		t.exec("settle work", `UPDATE work w SET done_at = u.at, disposition = u.disposition, reason = u.reason, version_sort = u.version_sort
			FROM unnest($1::bigint[], $2::timestamptz[], $3::text[], $4::text[], $5::text[]) AS u(id, at, disposition, reason, version_sort)
			WHERE w.id = u.id AND w.id = ANY($1)`, ids, at, ds, reasons, sorts)
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
		t.exec("set disposition", `UPDATE events e SET disposition = u.d
			FROM unnest($1::bigint[], $2::text[]) AS u(pk, d) WHERE e.pk = u.pk AND e.pk = ANY($1)`, pks, ds)
	}
	h.dispositions = h.dispositions[:0]
}

// queueEntity queues the held entity write.
func (h *held) queueEntity(t *pipeTx) {
	e := h.entity
	if e == nil {
		return
	}
	h.entity = nil
	if p := e.projection; p != nil {
		t.exec("update projection", `UPDATE entities SET version = $1, version_sort = $2, state = $3::jsonb, applied_event_pk = $4, updated_at = $5,
			pending = pending - $8, settled_key = GREATEST(settled_key, $9) WHERE flow = $6 AND entity = $7`,
			p.version, p.versionSort, p.state, p.eventPK, p.at, e.flow, e.entity, e.settled, e.settledKey)
		return
	}
	t.exec("count pending", `UPDATE entities SET pending = pending - $3, settled_key = GREATEST(settled_key, $4)
		WHERE flow = $1 AND entity = $2`, e.flow, e.entity, e.settled, e.settledKey)
}
