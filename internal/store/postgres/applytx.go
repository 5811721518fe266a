package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// ReadGroup sends four statements in one round trip, BEGIN among them.
// The fence is a row lock on each entity, taken in (flow, entity) byte
// order and only while its token holds an unexpired lease (FOR NO KEY
// UPDATE: a claimer's FOR UPDATE SKIP LOCKED passes the entity by, and no
// new row version is written as an UPDATE would), kept until the commit.
// The events are locked next, in pk order, and the work rows are read by
// a statement of their own: a statement that waited for a row lock sees
// the rows it joins as of its start, so a read in the locking statement
// would miss another flow's settled row and leave the event accepted
// forever; the next statement takes a fresh snapshot.
//
// Where routing's lease read the group ahead (leaseAheadSQL), ReadGroup
// answers from that read without a round trip (groupAhead.answer).
func (a txn) ReadGroup(ctx context.Context, subs [][]*store.FlowApplyParams) (*store.GroupRead, error) {
	if rd := a.t.takeAhead().answer(a.t, subs); rd != nil {
		return rd, nil
	}
	n := len(subs)
	flows, entities, tokens := make([]string, n), make([]string, n), make([]string, n)
	nows, nums := make([]time.Time, n), make([]int32, n)
	var ids []int64
	for i, ps := range subs {
		l := ps[0].Lease
		flows[i], entities[i], tokens[i], nows[i], nums[i] = l.Flow, l.Entity, l.Token, ps[0].Now, int32(i)
		for _, p := range ps {
			ids = append(ids, p.WorkID)
		}
	}
	rd := &store.GroupRead{Entities: make([]*store.EntityRead, n)}
	a.t.later("fence entities", fenceEntitiesSQL, []any{flows, entities, tokens, nows, nums, distinct(flows), distinct(entities)}, func(rows pgx.Rows) error {
		for rows.Next() {
			var i int32
			var state string
			e := &store.EntityRead{}
			if err := rows.Scan(&i, &e.Version, &e.VersionSort, &state, &e.Pending); err != nil {
				return err
			}
			e.State = []byte(state)
			rd.Entities[i] = e
		}
		return nil
	})
	a.t.exec("lock events", lockBatchEventsSQL, ids)
	err := a.t.query(ctx, "read work", readBatchWorkSQL, []any{ids}, func(rows pgx.Rows) error {
		return scanBatchWork(rows, &rd.Work)
	})
	if err != nil {
		return nil, err
	}
	return rd, nil
}

// scanBatchWork appends the rows of readBatchWorkSQL (or of
// readListedWorkSQL) to work.
func scanBatchWork(rows pgx.Rows, work *[]store.BatchWork) error {
	for rows.Next() {
		var w store.BatchWork
		if err := rows.Scan(&w.WorkID, &w.Flow, &w.Entity, &w.EventPK, &w.ReplayID, &w.OrderKey,
			&w.Done, &w.Disposition, &w.Reason, &w.Event.Source, &w.Event.EventID, &w.Event.Entity, &w.Event.Disposition); err != nil {
			return err
		}
		*work = append(*work, w)
	}
	return nil
}

// lockBatchEventsSQL locks the events of work items $1 in pk order, and
// readBatchWorkSQL reads every work row of those events with the event.
// The events' pks are an array computed once (an InitPlan), named on both
// sides of the join, so every read is an index lookup whatever the
// planner knows of the tables. lockListedEventsSQL and readListedWorkSQL
// are the same for the items routing's lease listed (listedWork).
var (
	lockBatchEventsSQL  = lockEventsOfWork("$1")
	readBatchWorkSQL    = readWorkOfEvents("$1")
	lockListedEventsSQL = lockEventsOfWork(listedWork)
	readListedWorkSQL   = readWorkOfEvents(listedWork)
)

func lockEventsOfWork(ids string) string {
	return `SELECT 1 FROM events WHERE pk = ANY(ARRAY(SELECT event_pk FROM work WHERE id = ANY(` + ids + `)))
		ORDER BY pk FOR NO KEY UPDATE`
}

func readWorkOfEvents(ids string) string {
	return `SELECT w.id, w.flow, w.entity, e.pk, w.replay_id, w.order_key,
			w.done_at IS NOT NULL, w.disposition, w.reason, e.source, e.event_id, e.entity, e.disposition
		FROM events e JOIN work w ON w.event_pk = e.pk
		WHERE e.pk = ANY(ARRAY(SELECT event_pk FROM work WHERE id = ANY(` + ids + `)))
			AND w.event_pk = ANY(ARRAY(SELECT event_pk FROM work WHERE id = ANY(` + ids + `)))`
}

