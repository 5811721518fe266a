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

// ApplyRow is what ApplyTx.ApplyRead returns: the work item, its event and
// the entity's projection, read under the entity's lease.
type ApplyRow struct {
	Flow, Entity string
	EventPK      int64
	ReplayID     int64
	OrderKey     string
	// Done is true when the item was settled before (a retried apply):
	// Disposition and Reason are its outcome and nothing is written.
	Done        bool
	Disposition Disposition
	Reason      string
	// The event, for audit rows.
	Source, EventID string
	// The projection as it stands: VersionSort "" when none was applied.
	Version, VersionSort string
	State                []byte
}

// SupersededEffect is one pending effect that a newer version replaced.
type SupersededEffect struct {
	EpisodeKey string
	Version    string
}

// EventWorkRow is one work row of an event, as SettleEvent reads them.
type EventWorkRow struct {
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
type ApplyTx interface {
	// ApplyRead checks that p.Lease's token still holds the entity's lease
	// and that it runs past p.Now (ErrLeaseLost otherwise), keeps the
	// entity row locked until the commit (so no claimer takes it over
	// halfway), and reads work item p.WorkID with its event and the
	// entity's projection. ErrNoWork when the item does not exist.
	ApplyRead(ctx context.Context, p *FlowApplyParams) (*ApplyRow, error)
	// LoopVisit records the first visit of causationID in flow (by
	// eventPK) unless one exists, and returns the first visit's event pk.
	// Concurrent first visits must serialise: exactly one is first.
	LoopVisit(ctx context.Context, flow, causationID string, eventPK int64, now time.Time) (int64, error)
	// WriteProjection sets the entity's version, version_sort, state,
	// applied_event_pk and updated_at from p, and also counts the settled
	// item down: pending - 1, settled_key = max(settled_key, w.OrderKey).
	WriteProjection(ctx context.Context, w *ApplyRow, p *FlowApplyParams) error
	// SupersedeOlder moves the entity's effects named name that are not
	// compensations, still approved or retry_wait and older than p's
	// version (version_sort < p.VersionSort, or <> when !p.Ordered) to
	// superseded, and returns them.
	SupersedeOlder(ctx context.Context, w *ApplyRow, name string, p *FlowApplyParams) ([]SupersededEffect, error)
	// LockEffect reads effect id for a compensation decision and, where
	// the database has row locks, locks it until the commit (so a
	// delivery claim cannot send it between decision and commit).
	// found is false when no such effect exists.
	LockEffect(ctx context.Context, id int64) (key, version string, state EffectState, found bool, err error)
	// SupersedeEffect moves effect id to superseded.
	SupersedeEffect(ctx context.Context, id int64, now time.Time) error
	// InsertEffect inserts e (state approved) unless its episode key
	// exists; inserted reports which. When it exists, existing is the
	// stored request, for the key-conflict comparison.
	InsertEffect(ctx context.Context, w *ApplyRow, p *FlowApplyParams, e *EffectInsert) (inserted bool, existing []byte, err error)
	// SettleWork marks work item p.WorkID done with the disposition,
	// reason and sortKey (AppliedSort).
	SettleWork(ctx context.Context, p *FlowApplyParams, res *FlowApplyResult, sortKey string) error
	// CountDown counts a settled item that wrote no projection off the
	// entity: pending - 1, settled_key = max(settled_key, settledKey).
	CountDown(ctx context.Context, w *ApplyRow, settledKey string) error
	// Audit appends an audit row.
	Audit(ctx context.Context, a *AuditInsertParams) error
	// EventWork locks event pk against other settlers (two flows settling
	// items of one event must not both see the other's item pending) and
	// returns it with every work row it has.
	EventWork(ctx context.Context, pk int64) (*EventHead, []EventWorkRow, error)
	// SetDisposition sets event pk's disposition.
	SetDisposition(ctx context.Context, pk int64, d Disposition) error
	// ReleaseDrained frees the lease that token holds when the entity has
	// no pending work, and reports whether it did.
	ReleaseDrained(ctx context.Context, flow, entity, token string) (bool, error)
	// LockEvents takes, in pk order, the locks EventWork would take on
	// each of pks, where the database has row locks. A batch settles its
	// events in business order, which two flows sharing the events need
	// not agree on: taking every lock first, in one order, keeps two
	// batches from waiting on each other in a circle.
	LockEvents(ctx context.Context, pks []int64) error
}

// ErrNoWork is ApplyRead's answer for a work item that does not exist.
var ErrNoWork = errors.New("no such work item")

// Audit actions written by the ledger's rules.
const (
	ActionDeadLettered     = "dead_lettered"
	ActionLoopHopLimit     = "loop_hop_limit"
	ActionLoopBlocked      = "loop_blocked"
	ActionKeyConflict      = "key_conflict"
	ActionEffectSuperseded = "effect_superseded"
	ActionEffectApproved   = "effect_approved"
	ActionEffectSkipped    = "effect_skipped"
	ActionWorkSettled      = "work_settled"
	ActionDisposition      = "disposition"
)

// RunFlowApply settles one work item inside tx: the feedback-loop guard,
// the revision guard, the projection, superseding and inserting effects
// behind their episode keys, the work row, the event's aggregate
// disposition and the drained release. Any error leaves tx to be rolled
// back whole.
func RunFlowApply(ctx context.Context, tx ApplyTx, p *FlowApplyParams) (*FlowApplyResult, error) {
	return runFlowApply(ctx, tx, p, nil)
}

// runFlowApply is RunFlowApply with afterRead, when set, run right after
// the fencing read.
func runFlowApply(ctx context.Context, tx ApplyTx, p *FlowApplyParams, afterRead func() error) (*FlowApplyResult, error) {
	if p.Lease == nil {
		return nil, errors.New("no lease")
	}
	w, err := tx.ApplyRead(ctx, p)
	if err != nil {
		return nil, err
	}
	if afterRead != nil {
		if err := afterRead(); err != nil {
			return nil, fmt.Errorf("lock events: %w", err)
		}
	}
	if w.Flow != p.Lease.Flow || w.Entity != p.Lease.Entity {
		return nil, fmt.Errorf("work item belongs to %s/%s, not the leased entity", w.Flow, w.Entity)
	}
	if p.EventPK != 0 && p.EventPK != w.EventPK {
		return nil, fmt.Errorf("work item is for event %d, not %d", w.EventPK, p.EventPK)
	}
	if w.Done {
		return &FlowApplyResult{Disposition: w.Disposition, Reason: w.Reason}, nil
	}

	res := &FlowApplyResult{}
	audit := func(action, detail string) error {
		return tx.Audit(ctx, &AuditInsertParams{At: p.Now, Actor: p.Actor, Action: action,
			Source: w.Source, EventID: w.EventID, Entity: w.Entity, Detail: detail})
	}
	subject := fmt.Sprintf("flow %s entity %s", w.Flow, w.Entity)

	decided := false
	switch {
	case p.Fail != "":
		res.Disposition, res.Reason, decided = DispositionDeadLettered, p.Fail, true
		if err := audit(ActionDeadLettered, subject+": "+p.Fail); err != nil {
			return nil, err
		}
	case p.CausationID != "" && p.MaxHops > 0 && p.Hop >= p.MaxHops:
		res.Disposition, decided = DispositionDeadLettered, true
		res.Reason = fmt.Sprintf("loop_hop_limit: causation %s reached hop %d (ceiling %d)", p.CausationID, p.Hop, p.MaxHops)
		if err := audit(ActionLoopHopLimit, subject+": "+res.Reason); err != nil {
			return nil, err
		}
	case p.CausationID != "":
		first, err := tx.LoopVisit(ctx, w.Flow, p.CausationID, w.EventPK, p.Now)
		if err != nil {
			return nil, fmt.Errorf("record loop visit: %w", err)
		}
		if first != w.EventPK {
			res.Disposition, decided = DispositionDuplicate, true
			res.Reason = fmt.Sprintf("loop_blocked: causation %s already visited flow %s with event %d", p.CausationID, w.Flow, first)
			if err := audit(ActionLoopBlocked, subject+": "+res.Reason); err != nil {
				return nil, err
			}
		}
	}

	if !decided {
		res.Disposition, res.Reason = RevisionGuard(w.Version, w.VersionSort, JSONEqual(w.State, StateJSON(p.State)), p)
		if res.Disposition == DispositionDeadLettered { // the guard's only dead letter: version_conflict
			if err := audit(ActionDeadLettered, subject+": "+res.Reason); err != nil {
				return nil, err
			}
			if err := audit(ActionKeyConflict, VersionConflictDetail(subject, p.Version)); err != nil {
				return nil, err
			}
		}
		if res.Disposition == DispositionApplied {
			if err := applyEffects(ctx, tx, p, w, res, audit); err != nil {
				return nil, err
			}
		}
	}

	if err := tx.SettleWork(ctx, p, res, AppliedSort(res, p)); err != nil {
		return nil, fmt.Errorf("settle work: %w", err)
	}
	if res.Disposition != DispositionApplied { // WriteProjection counted it down
		if err := tx.CountDown(ctx, w, SettledKey(res, w.OrderKey)); err != nil {
			return nil, fmt.Errorf("count pending: %w", err)
		}
	}
	if err := audit(ActionWorkSettled, settledDetail(subject, res, p.Version)); err != nil {
		return nil, err
	}
	if err := SettleEvent(ctx, tx, w.EventPK, w.ReplayID, p.Now, p.Actor); err != nil {
		return nil, err
	}
	if p.ReleaseIfDrained {
		released, err := tx.ReleaseDrained(ctx, w.Flow, w.Entity, p.Lease.Token)
		if err != nil {
			return nil, fmt.Errorf("release drained entity: %w", err)
		}
		res.Released = released
	}
	return res, nil
}

// RunFlowApplyBatch settles ps in order inside tx (FlowApplyBatch).
func RunFlowApplyBatch(ctx context.Context, tx ApplyTx, ps []*FlowApplyParams) ([]*FlowApplyResult, error) {
	out := make([]*FlowApplyResult, len(ps))
	var afterRead func() error
	if len(ps) > 1 {
		// After the first item's fencing read holds the entity (the lock
		// order every writer keeps: entity, then events).
		afterRead = func() error {
			pks := make([]int64, 0, len(ps))
			for _, p := range ps {
				if p.EventPK != 0 {
					pks = append(pks, p.EventPK)
				}
			}
			slices.Sort(pks)
			return tx.LockEvents(ctx, slices.Compact(pks))
		}
	}
	for i, p := range ps {
		res, err := runFlowApply(ctx, tx, p, afterRead)
		afterRead = nil
		if err != nil {
			if len(ps) == 1 {
				return nil, err
			}
			return nil, fmt.Errorf("item %d of %d (work %d): %w", i+1, len(ps), p.WorkID, err)
		}
		out[i] = res
	}
	return out, nil
}

// applyEffects writes the projection, supersedes older pending effects of
// the same names and inserts the new effects behind their episode keys.
func applyEffects(ctx context.Context, tx ApplyTx, p *FlowApplyParams, w *ApplyRow, res *FlowApplyResult, audit func(action, detail string) error) error {
	if err := tx.WriteProjection(ctx, w, p); err != nil {
		return fmt.Errorf("update projection: %w", err)
	}
	for _, name := range effectNames(p.Effects) {
		sup, err := tx.SupersedeOlder(ctx, w, name, p)
		if err != nil {
			return fmt.Errorf("supersede %s: %w", name, err)
		}
		keys := make([]string, len(sup))
		for i, s := range sup {
			keys[i] = fmt.Sprintf("%s (version %s superseded by %s)", s.EpisodeKey, s.Version, p.Version)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if err := audit(ActionEffectSuperseded, k); err != nil {
				return err
			}
		}
		res.Superseded += len(keys)
	}
	for _, e := range p.Effects {
		if e.Compensates != 0 {
			insert, err := compensationNeeded(ctx, tx, p, e, res, audit)
			if err != nil {
				return err
			}
			if !insert {
				continue
			}
		}
		inserted, existing, err := tx.InsertEffect(ctx, w, p, e)
		if err != nil {
			return fmt.Errorf("insert effect %s: %w", e.EpisodeKey, err)
		}
		if !inserted {
			res.EffectsExisting++
			// The unique index swallowed the insert. The same key with
			// another request is a key built from too little (two
			// different effects collapsed into one), recorded for
			// key_conflicts instead of vanishing. Requests compare as
			// JSON values: key order and spacing do not count.
			if !JSONEqual(existing, StateJSON(e.Request)) {
				if err := audit(ActionKeyConflict, EpisodeConflictDetail(e.EpisodeKey)); err != nil {
					return err
				}
			}
			continue
		}
		res.EffectsInserted++
		if err := audit(ActionEffectApproved, e.EpisodeKey); err != nil {
			return err
		}
	}
	for _, e := range p.Skipped {
		if err := audit(ActionEffectSkipped, e.EpisodeKey+": "+e.Reason); err != nil {
			return err
		}
		res.EffectsSkipped++
	}
	return nil
}

// compensationNeeded decides, from the original's state in this
// transaction, whether a compensation (compensate_when held) is inserted:
// an original never sent is superseded instead, one that ended superseded
// or dead needs nothing undone, any other is compensated.
func compensationNeeded(ctx context.Context, tx ApplyTx, p *FlowApplyParams, e *EffectInsert,
	res *FlowApplyResult, audit func(action, detail string) error) (bool, error) {
	key, version, state, found, err := tx.LockEffect(ctx, e.Compensates)
	if err != nil {
		return false, fmt.Errorf("read effect %d to compensate: %w", e.Compensates, err)
	}
	if !found {
		return false, audit(ActionEffectSkipped, MissingOriginalDetail(e))
	}
	switch CompensationDecision(state) {
	case CompensateSupersede:
		if err := tx.SupersedeEffect(ctx, e.Compensates, p.Now); err != nil {
			return false, fmt.Errorf("supersede effect %d: %w", e.Compensates, err)
		}
		res.Superseded++
		return false, audit(ActionEffectSuperseded, CompensationSupersededDetail(key, version, p.Version))
	case CompensateNothing:
		return false, nil
	}
	return true, nil
}

// SettleEvent applies the aggregate rule once an event has no pending
// work: the disposition becomes the aggregate of the pass just settled,
// but only over accepted or dead_lettered (a replay repairs a dead letter
// and never downgrades an applied event).
func SettleEvent(ctx context.Context, tx ApplyTx, eventPK, replayID int64, now time.Time, actor string) error {
	ev, rows, err := tx.EventWork(ctx, eventPK)
	if err != nil {
		return fmt.Errorf("aggregate event %d: %w", eventPK, err)
	}
	var ds []Disposition
	for _, r := range rows {
		if r.Pending {
			return nil
		}
		if r.ReplayID == replayID {
			ds = append(ds, r.Disposition)
		}
	}
	if len(ds) == 0 {
		return nil
	}
	agg := Aggregate(ds)
	if ev.Disposition == agg || (ev.Disposition != DispositionAccepted && ev.Disposition != DispositionDeadLettered) {
		return nil
	}
	if err := tx.SetDisposition(ctx, eventPK, agg); err != nil {
		return fmt.Errorf("set disposition of event %d: %w", eventPK, err)
	}
	return tx.Audit(ctx, &AuditInsertParams{At: now, Actor: actor, Action: ActionDisposition,
		Source: ev.Source, EventID: ev.EventID, Entity: ev.Entity, Detail: fmt.Sprintf("%s -> %s", ev.Disposition, agg)})
}

// Aggregate is the event disposition over the work rows of one pass: a
// dead letter anywhere wins, then applied, then duplicate, else stale.
func Aggregate(ds []Disposition) Disposition {
	for _, d := range []Disposition{DispositionDeadLettered, DispositionApplied, DispositionDuplicate} {
		if slices.Contains(ds, d) {
			return d
		}
	}
	return DispositionStale
}

// RevisionGuard decides what an event's version does to the projection.
// Versions compare as Go strings, i.e. bytes, like the drivers' byte-order
// (COLLATE "C" on PostgreSQL) key columns.
func RevisionGuard(curVersion, curSort string, sameState bool, p *FlowApplyParams) (Disposition, string) {
	if curSort == "" {
		return DispositionApplied, ""
	}
	switch {
	case p.VersionSort == curSort:
		if sameState {
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
