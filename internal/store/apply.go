package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// The ledger's rules for settling one work item live here, once, and the
// drivers only run the statements (docs/architecture.md, "Where the rules
// live"). A driver hands RunFlowApply an ApplyTx bound to its open
// transaction; what each call must do in SQL is written on the method.
// Writes that return nothing may be deferred by the driver until its next
// read or the commit (the PostgreSQL driver pipelines them), so an
// implementation reports a failed deferred write at the next call that
// returns an error, and the whole transaction rolls back.

// ApplyRow is one unsettled work item as the rules settle it: the work
// row, its event and the entity's projection as it stands before the item.
type ApplyRow struct {
	Flow, Entity string
	EventPK      int64
	ReplayID     int64
	OrderKey     string
	// The event, for audit rows.
	Source, EventID string
	// The projection as it stands: VersionSort "" when none was applied.
	Version, VersionSort string
	State                []byte
	// Release, when set, is the lease token to free with this item's
	// count down, which leaves the entity with no pending work
	// (FlowApplyParams.ReleaseIfDrained): the entity's own update frees
	// it, one write of the row instead of two.
	Release string
}

// GroupRead is what ApplyTx.ReadGroup returns: each submission's entity
// projection and every work row of the group's events (the items' own
// among them).
type GroupRead struct {
	// Entities has one entry per submission, in order: nil when its lease
	// no longer holds.
	Entities []*EntityRead
	Work     []BatchWork
}

// EntityRead is an entity's projection: VersionSort "" when none was
// applied.
type EntityRead struct {
	Version, VersionSort string
	State                []byte
	// Pending is the entity's count of pending work items, as read under
	// the fence: the rules count it down item by item, and nothing else
	// can change it before the commit (the entity is locked, or the
	// database has one writer).
	Pending int64
}

// BatchWork is one work row with its event. Done is true when the item
// was settled before (a retried apply): Disposition and Reason are its
// outcome, and the rules write nothing for it.
type BatchWork struct {
	WorkID       int64
	Flow, Entity string
	EventPK      int64
	ReplayID     int64
	OrderKey     string
	Done         bool
	Disposition  Disposition
	Reason       string
	Event        EventHead
}

// SupersededEffect is one pending effect that a newer version replaced.
type SupersededEffect struct {
	EpisodeKey string
	Version    string
}

// InsertOutcome is InsertEffect's answer: whether the effect was inserted
// and, when its episode key was held already, the stored request.
type InsertOutcome struct {
	Inserted bool
	Existing []byte
	// Claimed is set when the effect was inserted claimed (InsertClaim),
	// with its ID, its Request as stored (PostgreSQL normalises JSON) and
	// its source event's TraceContext: what the claim answers.
	Claimed      bool
	ID           int64
	Request      []byte
	TraceContext string
}

// InsertClaim asks InsertEffect to insert its effect already claimed,
// as EffectClaim would leave it (state submitting, lease_token Token,
// lease_until and next_attempt_at Until, updated_at and claimed_at Now),
// when the claim would take it: the claim would take no other effect at
// its destination at Now (none is due there, MaxRedrives the re-drive
// limit, but those an older version in flight holds back) and no effect
// of the same flow, entity and name is in flight (NoneInFlightSQL).
// Otherwise it is inserted approved, as without a claim (flowclaim.go).
type InsertClaim struct {
	Token       string
	Now, Until  time.Time
	MaxRedrives int
}

// EventWorkRow is one work row of an event, as SettleEvent reads them.
type EventWorkRow struct {
	Flow        string
	Pending     bool
	ReplayID    int64
	Disposition Disposition
}

// EventHead is an event's identity and disposition.
type EventHead struct {
	Source, EventID, Entity string
	Disposition             Disposition
}