// fenceEntitiesSQL locks the entities ($1, $2) whose lease token is $3
// and runs past $4, in (flow, entity) byte order, and returns each one's
// submission number $5 and projection. The primary key lookups are named
// outright with the distinct flows $6 and entities $7 (anyKeys), so the
// plan reads the primary key whatever the planner knows.
const fenceEntitiesSQL = `SELECT l.n, e.version, e.version_sort, e.state::text, e.pending
	FROM entities e JOIN unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::int[]) AS l(flow, entity, token, now, n)
		ON e.flow = l.flow AND e.entity = l.entity
	WHERE e.flow = ANY($6) AND e.entity = ANY($7) AND e.lease_token = l.token AND e.lease_until > l.now
	ORDER BY e.flow COLLATE "C", e.entity COLLATE "C"
	FOR NO KEY UPDATE OF e`

// LoopVisit: a concurrent first visit of the same causation waits on the
// unique index for the other transaction, then sees its row.
func (a txn) LoopVisit(ctx context.Context, flow, causationID string, eventPK int64, now time.Time) (int64, error) {
	var first int64
	err := a.t.query(ctx, "record loop visit", `INSERT INTO loop_visits (flow, causation_id, event_pk, at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (flow, causation_id) DO UPDATE SET flow = excluded.flow RETURNING event_pk`,
		[]any{flow, causationID, eventPK, now}, func(rows pgx.Rows) error {
			if !rows.Next() {
				return errors.New("no loop visit returned")
			}
			return rows.Scan(&first)
		})
	return first, err
}

func (a txn) WriteProjection(_ context.Context, w *store.ApplyRow, p *store.FlowApplyParams) error {
	e := a.t.held.countDown(w, w.OrderKey)
	e.projection = &heldProjection{version: p.Version, versionSort: p.VersionSort, state: string(store.StateJSON(p.State)),
		eventPK: w.EventPK, at: p.Now}
	return nil
}

// supersedeOlderSQL moves the open effects of entity ($2, $3) named $4
// older than version_sort $5 (other than $5 when the flow is unordered) to
// superseded at $1. Its WHERE is effects_open's predicate and columns, so
// that index is the plan even before statistics exist (0012).
func supersedeOlderSQL(ordered bool) string {
	older := `version_sort < $5`
	if !ordered {
		older = `version_sort <> $5`
	}
	return `UPDATE effects SET state = 'superseded', updated_at = $1
		WHERE flow = $2 AND entity = $3 AND effect = $4 AND state IN ('approved', 'retry_wait') AND compensates = 0 AND ` + older + `
		RETURNING episode_key, version`
}

func (a txn) SupersedeOlder(_ context.Context, w *store.ApplyRow, name string, p *store.FlowApplyParams, out *[]store.SupersededEffect) error {
	a.t.held.supersedeOlder(a.t, heldSupersede{flow: w.Flow, entity: w.Entity, effect: name,
		versionSort: p.VersionSort, ordered: p.Ordered, at: p.Now, out: out})
	return nil
}

// LockEffect locks the original FOR UPDATE: a delivery claim skips the
// locked row, so it cannot send the effect between the decision and the
// commit.
func (a txn) LockEffect(ctx context.Context, id int64) (key, version string, state store.EffectState, found bool, err error) {
	err = a.t.query(ctx, "lock effect", `SELECT episode_key, version, state FROM effects WHERE id = $1 FOR UPDATE`,
		[]any{id}, func(rows pgx.Rows) error {
			if !rows.Next() {
				return nil
			}
			found = true
			return rows.Scan(&key, &version, &state)
		})
	return key, version, state, found, err
}

func (a txn) SupersedeEffect(_ context.Context, id int64, now time.Time) error {
	a.t.held.queueEffects(a.t)
	a.t.exec("supersede effect", `UPDATE effects SET state = 'superseded', updated_at = $1 WHERE id = $2`, now, id)
	return nil
}

