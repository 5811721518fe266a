package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// Deadlines, compensation and verification lock the effect rows they
// change (FOR UPDATE), so a worker's settle of the same effect waits for
// the commit or has committed before the row is read: it never lands in
// between. Escalation skips rows another transaction holds (a claim, a
// settle): they are due again on the next call, and a timer never waits
// behind the delivery path.

var _ store.Outcomes = (*Store)(nil)

// pendingStates are the states in which an effect can still miss its
// deadline; the literal list matches effects_deadline's predicate, so the
// planner can use that partial index.
const pendingStates = `('approved', 'submitting', 'acknowledged', 'retry_wait', 'needs_reconciliation')`

// EffectDeadlineEscalate escalates missed deadlines, earliest first.
func (s *Store) EffectDeadlineEscalate(ctx context.Context, p *store.EffectDeadlineEscalateParams) ([]*store.Effect, error) {
	var out []*store.Effect
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		out, err = escalate(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("escalate deadlines: %w", err)
	}
	return out, nil
}

func escalate(ctx context.Context, tx pgx.Tx, p *store.EffectDeadlineEscalateParams) ([]*store.Effect, error) {
	// Due: not escalated yet, or escalated while submitting with
	// on_deadline dead and now settled into another pending state.
	rows, err := tx.Query(ctx, `SELECT id, state, deadline_at, deadline_missed_at IS NOT NULL, on_deadline
		FROM effects WHERE deadline_at IS NOT NULL AND state IN `+pendingStates+` AND deadline_at <= $1
		AND (deadline_missed_at IS NULL OR (on_deadline = 'dead' AND state <> 'submitting'))
		ORDER BY deadline_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`, p.Now, store.ClampLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("select due deadlines: %w", err)
	}
	type due struct {
		id       int64
		state    store.EffectState
		deadline time.Time
		missed   bool
		onDead   bool
	}
	dues, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (due, error) {
		var d due
		var on string
		err := r.Scan(&d.id, &d.state, &d.deadline, &d.missed, &on)
		d.onDead = on == "dead"
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("select due deadlines: %w", err)
	}
	out := make([]*store.Effect, 0, len(dues))
	for _, d := range dues {
		f, err := getEffect(ctx, tx, d.id, "")
		if err != nil || f == nil {
			return nil, fmt.Errorf("read effect %d: %w", d.id, errors.Join(err, store.ErrorIfNil(f)))
		}
		deadline := d.deadline.UTC()
		if !d.missed {
			if _, err := tx.Exec(ctx, `UPDATE effects SET deadline_missed_at = $1 WHERE id = $2`, p.Now, d.id); err != nil {
				return nil, fmt.Errorf("mark deadline missed of effect %d: %w", d.id, err)
			}
			if err := effectAudit(ctx, tx, f, p.Now, p.Actor, store.ActionDeadlineMissed, store.DeadlineMissedDetail(f, deadline, d.onDead)); err != nil {
				return nil, err
			}
		}
		if d.onDead && d.state != store.EffectSubmitting {
			reason := store.DeadlineDeadReason(deadline)
			if _, err := tx.Exec(ctx, `UPDATE effects SET state = 'dead', error_class = $1, reason = $2,
				suggested_repair = $3, next_attempt_at = '-infinity', updated_at = $4 WHERE id = $5`,
				string(store.ClassPermanent), reason, store.DeadlineRepair, p.Now, d.id); err != nil {
				return nil, fmt.Errorf("move effect %d to dead: %w", d.id, err)
			}
			if err := effectAudit(ctx, tx, f, p.Now, p.Actor, store.ActionEffectDead,
				store.DeadlineDeadDetail(f.EpisodeKey, d.state, reason)); err != nil {
				return nil, err
			}
		}
		if f, err = getEffect(ctx, tx, d.id, ""); err != nil {
			return nil, fmt.Errorf("read effect %d: %w", d.id, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// EffectCompensate inserts an operator's compensation of a done effect.
func (s *Store) EffectCompensate(ctx context.Context, p *store.EffectCompensateParams) (*store.Effect, error) {
	if err := store.CheckCompensate(p); err != nil {
		return nil, fmt.Errorf("compensate effect %d: %w", p.EffectID, err)
	}
	var f *store.Effect
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		f, err = compensate(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("compensate effect %d: %w", p.EffectID, err)
	}
	return f, nil
}

// findCompensationSQL finds an effect's compensation, made by an operator
// (its episode key) or by a flow (compensates): two index probes, the
// second through effects_compensates, whose predicate it repeats. A
// tombstone of the operator's key (the compensation ran and was pruned,
// id 0 here) counts as one: the compensation never runs twice. One
// statement reads both tables, so a pruning that commits in between is
// seen whole (the row or its tombstone), never as neither.
const findCompensationSQL = `SELECT id FROM effects WHERE episode_key = $1
	UNION ALL SELECT id FROM effects WHERE compensates = $2 AND compensates <> 0
	UNION ALL SELECT 0 FROM effect_tombstones WHERE episode_key = $1 LIMIT 1`

func compensate(ctx context.Context, tx pgx.Tx, p *store.EffectCompensateParams) (*store.Effect, error) {
	// The lock on the original serialises two compensations of it, and a
	// compensation with a concurrent change of its state.
	var orig struct {
		key, effect string
		state       store.EffectState
		compensates int64
	}
	err := tx.QueryRow(ctx, `SELECT episode_key, effect, state, compensates FROM effects WHERE id = $1 FOR UPDATE`, p.EffectID).
		Scan(&orig.key, &orig.effect, &orig.state, &orig.compensates)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("effect: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read effect: %w", err)
	}
	if orig.compensates != 0 {
		return nil, fmt.Errorf("%w: effect %d is itself the compensation of effect %d", store.ErrInvalidArgument, p.EffectID, orig.compensates)
	}
	if !store.Compensable[orig.state] {
		return nil, fmt.Errorf("compensate from %s: %w", orig.state, store.ErrInvalidTransition)
	}
	var existing int64
	err = tx.QueryRow(ctx, findCompensationSQL, orig.key+store.CompensationSuffix, p.EffectID).Scan(&existing)
	switch {
	case err == nil && existing == 0:
		return nil, fmt.Errorf("%w: effect %d was compensated already (the compensation is pruned: docs/retention.md)", store.ErrConflict, p.EffectID)
	case err == nil:
		return nil, fmt.Errorf("%w: effect %d is compensated by effect %d already", store.ErrConflict, p.EffectID, existing)
	case !errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("find compensation: %w", err)
	}
	var id int64
	err = tx.QueryRow(ctx, `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at, compensates)
		SELECT episode_key || $1, flow, entity, version, version_sort, effect || $1, destination,
			'approved', $2::jsonb, source_event_pk, causation_id, hop, $3, $3, id
		FROM effects WHERE id = $4 RETURNING id`,
		store.CompensationSuffix, string(p.Request), p.Now, p.EffectID).Scan(&id)
	if err != nil {
		return nil, wrapErr("insert compensation", err)
	}
	f, err := getEffect(ctx, tx, id, "")
	if err != nil || f == nil {
		return nil, fmt.Errorf("read compensation: %w", errors.Join(err, store.ErrorIfNil(f)))
	}
	if err := effectAudit(ctx, tx, f, p.Now, p.Actor, store.ActionEffectCompensationApproved,
		store.CompensationDetail(f.EpisodeKey, p.EffectID, orig.key, orig.state, p.Note)); err != nil {
		return nil, err
	}
	return f, nil
}

// VerifyNext returns the next page of a destination's effects to verify.
func (s *Store) VerifyNext(ctx context.Context, p *store.VerifyNextParams) (*store.VerifyNextResult, error) {
	res := &store.VerifyNextResult{}
	// Only VerifyAdvance moves the cursor, and only forward: reading it
	// apart from the page cannot skip an effect.
	if err := s.pool.QueryRow(ctx, `SELECT coalesce((SELECT after_id FROM verify_cursors WHERE destination = $1), 0)`,
		p.Destination).Scan(&res.Cursor); err != nil {
		return nil, fmt.Errorf("verify next %s: read cursor: %w", p.Destination, err)
	}
	// effects_destination holds (destination, id): the page is read in id
	// order from the cursor.
	rows, err := s.pool.Query(ctx, `SELECT `+effectColumns+effectFrom+`
		WHERE f.destination = $1 AND f.id > $2 ORDER BY f.id LIMIT $3`, p.Destination, res.Cursor, store.VerifyScan)
	if err != nil {
		return nil, fmt.Errorf("verify next %s: %w", p.Destination, err)
	}
	defer rows.Close()
	limit := store.ClampLimit(p.Limit)
	for len(res.Effects) < limit && rows.Next() {
		f := &store.Effect{}
		if err := scanEffect(rows, f); err != nil {
			return nil, fmt.Errorf("verify next %s: %w", p.Destination, err)
		}
		if store.VerifyStop(f, p.Cutoff) {
			break
		}
		if f.State == store.EffectDone {
			res.Effects = append(res.Effects, f)
		}
		res.Cursor = f.ID
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("verify next %s: %w", p.Destination, err)
	}
	return res, nil
}

// VerifyAdvance moves a verification cursor forward.
func (s *Store) VerifyAdvance(ctx context.Context, p *store.VerifyAdvanceParams) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO verify_cursors (destination, after_id, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (destination) DO UPDATE SET after_id = greatest(verify_cursors.after_id, excluded.after_id),
			updated_at = excluded.updated_at`, p.Destination, p.AfterID, p.Now); err != nil {
		return fmt.Errorf("advance verification of %s: %w", p.Destination, err)
	}
	return nil
}

// EffectMismatch records that a done effect is missing at its destination.
func (s *Store) EffectMismatch(ctx context.Context, p *store.EffectMismatchParams) (bool, error) {
	if strings.TrimSpace(p.Reason) == "" {
		return false, fmt.Errorf("record mismatch of effect %d: %w: a mismatch needs a reason", p.EffectID, store.ErrInvalidArgument)
	}
	changed := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		f, err := getEffect(ctx, tx, p.EffectID, " FOR UPDATE OF f")
		if err != nil {
			return fmt.Errorf("read effect: %w", err)
		}
		if f == nil {
			return fmt.Errorf("effect: %w", store.ErrNotFound)
		}
		if f.State != store.EffectDone {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE effects SET state = 'needs_reconciliation', next_attempt_at = '-infinity',
			mismatch_at = $1, error_class = $2, reason = $3, suggested_repair = $4, updated_at = $1 WHERE id = $5`,
			p.Now, string(store.ClassUnknown), p.Reason, store.MismatchRepair(f), p.EffectID); err != nil {
			return fmt.Errorf("update effect: %w", err)
		}
		changed = true
		return effectAudit(ctx, tx, f, p.Now, p.Actor, store.ActionReconciliationMismatch,
			store.MismatchDetail(f.EpisodeKey, p.Reason))
	})
	if err != nil {
		return false, fmt.Errorf("record mismatch of effect %d: %w", p.EffectID, err)
	}
	return changed, nil
}
