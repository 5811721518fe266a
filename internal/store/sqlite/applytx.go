package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// ReadGroup: the fencing read of each entity also fetches its
// projection, and one more read every work row of the items' events.
func (a txn) ReadGroup(ctx context.Context, subs [][]*store.FlowApplyParams) (*store.GroupRead, error) {
	rd := &store.GroupRead{Entities: make([]*store.EntityRead, len(subs))}
	var ids []int64
	for i, ps := range subs {
		l := ps[0].Lease
		e := &store.EntityRead{}
		var state string
		err := a.tx.QueryRowContext(ctx, `SELECT version, version_sort, state, pending FROM entities
			WHERE flow = ? AND entity = ? AND lease_token = ? AND lease_until > ?`, l.Flow, l.Entity, l.Token, ps[0].Now.UnixMicro()).
			Scan(&e.Version, &e.VersionSort, &state, &e.Pending)
		if errors.Is(err, sql.ErrNoRows) {
			continue // lease lost: rd.Entities[i] stays nil
		}
		if err != nil {
			return nil, err
		}
		e.State = []byte(state)
		rd.Entities[i] = e
		for _, p := range ps {
			ids = append(ids, p.WorkID)
		}
	}
	if len(ids) == 0 {
		return rd, nil
	}
	idList, err := json.Marshal(ids)
	if err != nil {
		return nil, err
	}
	rows, err := a.tx.QueryContext(ctx, `SELECT w.id, w.flow, w.entity, w.event_pk, w.replay_id, w.order_key,
			w.done_at IS NOT NULL, w.disposition, w.reason, e.source, e.event_id, e.entity, e.disposition
		FROM work w JOIN events e ON e.pk = w.event_pk
		WHERE w.event_pk IN (SELECT event_pk FROM work WHERE id IN (SELECT value FROM json_each(?)))`, string(idList))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var w store.BatchWork
		if err := rows.Scan(&w.WorkID, &w.Flow, &w.Entity, &w.EventPK, &w.ReplayID, &w.OrderKey,
			&w.Done, &w.Disposition, &w.Reason, &w.Event.Source, &w.Event.EventID, &w.Event.Entity, &w.Event.Disposition); err != nil {
			rows.Close()
			return nil, err
		}
		rd.Work = append(rd.Work, w)
	}
	return rd, rows.Close()
}

func (a txn) LoopVisit(ctx context.Context, flow, causationID string, eventPK int64, now time.Time) (int64, error) {
	var first int64
	err := a.tx.QueryRowContext(ctx, `INSERT INTO loop_visits (flow, causation_id, event_pk, at) VALUES (?, ?, ?, ?)
		ON CONFLICT (flow, causation_id) DO UPDATE SET flow = excluded.flow RETURNING event_pk`,
		flow, causationID, eventPK, now.UnixMicro()).Scan(&first)
	return first, err
}

func (a txn) WriteProjection(ctx context.Context, w *store.ApplyRow, p *store.FlowApplyParams) error {
	return a.countDown(ctx, w, true, w.OrderKey,
		p.Version, p.VersionSort, string(store.StateJSON(p.State)), w.EventPK, p.Now.UnixMicro())
}

func (a txn) SupersedeOlder(ctx context.Context, w *store.ApplyRow, name string, p *store.FlowApplyParams, out *[]store.SupersededEffect) error {
	older := `version_sort < ?`
	if !p.Ordered {
		older = `version_sort <> ?`
	}
	rows, err := a.tx.QueryContext(ctx, `UPDATE effects SET state = 'superseded', updated_at = ?
		WHERE flow = ? AND entity = ? AND effect = ? AND state IN ('approved', 'retry_wait') AND compensates = 0 AND `+older+`
		RETURNING episode_key, version`, p.Now.UnixMicro(), w.Flow, w.Entity, name, p.VersionSort)
	if err != nil {
		return err
	}
	for rows.Next() {
		var s store.SupersededEffect
		if err := rows.Scan(&s.EpisodeKey, &s.Version); err != nil {
			rows.Close()
			return err
		}
		*out = append(*out, s)
	}
	return rows.Close()
}

