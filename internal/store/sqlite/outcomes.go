package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Deadlines, compensation and verification. Their writes are rare and
// operator- or timer-driven, so like EffectOperate each runs in its own
// transaction on the single writer connection: nothing else writes while
// it reads an effect and moves it on, so a worker's settle cannot land in
// between.

var _ store.Outcomes = (*Store)(nil)

// writeTx runs fn in one immediate transaction on the writer connection.
func (s *Store) writeTx(ctx context.Context, fn func(tx *wtx) error) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w: %w", store.ErrUnavailable, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	if err := fn(&wtx{Tx: tx, s: s}); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w: %w", store.ErrUnavailable, err)
	}
	return nil
}

// pendingStates are the states in which an effect can still miss its
// deadline; the literal list matches effects_deadline's predicate, so the
// planner reads that partial index.
const pendingStates = `('approved', 'submitting', 'acknowledged', 'retry_wait', 'needs_reconciliation')`

// EffectDeadlineEscalate escalates missed deadlines, earliest first.
func (s *Store) EffectDeadlineEscalate(ctx context.Context, p *store.EffectDeadlineEscalateParams) ([]*store.Effect, error) {
	var out []*store.Effect
	err := s.writeTx(ctx, func(tx *wtx) error {
		var err error
		out, err = escalate(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("escalate deadlines: %w", err)
	}
	return out, nil
}

// escalateSQL selects the effects due for escalation at ?, earliest
// deadline first, through effects_deadline. Due: not escalated yet, or
// escalated while submitting with on_deadline dead and since settled into
// another pending state. Without statistics the planner would take
// effects_state for the state list and sort every pending effect by
// deadline; INDEXED BY holds it to the small partial index (and fails
// the statement, rather than scanning, should the index not apply).
const escalateSQL = `SELECT id, state, deadline_at, deadline_missed_at IS NOT NULL, on_deadline
	FROM effects INDEXED BY effects_deadline
	WHERE deadline_at IS NOT NULL AND state IN ` + pendingStates + ` AND deadline_at <= ?
	AND (deadline_missed_at IS NULL OR (on_deadline = 'dead' AND state <> 'submitting'))
	ORDER BY deadline_at, id LIMIT ?`

func escalate(ctx context.Context, tx *wtx, p *store.EffectDeadlineEscalateParams) ([]*store.Effect, error) {
	now := p.Now.UnixMicro()
	rows, err := tx.QueryContext(ctx, escalateSQL, now, store.ClampLimit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("select due deadlines: %w", err)
	}
	type due struct {
		id       int64
		state    store.EffectState
		deadline int64
		missed   bool
		onDead   bool
	}
	var dues []due
	for rows.Next() {
		var d due
		var on string
		if err := rows.Scan(&d.id, &d.state, &d.deadline, &d.missed, &on); err != nil {
			rows.Close()
			return nil, fmt.Errorf("select due deadlines: %w", err)
		}
		d.onDead = on == "dead"
		dues = append(dues, d)
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("select due deadlines: %w", err)
	}
	out := make([]*store.Effect, 0, len(dues))
	for _, d := range dues {
		f, err := getEffect(tx.QueryRowContext(ctx, effectByID, d.id))
		if err != nil || f == nil {
			return nil, fmt.Errorf("read effect %d: %w", d.id, errors.Join(err, store.ErrorIfNil(f)))
		}
		deadline := time.UnixMicro(d.deadline).UTC()
		if !d.missed {
			if _, err := tx.ExecContext(ctx, `UPDATE effects SET deadline_missed_at = ? WHERE id = ?`, now, d.id); err != nil {
				return nil, fmt.Errorf("mark deadline missed of effect %d: %w", d.id, err)
			}
			if err := effectAudit(ctx, tx, f, p.Now, p.Actor, store.ActionDeadlineMissed, store.DeadlineMissedDetail(f, deadline, d.onDead)); err != nil {
				return nil, err
			}
		}
		if d.onDead && d.state != store.EffectSubmitting {
			reason := store.DeadlineDeadReason(deadline)
			if _, err := tx.ExecContext(ctx, `UPDATE effects SET state = 'dead', error_class = ?, reason = ?,
				suggested_repair = ?, next_attempt_at = ?, updated_at = ? WHERE id = ?`,
				store.ClassPermanent, reason, store.DeadlineRepair, noTime, now, d.id); err != nil {
				return nil, fmt.Errorf("move effect %d to dead: %w", d.id, err)
			}
			if err := effectAudit(ctx, tx, f, p.Now, p.Actor, store.ActionEffectDead,
				store.DeadlineDeadDetail(f.EpisodeKey, d.state, reason)); err != nil {
				return nil, err
			}
		}
		if f, err = getEffect(tx.QueryRowContext(ctx, effectByID, d.id)); err != nil {
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
	err := s.writeTx(ctx, func(tx *wtx) error {
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
const findCompensationSQL = `SELECT id FROM effects WHERE episode_key = ?
	UNION ALL SELECT id FROM effects WHERE compensates = ? AND compensates <> 0
	UNION ALL SELECT 0 FROM effect_tombstones WHERE episode_key = ?1 LIMIT 1`

func compensate(ctx context.Context, tx *wtx, p *store.EffectCompensateParams) (*store.Effect, error) {
	var orig struct {
		key, flow, entity, version, versionSort, effect, dest, causation string
		state                                                            store.EffectState
		eventPK, hop, compensates                                        int64
	}
	err := tx.QueryRowContext(ctx, `SELECT episode_key, flow, entity, version, version_sort, effect, destination,
		causation_id, state, source_event_pk, hop, compensates FROM effects WHERE id = ?`, p.EffectID).
		Scan(&orig.key, &orig.flow, &orig.entity, &orig.version, &orig.versionSort, &orig.effect, &orig.dest,
			&orig.causation, &orig.state, &orig.eventPK, &orig.hop, &orig.compensates)
	if errors.Is(err, sql.ErrNoRows) {
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
	err = tx.QueryRowContext(ctx, findCompensationSQL, orig.key+store.CompensationSuffix, p.EffectID).Scan(&existing)
	switch {
	case err == nil && existing == 0:
		return nil, fmt.Errorf("%w: effect %d was compensated already (the compensation is pruned: docs/retention.md)", store.ErrConflict, p.EffectID)
	case err == nil:
		return nil, fmt.Errorf("%w: effect %d is compensated by effect %d already", store.ErrConflict, p.EffectID, existing)
	case !errors.Is(err, sql.ErrNoRows):
		return nil, fmt.Errorf("find compensation: %w", err)
	}
	now := p.Now.UnixMicro()
	var id int64
	err = tx.QueryRowContext(ctx, `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at, compensates)
		VALUES (?, ?, ?, ?, ?, ?, ?, 'approved', ?, ?, ?, ?, ?, ?, ?) RETURNING id`,
		orig.key+store.CompensationSuffix, orig.flow, orig.entity, orig.version, orig.versionSort, orig.effect+store.CompensationSuffix,
		orig.dest, string(p.Request), orig.eventPK, orig.causation, orig.hop, now, now, p.EffectID).Scan(&id)
	if err != nil {
		return nil, wrapErr("insert compensation", err)
	}
	f, err := getEffect(tx.QueryRowContext(ctx, effectByID, id))
	if err != nil || f == nil {
		return nil, fmt.Errorf("read compensation: %w", errors.Join(err, store.ErrorIfNil(f)))
	}
	if err := effectAudit(ctx, tx, f, p.Now, p.Actor, store.ActionEffectCompensationApproved,
		store.CompensationDetail(f.EpisodeKey, p.EffectID, orig.key, orig.state, p.Note)); err != nil {
		return nil, err
	}
	return f, nil
}

// verifyPageSQL reads a destination's effects after a cursor. The index
// effects_destination holds (destination, id): the page is read in id
// order from the cursor, with no sort.
const verifyPageSQL = `SELECT ` + effectColumns + effectFrom + `
	WHERE f.destination = ? AND f.id > ? ORDER BY f.id LIMIT ?`

// VerifyNext returns the next page of a destination's effects to verify.
func (s *Store) VerifyNext(ctx context.Context, p *store.VerifyNextParams) (*store.VerifyNextResult, error) {
	tx, err := s.reader.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("verify next %s: begin: %w", p.Destination, err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	res := &store.VerifyNextResult{}
	err = tx.QueryRowContext(ctx, `SELECT after_id FROM verify_cursors WHERE destination = ?`, p.Destination).Scan(&res.Cursor)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("verify next %s: read cursor: %w", p.Destination, err)
	}
	rows, err := tx.QueryContext(ctx, verifyPageSQL, p.Destination, res.Cursor, store.VerifyScan)
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
	err := s.writeTx(ctx, func(tx *wtx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO verify_cursors (destination, after_id, updated_at) VALUES (?, ?, ?)
			ON CONFLICT (destination) DO UPDATE SET after_id = max(after_id, excluded.after_id), updated_at = excluded.updated_at`,
			p.Destination, p.AfterID, p.Now.UnixMicro())
		return err
	})
	if err != nil {
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
	err := s.writeTx(ctx, func(tx *wtx) error {
		f, err := getEffect(tx.QueryRowContext(ctx, effectByID, p.EffectID))
		if err != nil {
			return fmt.Errorf("read effect: %w", err)
		}
		if f == nil {
			return fmt.Errorf("effect: %w", store.ErrNotFound)
		}
		if f.State != store.EffectDone {
			return nil
		}
		now := p.Now.UnixMicro()
		if _, err := tx.ExecContext(ctx, `UPDATE effects SET state = 'needs_reconciliation', next_attempt_at = ?,
			mismatch_at = ?, error_class = ?, reason = ?, suggested_repair = ?, updated_at = ? WHERE id = ?`,
			noTime, now, store.ClassUnknown, p.Reason, store.MismatchRepair(f), now, p.EffectID); err != nil {
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
