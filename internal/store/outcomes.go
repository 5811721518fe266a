package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Deadlines, compensation and verification: the rules, over the
// statements of OutcomesTx. Their writes are rare and operator- or
// timer-driven, each in a transaction of its own (TxOperate). The effect
// rows they change are read locked (EffectRead with lock) where the
// database has row locks, so a worker's settle of the same effect waits
// for the commit or has committed before the row is read: it never lands
// in between.

// OutcomesTx is the statements of deadlines, compensation and
// verification.
type OutcomesTx interface {
	// EffectRead returns effect id with every field, or nil when there is
	// none. With lock, where the database has row locks, it locks the
	// effect row for update until the commit.
	EffectRead(ctx context.Context, id int64, lock bool) (*Effect, error)
	// EffectDeadlinesDue returns up to Limit effects due for escalation
	// at Now, earliest deadline first, then by id: a deadline at or before
	// Now, a state of DeadlineStates, and not escalated yet, or
	// escalated while submitting with on_deadline dead and since settled
	// into another pending state. Where the database has row locks it
	// locks them for update, passing over rows another transaction holds
	// (a claim, a settle): they are due again on the next call, and a
	// timer never waits behind the delivery path.
	EffectDeadlinesDue(ctx context.Context, p *EffectDeadlinesDueParams) ([]DeadlineDue, error)
	// EffectDeadlineMissed sets effect id's deadline_missed_at to at.
	EffectDeadlineMissed(ctx context.Context, id int64, at time.Time) error
	// EffectKill moves effect id to dead with the params' class, reason,
	// suggested repair and owner, nothing scheduled, updated at Now.
	EffectKill(ctx context.Context, p *EffectKillParams) error
	// EffectCompensationFind returns the id of effect id's compensation,
	// made by an operator (its episode key is key) or by a flow
	// (compensates = id), and found; a tombstone of key (the compensation
	// ran and was pruned) is found with id 0. One statement reads the
	// effects and the tombstones, so a pruning that commits in between is
	// seen whole (the row or its tombstone), never as neither.
	EffectCompensationFind(ctx context.Context, key string, id int64) (found int64, ok bool, err error)
	// EffectCompensationInsert inserts the compensation of effect
	// Original: its episode key and effect name with Suffix appended, its
	// flow, entity, version, version sort, destination, source event,
	// causation and hop, state approved, the params' Request,
	// compensates = Original, created and updated at Now. It returns the
	// new effect's id; an episode key held already is ErrConflict.
	EffectCompensationInsert(ctx context.Context, p *EffectCompensationInsertParams) (int64, error)
	// VerifyCursorGet returns destination's verification cursor (0 when
	// it has none).
	VerifyCursorGet(ctx context.Context, destination string) (int64, error)
	// EffectsOfDestination hands visit the effects of Destination with an
	// id above AfterID, in id order, at most Limit, as long as visit
	// answers true.
	EffectsOfDestination(ctx context.Context, p *EffectsOfDestinationParams, visit func(*Effect) bool) error
	// EffectMismatchMark moves effect id to needs_reconciliation,
	// unscheduled, with mismatch_at and updated_at Now, class
	// unknown_outcome and the params' reason, suggested repair and owner.
	EffectMismatchMark(ctx context.Context, p *EffectMismatchMarkParams) error
}

// EffectDeadlinesDueParams selects the effects due for escalation.
type EffectDeadlinesDueParams struct {
	Now   time.Time
	Limit int
}

// DeadlineDue is one effect due for escalation.
type DeadlineDue struct {
	ID       int64
	State    EffectState
	Deadline time.Time
	// Missed is set when the effect was escalated already; OnDead when
	// its on_deadline is dead.
	Missed, OnDead bool
}

// EffectKillParams moves one effect to dead.
type EffectKillParams struct {
	ID             int64
	Class          ErrorClass
	Reason, Repair string
	Now            time.Time
	// Owner is the effect's owner after (queueOwner).
	Owner string
}

// EffectCompensationInsertParams inserts an operator's compensation.
type EffectCompensationInsertParams struct {
	Original int64
	Suffix   string
	Request  []byte
	Now      time.Time
}

// EffectsOfDestinationParams pages through a destination's effects.
type EffectsOfDestinationParams struct {
	Destination string
	AfterID     int64
	Limit       int
}