func (a txn) LockEffect(ctx context.Context, id int64) (key, version string, state store.EffectState, found bool, err error) {
	err = a.tx.QueryRowContext(ctx, `SELECT episode_key, version, state FROM effects WHERE id = ?`, id).Scan(&key, &version, &state)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", "", false, nil
	}
	return key, version, state, err == nil, err
}

func (a txn) SupersedeEffect(ctx context.Context, id int64, now time.Time) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE effects SET state = 'superseded', updated_at = ? WHERE id = ?`, now.UnixMicro(), id)
	return err
}

// InsertEffect reads the existing row only on the rare conflict. A key
// held by a tombstone (a pruned effect) counts as existing: nothing is
// inserted and the tombstone's request is what the caller compares. The
// write transaction is alone, so no pruning can fall between the check
// and the insert.
func (a txn) InsertEffect(ctx context.Context, w *store.ApplyRow, p *store.FlowApplyParams, e *store.EffectInsert, claim *store.InsertClaim, out *store.InsertOutcome) error {
	if claim != nil {
		return a.insertClaimedEffect(ctx, w, p, e, claim, out)
	}
	now := p.Now.UnixMicro()
	r, err := a.tx.ExecContext(ctx, `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at,
		compensates, deadline_at, deadline_warn_at, on_deadline)
		SELECT ?, ?, ?, ?, ?, ?, ?, 'approved', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?
		WHERE NOT EXISTS (SELECT 1 FROM effect_tombstones WHERE episode_key = ?1)
		ON CONFLICT (episode_key) DO NOTHING`,
		e.EpisodeKey, w.Flow, w.Entity, p.Version, p.VersionSort, e.Effect, e.Destination, string(store.StateJSON(e.Request)),
		w.EventPK, e.CausationID, e.Hop, now, now, e.Compensates, micros(e.DeadlineAt), micros(e.DeadlineWarnAt), e.OnDeadline)
	if err != nil {
		return err
	}
	n, err := r.RowsAffected()
	if err != nil || n == 1 {
		out.Inserted = n == 1
		return err
	}
	return a.existingEffect(ctx, e.EpisodeKey, out)
}

// insertClaimedEffect is InsertEffect with a claim, in one statement
// (insertClaimedEffectSQL).
func (a txn) insertClaimedEffect(ctx context.Context, w *store.ApplyRow, p *store.FlowApplyParams, e *store.EffectInsert, claim *store.InsertClaim, out *store.InsertOutcome) error {
	_, args := effectDueSQL(claim.Now.UnixMicro(), claim.MaxRedrives)
	args = append(args, e.EpisodeKey, w.Flow, w.Entity, p.Version, p.VersionSort, e.Effect, e.Destination,
		string(store.StateJSON(e.Request)), w.EventPK, e.CausationID, e.Hop, p.Now.UnixMicro(), e.Compensates,
		micros(e.DeadlineAt), micros(e.DeadlineWarnAt), e.OnDeadline, claim.Token, claim.Until.UnixMicro(), claim.Now.UnixMicro())
	found := false
	err := a.each(ctx, insertClaimedEffectSQL, args, func(sc scanner) error {
		var request string
		found = true
		if err := sc.Scan(&out.ID, &out.Claimed, &request, &out.TraceContext); err != nil {
			return err
		}
		out.Inserted = true
		if out.Claimed {
			out.Request = []byte(request)
		}
		return nil
	})
	if err != nil || found {
		return err
	}
	return a.existingEffect(ctx, e.EpisodeKey, out)
}

// insertClaimedEffectSQL inserts one effect with a claim: the claim's
// conditions (store.InsertClaim: effectDueSQL's arguments, then the
// effect's) decide the state and the lease columns as the row goes in,
// and the row answers with what the claim would have read. The effect
// the claim would take first is looked for at the destination in due
// order (effects_due_destination), as the claim looks.
var insertClaimedEffectSQL = func() string {
	due, _ := effectDueSQL(0, 0)
	// Materialized, so that the conditions run once: the insert reads ok
	// six times, and a subquery SQLite flattens into it ran them for
	// each.
	return `WITH n AS MATERIALIZED (
			SELECT v.*, NOT EXISTS (SELECT 1 FROM effects f WHERE ` + due + ` AND f.destination = v.destination
					AND ` + store.NoOlderInFlightSQL("f", "INDEXED BY effects_entity") + `)
				AND ` + store.NoneInFlightSQL("v", "INDEXED BY effects_entity") + ` AS ok
			FROM (SELECT ? AS episode_key, ? AS flow, ? AS entity, ? AS version, ? AS version_sort, ? AS effect,
				? AS destination, ? AS request, ? AS source_event_pk, ? AS causation_id, ? AS hop, ? AS created_at,
				? AS compensates, ? AS deadline_at, ? AS deadline_warn_at, ? AS on_deadline, ? AS token, ? AS until,
				? AS claimed_at) v)
		INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
			state, request, source_event_pk, causation_id, hop, created_at, updated_at,
			compensates, deadline_at, deadline_warn_at, on_deadline, lease_token, lease_until, next_attempt_at, claimed_at)
		SELECT n.episode_key, n.flow, n.entity, n.version, n.version_sort, n.effect, n.destination,
			iif(n.ok, 'submitting', 'approved'), n.request, n.source_event_pk, n.causation_id, n.hop, n.created_at,
			iif(n.ok, n.claimed_at, n.created_at), n.compensates, n.deadline_at, n.deadline_warn_at, n.on_deadline,
			iif(n.ok, n.token, ''), iif(n.ok, n.until, 0), iif(n.ok, n.until, 0), iif(n.ok, n.claimed_at, 0)
		FROM n WHERE NOT EXISTS (SELECT 1 FROM effect_tombstones t WHERE t.episode_key = n.episode_key)
		ON CONFLICT (episode_key) DO NOTHING
		RETURNING id, state = 'submitting', request, (SELECT trace_context FROM events WHERE pk = source_event_pk)`
}()

// existingEffect answers an insert that found its episode key held: the
// request stored under it.
func (a txn) existingEffect(ctx context.Context, key string, out *store.InsertOutcome) error {
	var existing string
	if err := a.tx.QueryRowContext(ctx, `SELECT request FROM effects WHERE episode_key = ?1
		UNION ALL SELECT request FROM effect_tombstones WHERE episode_key = ?1 LIMIT 1`, key).Scan(&existing); err != nil {
		return err
	}
	out.Existing = []byte(existing)
	return nil
}

func (a txn) SettleWork(ctx context.Context, p *store.FlowApplyParams, res *store.FlowApplyResult, sortKey string) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE work SET done_at = ?, disposition = ?, reason = ?, version_sort = ? WHERE id = ?`,
		p.Now.UnixMicro(), res.Disposition, res.Reason, sortKey, p.WorkID)
	return err
}