// ApplyTx is one driver transaction as the ledger's rules use it.
//
// Some calls promise an answer through a pointer instead of returning it
// (SupersedeOlder, InsertEffect): a driver may hold such a
// statement back and send it with the next one that must answer at once,
// or with Flush, and fills the answer by the time that call returns. The
// statements still run in the order of the calls, so the transaction
// means what it would mean statement by statement; only the rules learn
// some answers later, and they decide nothing on them but counts and
// audit rows, which they write after Flush.
type ApplyTx interface {
	// ReadGroup fences and reads for submissions of work items, each
	// submission the items of one leased entity (the lease of its first
	// item; every item shares it), no two for one entity. For each
	// submission it checks that the lease's token still holds it and that
	// it runs past the first item's Now (its Entities entry is nil
	// otherwise) and keeps the entities it holds locked until the commit
	// (so no claimer takes one over halfway), taking them in (flow,
	// entity) order, the order every writer locks entities in. Then it
	// takes the locks EventWork takes on the events of the items
	// (WorkID), in pk order, and only then reads the projections and every
	// work row of those events with the event: read after the locks are
	// held, the rows include what another flow's settler committed before
	// it let go of an event. An item that does not exist is absent from
	// Work.
	ReadGroup(ctx context.Context, subs [][]*FlowApplyParams) (*GroupRead, error)
	// LoopVisit records the first visit of causationID in flow (by
	// eventPK) unless one exists, and returns the first visit's event pk.
	// Concurrent first visits must serialise: exactly one is first.
	LoopVisit(ctx context.Context, flow, causationID string, eventPK int64, now time.Time) (int64, error)
	// WriteProjection sets the entity's version, version_sort, state,
	// applied_event_pk and updated_at from p, and also counts the settled
	// item down: pending - 1, settled_key = max(settled_key, w.OrderKey).
	// With w.Release set (the rules know the count reaches 0), the same
	// write frees the lease that token holds: ReadGroup fenced it, so the
	// token is still this group's.
	WriteProjection(ctx context.Context, w *ApplyRow, p *FlowApplyParams) error
	// SupersedeOlder moves the entity's effects named name that are not
	// compensations, still approved or retry_wait and older than p's
	// version (version_sort < p.VersionSort, or <> when !p.Ordered) to
	// superseded, and puts them in *out (see ApplyTx on answers).
	SupersedeOlder(ctx context.Context, w *ApplyRow, name string, p *FlowApplyParams, out *[]SupersededEffect) error
	// LockEffect reads effect id for a compensation decision and, where
	// the database has row locks, locks it until the commit (so a
	// delivery claim cannot send it between decision and commit).
	// found is false when no such effect exists.
	LockEffect(ctx context.Context, id int64) (key, version string, state EffectState, found bool, err error)
	// SupersedeEffect moves effect id to superseded.
	SupersedeEffect(ctx context.Context, id int64, now time.Time) error
	// InsertEffect inserts e (state approved, or claimed as claim asks
	// when claim is not nil) unless its episode key exists, and answers in
	// *out (see ApplyTx on answers) whether it was inserted (and claimed)
	// and, when the key exists, the stored request, for the key-conflict
	// comparison.
	InsertEffect(ctx context.Context, w *ApplyRow, p *FlowApplyParams, e *EffectInsert, claim *InsertClaim, out *InsertOutcome) error
	// SettleWork marks work item p.WorkID done with the disposition,
	// reason and sortKey (AppliedSort).
	SettleWork(ctx context.Context, p *FlowApplyParams, res *FlowApplyResult, sortKey string) error
	// CountDown counts a settled item that wrote no projection off the
	// entity: pending - 1, settled_key = max(settled_key, settledKey),
	// and frees the lease as WriteProjection does when w.Release is set.
	CountDown(ctx context.Context, w *ApplyRow, settledKey string) error
	// Audit appends audit rows, in order.
	Audit(ctx context.Context, as ...*AuditInsertParams) error
	// EventWork locks event pk against other settlers (two flows settling
	// items of one event must not both see the other's item pending) and
	// returns it with every work row it has.
	EventWork(ctx context.Context, pk int64) (*EventHead, []EventWorkRow, error)
	// SetDisposition sets event pk's disposition.
	SetDisposition(ctx context.Context, pk int64, d Disposition) error
	// EffectAskedBy records that event eventPK asked for the effect with
	// episode key key, which exists already: the event is appended to
	// the effect's later source events (its later_event_pks) unless it is
	// the effect's source event or among them already. A key that only a
	// tombstone holds changes nothing.
	EffectAskedBy(ctx context.Context, key string, eventPK int64) error
	// EntityLeaseFree frees the lease p.Lease names while its token still
	// holds it, and defers the entity to p.RetryAt when that is set (its
	// not_before stays otherwise); a lease another worker holds now is
	// left alone.
	EntityLeaseFree(ctx context.Context, p *EntityReleaseParams) error
	// Flush sends what the driver holds back and fills every answer it
	// promised.
	Flush(ctx context.Context) error
}