// EffectMismatchMarkParams marks a done effect that its destination does
// not hold.
type EffectMismatchMarkParams struct {
	ID             int64
	Reason, Repair string
	Now            time.Time
	// Owner is the effect's owner after (queueOwner).
	Owner string
}

// effectAudit is an audit row about effect f.
func effectAudit(f *Effect, at time.Time, actor, action, detail string) *AuditInsertParams {
	return entityAudit(f.Source, f.SourceEventID, f.Entity, at, actor, action, detail)
}

// entityAudit is an audit row about an effect, named by its source event
// and entity.
func entityAudit(source, eventID, entity string, at time.Time, actor, action, detail string) *AuditInsertParams {
	return &AuditInsertParams{At: at, Actor: actor, Action: action, Source: source, EventID: eventID, Entity: entity, Detail: detail}
}

// EffectDeadlineEscalate escalates missed deadlines, earliest first (see
// Outcomes).
func (r *Rules) EffectDeadlineEscalate(ctx context.Context, p *EffectDeadlineEscalateParams) ([]*Effect, error) {
	var out []*Effect
	err := r.db.InTx(ctx, TxOperate, func(ctx context.Context, tx Tx) error {
		var err error
		out, err = escalate(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("escalate deadlines: %w", err)
	}
	return out, nil
}

func escalate(ctx context.Context, tx Tx, p *EffectDeadlineEscalateParams) ([]*Effect, error) {
	dues, err := tx.EffectDeadlinesDue(ctx, &EffectDeadlinesDueParams{Now: p.Now, Limit: ClampLimit(p.Limit)})
	if err != nil {
		return nil, fmt.Errorf("select due deadlines: %w", err)
	}
	out := make([]*Effect, 0, len(dues))
	for _, d := range dues {
		f, err := tx.EffectRead(ctx, d.ID, false)
		if err != nil || f == nil {
			return nil, fmt.Errorf("read effect %d: %w", d.ID, errors.Join(err, errorIfNil(f)))
		}
		deadline := d.Deadline.UTC()
		if !d.Missed {
			if err := tx.EffectDeadlineMissed(ctx, d.ID, p.Now); err != nil {
				return nil, fmt.Errorf("mark deadline missed of effect %d: %w", d.ID, err)
			}
			if err := tx.Audit(ctx, effectAudit(f, p.Now, p.Actor, ActionDeadlineMissed, deadlineMissedDetail(f, deadline, d.OnDead))); err != nil {
				return nil, err
			}
		}
		// A submitting effect's call may be in flight: it goes dead once
		// the call is settled, if it is still pending then.
		if d.OnDead && d.State != EffectSubmitting {
			reason := deadlineDeadReason(deadline)
			if err := tx.EffectKill(ctx, &EffectKillParams{ID: d.ID, Class: ClassPermanent, Reason: reason,
				Repair: deadlineRepair, Now: p.Now, Owner: queueOwner(f.Owner, true, p.Owners.Destinations[f.Destination])}); err != nil {
				return nil, fmt.Errorf("move effect %d to dead: %w", d.ID, err)
			}
			if err := tx.Audit(ctx, effectAudit(f, p.Now, p.Actor, ActionEffectDead, deadlineDeadDetail(f.EpisodeKey, d.State, reason))); err != nil {
				return nil, err
			}
		}
		if f, err = tx.EffectRead(ctx, d.ID, false); err != nil {
			return nil, fmt.Errorf("read effect %d: %w", d.ID, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// EffectCompensate inserts an operator's compensation of a done effect
// (see Outcomes).
func (r *Rules) EffectCompensate(ctx context.Context, p *EffectCompensateParams) (*Effect, error) {
	if err := checkCompensate(p); err != nil {
		return nil, fmt.Errorf("compensate effect %d: %w", p.EffectID, err)
	}
	var f *Effect
	err := r.db.InTx(ctx, TxOperate, func(ctx context.Context, tx Tx) error {
		var err error
		f, err = compensate(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("compensate effect %d: %w", p.EffectID, err)
	}
	return f, nil
}

func compensate(ctx context.Context, tx Tx, p *EffectCompensateParams) (*Effect, error) {
	// The lock on the original serialises two compensations of it, and a
	// compensation with a concurrent change of its state.
	orig, err := tx.EffectRead(ctx, p.EffectID, true)
	if err != nil {
		return nil, fmt.Errorf("read effect: %w", err)
	}
	if orig == nil {
		return nil, fmt.Errorf("effect: %w", ErrNotFound)
	}
	if orig.Compensates != 0 {
		return nil, fmt.Errorf("%w: effect %d is itself the compensation of effect %d", ErrInvalidArgument, p.EffectID, orig.Compensates)
	}
	if !compensable[orig.State] {
		return nil, fmt.Errorf("compensate from %s: %w", orig.State, ErrInvalidTransition)
	}
	existing, found, err := tx.EffectCompensationFind(ctx, orig.EpisodeKey+compensationSuffix, p.EffectID)
	switch {
	case err != nil:
		return nil, fmt.Errorf("find compensation: %w", err)
	case found && existing == 0:
		return nil, fmt.Errorf("%w: effect %d was compensated already (the compensation is pruned: docs/retention.md)", ErrConflict, p.EffectID)
	case found:
		return nil, fmt.Errorf("%w: effect %d is compensated by effect %d already", ErrConflict, p.EffectID, existing)
	}
	id, err := tx.EffectCompensationInsert(ctx, &EffectCompensationInsertParams{Original: p.EffectID, Suffix: compensationSuffix,
		Request: p.Request, Now: p.Now})
	if err != nil {
		return nil, fmt.Errorf("insert compensation: %w", err)
	}
	f, err := tx.EffectRead(ctx, id, false)
	if err != nil || f == nil {
		return nil, fmt.Errorf("read compensation: %w", errors.Join(err, errorIfNil(f)))
	}
	if err := tx.Audit(ctx, effectAudit(f, p.Now, p.Actor, actionEffectCompensationApproved,
		compensationDetail(f.EpisodeKey, p.EffectID, orig.EpisodeKey, orig.State, p.Note))); err != nil {
		return nil, err
	}
	return f, nil
}

// VerifyNext returns the next page of a destination's effects to verify
// (see Outcomes). Only VerifyAdvance moves the cursor, and only forward:
// reading it apart from the page cannot skip an effect.
func (r *Rules) VerifyNext(ctx context.Context, p *VerifyNextParams) (*VerifyNextResult, error) {
	res := &VerifyNextResult{}
	err := r.db.InTx(ctx, TxRead, func(ctx context.Context, tx Tx) error {
		var err error
		if res.Cursor, err = tx.VerifyCursorGet(ctx, p.Destination); err != nil {
			return fmt.Errorf("read cursor: %w", err)
		}
		limit := ClampLimit(p.Limit)
		return tx.EffectsOfDestination(ctx, &EffectsOfDestinationParams{Destination: p.Destination, AfterID: res.Cursor,
			Limit: verifyScan}, func(f *Effect) bool {
			if len(res.Effects) >= limit || verifyStop(f, p.Cutoff) {
				return false
			}
			if f.State == EffectDone {
				res.Effects = append(res.Effects, f)
			}
			res.Cursor = f.ID
			return true
		})
	})
	if err != nil {
		return nil, fmt.Errorf("verify next %s: %w", p.Destination, err)
	}
	return res, nil
}

// EffectMismatch records that a done effect is missing at its destination
// (see Outcomes).
func (r *Rules) EffectMismatch(ctx context.Context, p *EffectMismatchParams) (bool, error) {
	if strings.TrimSpace(p.Reason) == "" {
		return false, fmt.Errorf("record mismatch of effect %d: %w: a mismatch needs a reason", p.EffectID, ErrInvalidArgument)
	}
	changed := false
	err := r.db.InTx(ctx, TxOperate, func(ctx context.Context, tx Tx) error {
		f, err := tx.EffectRead(ctx, p.EffectID, true)
		if err != nil {
			return fmt.Errorf("read effect: %w", err)
		}
		if f == nil {
			return fmt.Errorf("effect: %w", ErrNotFound)
		}
		if f.State != EffectDone {
			return nil
		}
		if err := tx.EffectMismatchMark(ctx, &EffectMismatchMarkParams{ID: p.EffectID, Reason: p.Reason,
			Repair: mismatchRepair(f), Now: p.Now, Owner: queueOwner(f.Owner, true, p.Owner)}); err != nil {
			return fmt.Errorf("update effect: %w", err)
		}
		changed = true
		return tx.Audit(ctx, effectAudit(f, p.Now, p.Actor, ActionReconciliationMismatch, mismatchDetail(f.EpisodeKey, p.Reason)))
	})
	if err != nil {
		return false, fmt.Errorf("record mismatch of effect %d: %w", p.EffectID, err)
	}
	return changed, nil
}
