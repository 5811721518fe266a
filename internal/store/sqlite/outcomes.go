package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The statements of deadlines, compensation and verification
// (store.OutcomesTx). Their transactions run alone on the single writer
// connection: nothing else writes while one reads an effect and moves it
// on, so a worker's settle cannot land in between, and no row is locked.

// pendingStates are the states in which an effect can still miss its
// deadline, written as effects_deadline's predicate writes them, so the
// planner reads that partial index.
var pendingStates = store.SQLList(store.DeadlineStates())

// escalateSQL selects the effects due for escalation at ?, earliest
// deadline first, through effects_deadline. Due: not escalated yet, or
// escalated while submitting with on_deadline dead and since settled into
// another pending state. Without statistics the planner would take
// effects_state for the state list and sort every pending effect by
// deadline; INDEXED BY holds it to the small partial index (and fails
// the statement, rather than scanning, should the index not apply).
var escalateSQL = `SELECT id, state, deadline_at, deadline_missed_at IS NOT NULL, on_deadline
	FROM effects INDEXED BY effects_deadline
	WHERE deadline_at IS NOT NULL AND state IN ` + pendingStates + ` AND deadline_at <= ?
	AND (deadline_missed_at IS NULL OR (on_deadline = 'dead' AND state <> 'submitting'))
	ORDER BY deadline_at, id LIMIT ?`

// EffectRead needs no lock: the transaction holds the only write lock.
func (a txn) EffectRead(ctx context.Context, id int64, _ bool) (*store.Effect, error) {
	return getEffect(a.tx.QueryRowContext(ctx, effectByID, id))
}

func (a txn) EffectDeadlinesDue(ctx context.Context, p *store.EffectDeadlinesDueParams) ([]store.DeadlineDue, error) {
	rows, err := a.tx.QueryContext(ctx, escalateSQL, p.Now.UnixMicro(), p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var dues []store.DeadlineDue
	for rows.Next() {
		var d store.DeadlineDue
		var deadline int64
		var on string
		if err := rows.Scan(&d.ID, &d.State, &deadline, &d.Missed, &on); err != nil {
			return nil, err
		}
		d.Deadline, d.OnDead = time.UnixMicro(deadline).UTC(), on == "dead"
		dues = append(dues, d)
	}
	return dues, rows.Err()
}

func (a txn) EffectDeadlineMissed(ctx context.Context, id int64, at time.Time) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE effects SET deadline_missed_at = ? WHERE id = ?`, at.UnixMicro(), id)
	return err
}

func (a txn) EffectKill(ctx context.Context, p *store.EffectKillParams) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE effects SET state = 'dead', error_class = ?, reason = ?,
		suggested_repair = ?, next_attempt_at = ?, updated_at = ?, owner = ? WHERE id = ?`,
		p.Class, p.Reason, p.Repair, noTime, p.Now.UnixMicro(), p.Owner, p.ID)
	return err
}

// findCompensationSQL is EffectCompensationFind's statement: two index
// probes, the second through effects_compensates, whose predicate it
// repeats, and one of the tombstones.
const findCompensationSQL = `SELECT id FROM effects WHERE episode_key = ?
	UNION ALL SELECT id FROM effects WHERE compensates = ? AND compensates <> 0
	UNION ALL SELECT 0 FROM effect_tombstones WHERE episode_key = ?1 LIMIT 1`

func (a txn) EffectCompensationFind(ctx context.Context, key string, id int64) (int64, bool, error) {
	var found int64
	err := a.tx.QueryRowContext(ctx, findCompensationSQL, key, id).Scan(&found)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return found, err == nil, err
}

func (a txn) EffectCompensationInsert(ctx context.Context, p *store.EffectCompensationInsertParams) (int64, error) {
	var id int64
	err := a.tx.QueryRowContext(ctx, `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at, compensates)
		SELECT episode_key || ?1, flow, entity, version, version_sort, effect || ?1, destination,
			'approved', ?2, source_event_pk, causation_id, hop, ?3, ?3, id
		FROM effects WHERE id = ?4 RETURNING id`,
		p.Suffix, string(p.Request), p.Now.UnixMicro(), p.Original).Scan(&id)
	return id, dbErrors.Classify(err)
}

func (a txn) VerifyCursorGet(ctx context.Context, destination string) (int64, error) {
	var after int64
	err := a.tx.QueryRowContext(ctx, `SELECT after_id FROM verify_cursors WHERE destination = ?`, destination).Scan(&after)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return after, err
}

// verifyPageSQL reads a destination's effects after a cursor. The index
// effects_destination holds (destination, id): the page is read in id
// order from the cursor, with no sort.
const verifyPageSQL = `SELECT ` + effectColumns + effectFrom + `
	WHERE f.destination = ? AND f.id > ? ORDER BY f.id LIMIT ?`

// EffectsOfDestination reads no further than visit wants.
func (a txn) EffectsOfDestination(ctx context.Context, p *store.EffectsOfDestinationParams, visit func(*store.Effect) bool) error {
	err := a.each(ctx, verifyPageSQL, []any{p.Destination, p.AfterID, p.Limit}, func(sc scanner) error {
		f := &store.Effect{}
		if err := scanEffect(sc, f); err != nil {
			return err
		}
		if !visit(f) {
			return errStop
		}
		return nil
	})
	if errors.Is(err, errStop) {
		return nil
	}
	return err
}

// errStop ends a scan that has read what it wanted.
var errStop = errors.New("stop")

func (a txn) EffectMismatchMark(ctx context.Context, p *store.EffectMismatchMarkParams) error {
	now := p.Now.UnixMicro()
	_, err := a.tx.ExecContext(ctx, `UPDATE effects SET state = 'needs_reconciliation', next_attempt_at = ?,
		mismatch_at = ?, error_class = ?, reason = ?, suggested_repair = ?, updated_at = ?, owner = ? WHERE id = ?`,
		noTime, now, store.ClassUnknown, p.Reason, p.Repair, now, p.Owner, p.ID)
	return err
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