// errNoWork is the rules' answer for a work item that does not exist.
var errNoWork = errors.New("no such work item")

// Audit actions written by the ledger's rules.
const (
	ActionDeadLettered     = "dead_lettered"
	ActionLoopHopLimit     = "loop_hop_limit"
	ActionLoopBlocked      = "loop_blocked"
	ActionKeyConflict      = "key_conflict"
	ActionEffectSuperseded = "effect_superseded"
	ActionEffectApproved   = "effect_approved"
	actionEffectSkipped    = "effect_skipped"
	actionWorkSettled      = "work_settled"
	actionDisposition      = "disposition"
	// ActionTenantMismatch is a delivery refused on receipt because its
	// account is not the source's tenant.
	ActionTenantMismatch = "tenant_mismatch"
)

// runFlowApply settles one work item inside tx: the feedback-loop guard,
// the revision guard, the projection, superseding and inserting effects
// behind their episode keys, the work row, the event's aggregate
// disposition and the drained release. Any error leaves tx to be rolled
// back whole.
func runFlowApply(ctx context.Context, tx ApplyTx, p *FlowApplyParams) (*FlowApplyResult, error) {
	out, err := runFlowApplyBatch(ctx, tx, []*FlowApplyParams{p})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// runFlowApplyBatch settles ps, work items of one leased entity, in order
// inside tx (FlowApplyBatch), as RunFlowApply would one by one.
func runFlowApplyBatch(ctx context.Context, tx ApplyTx, ps []*FlowApplyParams) ([]*FlowApplyResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	out, err := runFlowApplyGroup(ctx, tx, [][]*FlowApplyParams{ps}, nil)
	if err != nil {
		return nil, err
	}
	return out[0].Results, out[0].Err
}

// runFlowApplyGroup settles submissions of work items, each the items of
// one leased entity, inside tx (FlowApplyGroup), each submission as
// RunFlowApplyBatch would alone. A submission whose lease no longer holds
// gets ErrLeaseLost in its outcome and writes nothing; any other error
// fails the whole group (the caller rolls tx back and may settle the
// submissions one by one).
//
// One read at the start answers every question the rules ask of the
// database before they write (ReadGroup). Each entity's projection is
// then carried from item to item in memory (WriteProjection is the only
// statement that changes it, and the entity is locked), and so are the
// events' work rows (the events are locked, and only this transaction
// settles their items of these entities). The writes follow in order, and
// the audit rows, which need the answers of the supersede and insert
// statements, are written after one Flush, in the order the rules
// produced them. A group costs a few round trips instead of four per
// item. With claims, the effects the group writes are inserted claimed
// where those claims would take them (flowclaim.go).
func runFlowApplyGroup(ctx context.Context, tx ApplyTx, subs [][]*FlowApplyParams, claims *insertClaims) ([]FlowApplyOutcome, error) {
	seen := map[[2]string]bool{}
	for _, ps := range subs {
		if len(ps) == 0 {
			return nil, errors.New("an empty submission")
		}
		lease := ps[0].Lease
		for _, p := range ps {
			if p.Lease == nil {
				return nil, errors.New("no lease")
			}
			if p.Lease.Flow != lease.Flow || p.Lease.Entity != lease.Entity || p.Lease.Token != lease.Token {
				return nil, errors.New("the items of one submission must share one lease")
			}
		}
		k := [2]string{lease.Flow, lease.Entity}
		if seen[k] {
			return nil, fmt.Errorf("two submissions for entity %s/%s", lease.Flow, lease.Entity)
		}
		seen[k] = true
	}
	rd, err := tx.ReadGroup(ctx, subs)
	if err != nil {
		return nil, err
	}
	g := newApplyGroup(tx, rd)
	g.claims = claims
	out := make([]FlowApplyOutcome, len(subs))
	for si, ps := range subs {
		ent := rd.Entities[si]
		if ent == nil {
			out[si].Err = ErrLeaseLost
			continue
		}
		es := &entityState{version: ent.Version, versionSort: ent.VersionSort, state: ent.State, pending: ent.Pending}
		out[si].Results = make([]*FlowApplyResult, len(ps))
		for i, p := range ps {
			res, err := g.apply(ctx, es, p)
			if err != nil {
				if len(ps) == 1 {
					return nil, err
				}
				return nil, fmt.Errorf("item %d of %d (work %d): %w", i+1, len(ps), p.WorkID, err)
			}
			out[si].Results[i] = res
		}
	}
	if err := tx.Flush(ctx); err != nil {
		return nil, err
	}
	for _, f := range g.finish {
		if err := f(); err != nil {
			return nil, err
		}
	}
	if len(g.audits) > 0 {
		if err := tx.Audit(ctx, g.audits...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// FlowApplyOutcome is one submission's outcome in a group.
type FlowApplyOutcome struct {
	Results []*FlowApplyResult
	Err     error
}

// applyGroup is one RunFlowApplyGroup: what it read, carried forward.
type applyGroup struct {
	tx     ApplyTx
	work   map[int64]*BatchWork   // by work id
	events map[int64][]*BatchWork // an event's work rows, by event pk
	// finish runs after Flush, in order: the audit rows and the counts
	// that wait for answers. The audit rows they emit are written
	// together at the end, in that order: one statement where a database
	// takes several rows in one (ApplyTx.Audit).
	finish []func() error
	audits []*AuditInsertParams
	// claims, when set, are the delivery worker's claims that the
	// group's effect inserts take first.
	claims *insertClaims
}

// entityState is an entity's projection as the items so far left it.
type entityState struct {
	version, versionSort string
	state                []byte
	pending              int64
}

func newApplyGroup(tx ApplyTx, rd *GroupRead) *applyGroup {
	g := &applyGroup{tx: tx, work: map[int64]*BatchWork{}, events: map[int64][]*BatchWork{}}
	for i := range rd.Work {
		w := &rd.Work[i]
		if g.work[w.WorkID] != nil {
			continue
		}
		g.work[w.WorkID] = w
		g.events[w.EventPK] = append(g.events[w.EventPK], w)
	}
	return g
}

// audit queues an audit row behind the ones before it.
func (g *applyGroup) audit(a *AuditInsertParams) {
	g.finish = append(g.finish, func() error { g.emit(a); return nil })
}

// emit adds an audit row, from a finish step, to the rows written in one
// call once every step has run.
func (g *applyGroup) emit(a *AuditInsertParams) { g.audits = append(g.audits, a) }

// later queues f behind the audit rows before it.
func (g *applyGroup) later(f func() error) { g.finish = append(g.finish, f) }

// apply settles one item of the entity es (RunFlowApply's rules).
func (g *applyGroup) apply(ctx context.Context, es *entityState, p *FlowApplyParams) (*FlowApplyResult, error) {
	tx := g.tx
	bw := g.work[p.WorkID]
	if bw == nil {
		return nil, errNoWork
	}
	if bw.Flow != p.Lease.Flow || bw.Entity != p.Lease.Entity {
		return nil, fmt.Errorf("work item belongs to %s/%s, not the leased entity", bw.Flow, bw.Entity)
	}
	if p.EventPK != 0 && p.EventPK != bw.EventPK {
		return nil, fmt.Errorf("work item is for event %d, not %d", bw.EventPK, p.EventPK)
	}
	if bw.Done {
		return &FlowApplyResult{Disposition: bw.Disposition, Reason: bw.Reason}, nil
	}
	w := &ApplyRow{Flow: bw.Flow, Entity: bw.Entity, EventPK: bw.EventPK, ReplayID: bw.ReplayID, OrderKey: bw.OrderKey,
		Source: bw.Event.Source, EventID: bw.Event.EventID,
		Version: es.version, VersionSort: es.versionSort, State: es.state}

	res := &FlowApplyResult{}
	// Every item settled here counts its entity down once (the
	// projection's write, or CountDown): the one that leaves nothing
	// pending frees the lease with that write when asked to.
	es.pending--
	if p.ReleaseIfDrained && es.pending == 0 {
		w.Release, res.Released = p.Lease.Token, true
	}
	audit := func(action, detail string) {
		g.audit(&AuditInsertParams{At: p.Now, Actor: p.Actor, Action: action,
			Source: w.Source, EventID: w.EventID, Entity: w.Entity, Detail: detail})
	}
	subject := fmt.Sprintf("flow %s entity %s", w.Flow, w.Entity)

	decided := false
	switch {
	case p.Fail != "":
		res.Disposition, res.Reason, decided = DispositionDeadLettered, p.Fail, true
		audit(ActionDeadLettered, subject+": "+p.Fail)
	case p.CausationID != "" && p.MaxHops > 0 && p.Hop >= p.MaxHops:
		res.Disposition, decided = DispositionDeadLettered, true
		res.Reason = fmt.Sprintf("loop_hop_limit: causation %s reached hop %d (ceiling %d)", p.CausationID, p.Hop, p.MaxHops)
		audit(ActionLoopHopLimit, subject+": "+res.Reason)
	case p.CausationID != "":
		first, err := tx.LoopVisit(ctx, w.Flow, p.CausationID, w.EventPK, p.Now)
		if err != nil {
			return nil, fmt.Errorf("record loop visit: %w", err)
		}
		if first != w.EventPK {
			res.Disposition, decided = DispositionDuplicate, true
			res.Reason = fmt.Sprintf("loop_blocked: causation %s already visited flow %s with event %d", p.CausationID, w.Flow, first)
			audit(ActionLoopBlocked, subject+": "+res.Reason)
		}
	}

	if !decided {
		res.Disposition, res.Reason = revisionGuard(w.Version, w.VersionSort, func() bool { return JSONEqual(w.State, StateJSON(p.State)) }, p)
		if res.Disposition == DispositionDeadLettered { // the guard's only dead letter: version_conflict
			audit(ActionDeadLettered, subject+": "+res.Reason)
			audit(ActionKeyConflict, versionConflictDetail(subject, p.Version))
		}
		if res.Disposition == DispositionApplied {
			if err := g.applyEffects(ctx, p, w, res, audit); err != nil {
				return nil, err
			}
			es.version, es.versionSort, es.state = p.Version, p.VersionSort, StateJSON(p.State)
		}
	}

	if err := tx.SettleWork(ctx, p, res, appliedSort(res, p)); err != nil {
		return nil, fmt.Errorf("settle work: %w", err)
	}
	bw.Done, bw.Disposition, bw.Reason = true, res.Disposition, res.Reason
	if res.Disposition != DispositionApplied { // WriteProjection counted it down
		if err := tx.CountDown(ctx, w, settledKey(res, w.OrderKey)); err != nil {
			return nil, fmt.Errorf("count pending: %w", err)
		}
	}
	audit(actionWorkSettled, settledDetail(subject, res, p.Version))
	if err := g.settleEvent(ctx, w.EventPK, w.ReplayID, p.Now, p.Actor); err != nil {
		return nil, err
	}
	return res, nil
}

// applyEffects writes the projection, supersedes older pending effects of
// the same names and inserts the new effects behind their episode keys.
func (g *applyGroup) applyEffects(ctx context.Context, p *FlowApplyParams, w *ApplyRow, res *FlowApplyResult, audit func(action, detail string)) error {
	tx := g.tx
	if err := tx.WriteProjection(ctx, w, p); err != nil {
		return fmt.Errorf("update projection: %w", err)
	}
	var sups [][]SupersededEffect
	// An entity with nothing applied before has no effects to supersede:
	// effects are inserted only here, after the projection's write, and
	// no entity's projection is ever cleared (compensations, the only
	// other effects of a flow's entity, are not superseded). Skipping
	// the search saves the writer an index read per effect name on every
	// entity's first event, most of them where each event is an entity.
	if w.VersionSort != "" {
		names := effectNames(p.Effects)
		sups = make([][]SupersededEffect, len(names))
		for i, name := range names {
			if err := tx.SupersedeOlder(ctx, w, name, p, &sups[i]); err != nil {
				return fmt.Errorf("supersede %s: %w", name, err)
			}
		}
	}
	g.later(func() error {
		for _, sup := range sups {
			keys := make([]string, len(sup))
			for i, s := range sup {
				keys[i] = fmt.Sprintf("%s (version %s superseded by %s)", s.EpisodeKey, s.Version, p.Version)
			}
			slices.Sort(keys)
			for _, k := range keys {
				g.emit(&AuditInsertParams{At: p.Now, Actor: p.Actor, Action: ActionEffectSuperseded,
					Source: w.Source, EventID: w.EventID, Entity: w.Entity, Detail: k})
			}
			res.Superseded += len(keys)
		}
		return nil
	})
	for _, e := range p.Effects {
		if e.Compensates != 0 {
			insert, err := g.compensationNeeded(ctx, p, e, res, audit)
			if err != nil {
				return err
			}
			if !insert {
				continue
			}
		}
		o := &InsertOutcome{}
		c, err := g.claims.take(w, p, e, o)
		if err != nil {
			return err
		}
		if err := tx.InsertEffect(ctx, w, p, e, c, o); err != nil {
			return fmt.Errorf("insert effect %s: %w", e.EpisodeKey, err)
		}
		g.later(func() error {
			if o.Inserted {
				res.EffectsInserted++
				g.emit(&AuditInsertParams{At: p.Now, Actor: p.Actor, Action: ActionEffectApproved,
					Source: w.Source, EventID: w.EventID, Entity: w.Entity, Detail: e.EpisodeKey})
				return nil
			}
			res.EffectsExisting++
			// The effect names every event that asked for it, not only
			// the audit trail.
			if err := tx.EffectAskedBy(ctx, e.EpisodeKey, w.EventPK); err != nil {
				return fmt.Errorf("name event %d on effect %s: %w", w.EventPK, e.EpisodeKey, err)
			}
			// The unique index swallowed the insert. The same key with
			// another request is a key built from too little (two
			// different effects collapsed into one), recorded for
			// key_conflicts instead of vanishing. Requests compare as
			// JSON values: key order and spacing do not count.
			if JSONEqual(o.Existing, StateJSON(e.Request)) {
				return nil
			}
			g.emit(&AuditInsertParams{At: p.Now, Actor: p.Actor, Action: ActionKeyConflict,
				Source: w.Source, EventID: w.EventID, Entity: w.Entity, Detail: episodeConflictDetail(e.EpisodeKey)})
			return nil
		})
	}
	for _, e := range p.Skipped {
		audit(actionEffectSkipped, e.EpisodeKey+": "+e.Reason)
		res.EffectsSkipped++
	}
	return nil
}

// compensationNeeded decides, from the original's state in this
// transaction, whether a compensation (compensate_when held) is inserted:
// an original never sent is superseded instead, one that ended superseded
// or dead needs nothing undone, any other is compensated.
func (g *applyGroup) compensationNeeded(ctx context.Context, p *FlowApplyParams, e *EffectInsert,
	res *FlowApplyResult, audit func(action, detail string)) (bool, error) {
	key, version, state, found, err := g.tx.LockEffect(ctx, e.Compensates)
	if err != nil {
		return false, fmt.Errorf("read effect %d to compensate: %w", e.Compensates, err)
	}
	if !found {
		audit(actionEffectSkipped, missingOriginalDetail(e))
		return false, nil
	}
	switch compensationDecision(state) {
	case compensateSupersede:
		if err := g.tx.SupersedeEffect(ctx, e.Compensates, p.Now); err != nil {
			return false, fmt.Errorf("supersede effect %d: %w", e.Compensates, err)
		}
		res.Superseded++
		audit(ActionEffectSuperseded, compensationSupersededDetail(key, version, p.Version))
		return false, nil
	case compensateNothing:
		return false, nil
	}
	return true, nil
}

// settleEvent is SettleEvent on the rows the batch read and settled.
func (g *applyGroup) settleEvent(ctx context.Context, pk, replayID int64, now time.Time, actor string) error {
	ws := g.events[pk]
	if len(ws) == 0 {
		return fmt.Errorf("aggregate event %d: no such event", pk)
	}
	rows := make([]EventWorkRow, len(ws))
	for i, w := range ws {
		rows[i] = EventWorkRow{Flow: w.Flow, Pending: !w.Done, ReplayID: w.ReplayID, Disposition: w.Disposition}
	}
	ev := ws[0].Event
	agg, ok := eventAggregate(&ev, rows, replayID)
	if !ok {
		return nil
	}
	if err := g.tx.SetDisposition(ctx, pk, agg); err != nil {
		return fmt.Errorf("set disposition of event %d: %w", pk, err)
	}
	for _, w := range ws {
		w.Event.Disposition = agg
	}
	g.audit(&AuditInsertParams{At: now, Actor: actor, Action: actionDisposition,
		Source: ev.Source, EventID: ev.EventID, Entity: ev.Entity, Detail: fmt.Sprintf("%s -> %s", ev.Disposition, agg)})
	return nil
}

// settleEvent applies the aggregate rule once an event has no pending
// work: the disposition becomes the aggregate of each flow's latest pass,
// but only over accepted or dead_lettered (a replay repairs a dead letter
// and never downgrades an applied event).
func settleEvent(ctx context.Context, tx ApplyTx, eventPK, replayID int64, now time.Time, actor string) error {
	ev, rows, err := tx.EventWork(ctx, eventPK)
	if err != nil {
		return fmt.Errorf("aggregate event %d: %w", eventPK, err)
	}
	agg, ok := eventAggregate(ev, rows, replayID)
	if !ok {
		return nil
	}
	if err := tx.SetDisposition(ctx, eventPK, agg); err != nil {
		return fmt.Errorf("set disposition of event %d: %w", eventPK, err)
	}
	return tx.Audit(ctx, &AuditInsertParams{At: now, Actor: actor, Action: actionDisposition,
		Source: ev.Source, EventID: ev.EventID, Entity: ev.Entity, Detail: fmt.Sprintf("%s -> %s", ev.Disposition, agg)})
}

// eventAggregate is the disposition an event moves to once its pass
// replayID is settled, and false when it stays: work is still pending,
// the pass has no rows, it has the aggregate already, or it is past
// accepted and dead_lettered. The aggregate is over each flow's latest
// pass, not over the pass alone: a replay that took the event through
// some of its flows (a replay of one flow, or one that left out a route
// failing again) must not settle it by those flows while another flow's
// dead letter still stands.
func eventAggregate(ev *EventHead, rows []EventWorkRow, replayID int64) (Disposition, bool) {
	latest := map[string]EventWorkRow{}
	inPass := false
	for _, r := range rows {
		if r.Pending {
			return "", false
		}
		inPass = inPass || r.ReplayID == replayID
		if l, ok := latest[r.Flow]; !ok || r.ReplayID > l.ReplayID {
			latest[r.Flow] = r
		}
	}
	if !inPass {
		return "", false
	}
	ds := make([]Disposition, 0, len(latest))
	for _, r := range latest {
		ds = append(ds, r.Disposition)
	}
	agg := aggregate(ds)
	if ev.Disposition == agg || (ev.Disposition != DispositionAccepted && ev.Disposition != DispositionDeadLettered) {
		return "", false
	}
	return agg, true
}

// aggregate is the event disposition over its flows' work rows (each
// flow's latest pass, see eventAggregate): a dead letter anywhere wins,
// then applied, then duplicate, else stale.
func aggregate(ds []Disposition) Disposition {
	for _, d := range []Disposition{DispositionDeadLettered, DispositionApplied, DispositionDuplicate} {
		if slices.Contains(ds, d) {
			return d
		}
	}
	return DispositionStale
}

// revisionGuard decides what an event's version does to the projection.
// Versions compare as Go strings, i.e. bytes, like the drivers' byte-order
// (COLLATE "C" on PostgreSQL) key columns. sameState compares the states
// (decoding both): it is asked only when the versions are equal, which is
// rare, and not for every event.
func revisionGuard(curVersion, curSort string, sameState func() bool, p *FlowApplyParams) (Disposition, string) {
	if curSort == "" {
		return DispositionApplied, ""
	}
	switch {
	case p.VersionSort == curSort:
		if sameState() {
			return DispositionDuplicate, fmt.Sprintf("version %s already applied", p.Version)
		}
		return DispositionDeadLettered, fmt.Sprintf("version_conflict: version %s already applied with a different state", p.Version)
	case !p.Ordered:
		// A different hash was refetched after the current one: newer.
		return DispositionApplied, ""
	case p.VersionSort > curSort:
		return DispositionApplied, ""
	default:
		return DispositionStale, fmt.Sprintf("version %s is older than applied %s", p.Version, curVersion)
	}
}

func settledDetail(subject string, res *FlowApplyResult, version string) string {
	if res.Disposition == DispositionApplied {
		return fmt.Sprintf("%s: applied %s", subject, version)
	}
	return fmt.Sprintf("%s: %s: %s", subject, res.Disposition, res.Reason)
}

// effectNames returns the distinct effect names in first-seen order. A
// compensation supersedes nothing by name: it undoes one effect, and the
// decision about that effect is compensationNeeded's.
func effectNames(es []*EffectInsert) []string {
	var out []string
	for _, e := range es {
		if e.Compensates == 0 && !slices.Contains(out, e.Effect) {
			out = append(out, e.Effect)
		}
	}
	return out
}

// StateJSON is the stored form of a JSON value: absent is JSON null.
func StateJSON(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// unroutedDetail is the audit text of an event that no flow subscribes
// to, stored as unrouted on receipt (from is "") or by the router
// (from "accepted").
func unroutedDetail(from, eventType string) string {
	if from != "" {
		return fmt.Sprintf("%s -> unrouted: no flow subscribes to type %q", from, eventType)
	}
	return fmt.Sprintf("unrouted: no flow subscribes to type %q", eventType)
}

// UnroutedAudit is the audit row of an event stored unrouted on receipt
// (DeliveryInput.Unrouted), written with the event's first delivery only.
func UnroutedAudit(d *DeliveryInput) *AuditInsertParams {
	return &AuditInsertParams{At: d.ReceivedAt, Actor: "receiver", Action: actionDisposition,
		Source: d.Source, EventID: d.EventID, Entity: d.Entity, Detail: unroutedDetail("", d.Type)}
}

// RouteFailedDetail is the audit text of a route that failed (its
// entity or order key could not be computed), dead-lettering the event
// for that flow.
func RouteFailedDetail(flow, entity, reason string) string {
	return fmt.Sprintf("flow %s entity %s: route failed: %s", flow, entity, reason)
}