// CountDown: the greatest of settled_key and an empty key is settled_key, so
// a dead letter (settledKey empty) does not catch the entity up.
func (a txn) CountDown(ctx context.Context, w *store.ApplyRow, settledKey string) error {
	return a.countDown(ctx, w, false, settledKey)
}

// countDown counts an item of w's entity down, writing the projection
// (args: version, version_sort, state, applied_event_pk, updated_at) when
// projection is set, and frees the lease when w.Release names it
// (store.ApplyTx.CountDown).
func (a txn) countDown(ctx context.Context, w *store.ApplyRow, projection bool, settledKey string, args ...any) error {
	release := w.Release != ""
	if release {
		args = append(args, w.Release, w.Release, leaseFree)
	}
	_, err := a.tx.ExecContext(ctx, countDownSQL[boolInt(projection)][boolInt(release)], append(args, settledKey, w.Flow, w.Entity)...)
	return err
}

// countDownSQL[projection][release] is countDown's statement, made once:
// built per call, its text was an allocation per settled item.
var countDownSQL = func() (out [2][2]string) {
	const projection = `version = ?, version_sort = ?, state = ?, applied_event_pk = ?, updated_at = ?, `
	const release = `lease_token = CASE WHEN lease_token = ? THEN '' ELSE lease_token END,
		lease_until = CASE WHEN lease_token = ? THEN ? ELSE lease_until END, `
	for p, set := range []string{"", projection} {
		for r, free := range []string{"", release} {
			out[p][r] = `UPDATE entities SET ` + set + free + `pending = pending - 1, settled_key = max(settled_key, ?)
		WHERE flow = ? AND entity = ?`
		}
	}
	return out
}()