// InsertEffect holds the insert: a group's inserts go as one statement
// (heldeffects.go), sent before a supersede step of the same entity and
// effect name, before any read or single-effect write, and at Flush.
//
// Pruning cannot delete the row between that statement's snapshot and its
// insert (which would let ON CONFLICT wait for the delete and then insert
// a second effect under a key whose tombstone it did not see): ReadGroup
// holds the entity's row lock until the commit, and pruning deletes an
// effect only under that entity's row lock (retention.go).
func (a txn) InsertEffect(_ context.Context, w *store.ApplyRow, p *store.FlowApplyParams, e *store.EffectInsert, claim *store.InsertClaim, out *store.InsertOutcome) error {
	a.t.held.insertEffect(a.t, heldEffect{
		key: e.EpisodeKey, flow: w.Flow, entity: w.Entity, version: p.Version, versionSort: p.VersionSort,
		effect: e.Effect, destination: e.Destination, request: string(store.StateJSON(e.Request)), eventPK: w.EventPK,
		causationID: e.CausationID, hop: int64(e.Hop), at: p.Now, compensates: e.Compensates,
		deadline: e.DeadlineAt, warn: e.DeadlineWarnAt, onDeadline: e.OnDeadline, claim: claim, out: out,
	})
	return nil
}

func (a txn) SettleWork(_ context.Context, p *store.FlowApplyParams, res *store.FlowApplyResult, sortKey string) error {
	a.t.held.settleWork(heldWork{id: p.WorkID, at: p.Now, disposition: string(res.Disposition), reason: res.Reason, versionSort: sortKey})
	return nil
}

// CountDown: GREATEST(settled_key, ”) leaves the key alone, so a dead
// letter does not catch the entity up.
func (a txn) CountDown(_ context.Context, w *store.ApplyRow, settledKey string) error {
	a.t.held.countDown(w, settledKey)
	return nil
}

func (a txn) Audit(_ context.Context, as ...*store.AuditInsertParams) error {
	for _, p := range as {
		a.t.audit(p)
	}
	return nil
}

// EventWork locks the event FOR NO KEY UPDATE, not FOR UPDATE: effect
// inserts earlier in the same transaction hold FOR KEY SHARE on the event
// row (their foreign key), and FOR UPDATE conflicts with another
// transaction's KEY SHARE, so two flows settling one event would
// deadlock. NO KEY UPDATE still serialises the settlers, and it is the
// level the disposition UPDATE takes anyway.
//
// The lock and the read are two statements in one round trip: a statement
// that waited for a row lock sees the rows it joins as of its start, so a
// read in the locking statement would miss the other settler's work row
// and leave the event accepted forever; the next statement takes a fresh
// snapshot after the lock is held.
func (a txn) EventWork(ctx context.Context, pk int64) (*store.EventHead, []store.EventWorkRow, error) {
	var head *store.EventHead
	var out []store.EventWorkRow
	a.t.exec("lock event", `SELECT 1 FROM events WHERE pk = $1 FOR NO KEY UPDATE`, pk)
	err := a.t.query(ctx, "read event work", `SELECT e.source, e.event_id, e.entity, e.disposition, w.flow, w.done_at IS NULL, w.replay_id, w.disposition
		FROM events e LEFT JOIN work w ON w.event_pk = e.pk WHERE e.pk = $1`,
		[]any{pk}, func(rows pgx.Rows) error {
			for rows.Next() {
				var h store.EventHead
				var flow *string
				var pending *bool
				var replayID *int64
				var d *string
				if err := rows.Scan(&h.Source, &h.EventID, &h.Entity, &h.Disposition, &flow, &pending, &replayID, &d); err != nil {
					return err
				}
				head = &h
				if pending != nil {
					out = append(out, store.EventWorkRow{Flow: *flow, Pending: *pending, ReplayID: *replayID, Disposition: store.Disposition(*d)})
				}
			}
			return nil
		})
	if err == nil && head == nil {
		err = errors.New("no such event")
	}
	return head, out, err
}

func (a txn) SetDisposition(_ context.Context, pk int64, d store.Disposition) error {
	a.t.held.setDisposition(pk, d)
	return nil
}

// Flush sends the held-back statements (the audit rows wait for COMMIT).
func (a txn) Flush(ctx context.Context) error { return a.t.flush(ctx) }

func (a txn) EffectAskedBy(_ context.Context, key string, eventPK int64) error {
	a.t.exec("name event on effect", `UPDATE effects SET later_event_pks = later_event_pks || $2::bigint
		WHERE episode_key = $1 AND source_event_pk <> $2 AND NOT ($2 = ANY (later_event_pks))`, key, eventPK)
	return nil
}