// Audit writes the rows in order, up to auditRowsPerInsert in one
// statement: a settled event's three or four rows cost one statement on
// the one writer instead of one each.
func (a txn) Audit(ctx context.Context, as ...*store.AuditInsertParams) error {
	for len(as) > 0 {
		n := min(len(as), auditRowsPerInsert)
		args := make([]any, 0, 7*n)
		for _, p := range as[:n] {
			args = append(args, p.At.UnixMicro(), p.Actor, p.Action, p.Source, p.EventID, p.Entity, p.Detail)
		}
		if _, err := a.tx.ExecContext(ctx, auditInsertSQL[n-1], args...); err != nil {
			return dbErrors.Wrap("insert audit", err)
		}
		as = as[n:]
	}
	return nil
}

// auditRowsPerInsert bounds the rows of one audit insert, and with it the
// statements the writer keeps compiled for them (one per row count).
const auditRowsPerInsert = 16

// auditInsertSQL[n-1] inserts n audit rows; SQLite gives them ids in the
// order of their VALUES.
var auditInsertSQL = func() [auditRowsPerInsert]string {
	var out [auditRowsPerInsert]string
	q := `INSERT INTO audit (at, actor, action, source, event_id, entity, detail) VALUES (?, ?, ?, ?, ?, ?, ?)`
	for i := range out {
		out[i] = q
		q += `, (?, ?, ?, ?, ?, ?, ?)`
	}
	return out
}()

// EventWork needs no lock: the write transaction is alone. One read of
// the event's work rows (a handful: one per flow and pass) answers both
// questions, whether any is pending and what this pass adds up to.
func (a txn) EventWork(ctx context.Context, pk int64) (*store.EventHead, []store.EventWorkRow, error) {
	h := &store.EventHead{}
	if err := a.tx.QueryRowContext(ctx, `SELECT source, event_id, entity, disposition FROM events WHERE pk = ?`, pk).
		Scan(&h.Source, &h.EventID, &h.Entity, &h.Disposition); err != nil {
		return nil, nil, err
	}
	rows, err := a.tx.QueryContext(ctx, `SELECT flow, done_at IS NULL, replay_id, disposition FROM work WHERE event_pk = ?`, pk)
	if err != nil {
		return nil, nil, err
	}
	var out []store.EventWorkRow
	for rows.Next() {
		var r store.EventWorkRow
		if err := rows.Scan(&r.Flow, &r.Pending, &r.ReplayID, &r.Disposition); err != nil {
			rows.Close()
			return nil, nil, err
		}
		out = append(out, r)
	}
	return h, out, rows.Close()
}

func (a txn) SetDisposition(ctx context.Context, pk int64, d store.Disposition) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE events SET disposition = ? WHERE pk = ?`, d, pk)
	return err
}

// Flush has nothing to send: every statement ran when it was called.
func (txn) Flush(context.Context) error { return nil }

func (a txn) EffectAskedBy(ctx context.Context, key string, eventPK int64) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE effects SET later_event_pks = json_insert(later_event_pks, '$[#]', ?2)
		WHERE episode_key = ?1 AND source_event_pk <> ?2
		AND NOT EXISTS (SELECT 1 FROM json_each(effects.later_event_pks) WHERE value = ?2)`, key, eventPK)
	return err
}
