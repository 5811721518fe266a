package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// The statements of deadlines, compensation and verification
// (store.OutcomesTx). They lock the effect rows they change (FOR UPDATE),
// so a worker's settle of the same effect waits for the commit or has
// committed before the row is read: it never lands in between.
// Escalation skips rows another transaction holds (a claim, a settle):
// they are due again on the next call, and a timer never waits behind the
// delivery path.

// pendingStates are the states in which an effect can still miss its
// deadline, written as effects_deadline's predicate writes them, so the
// planner can use that partial index.
var pendingStates = store.SQLList(store.DeadlineStates())

func (a txn) EffectRead(ctx context.Context, id int64, lock bool) (*store.Effect, error) {
	q := effectByIDSQL
	if lock {
		q += ` FOR UPDATE OF f`
	}
	var f *store.Effect
	err := a.t.query(ctx, "read effect", q, []any{id}, func(rows pgx.Rows) error {
		if !rows.Next() {
			return nil
		}
		f = &store.Effect{}
		return scanEffect(rows, f)
	})
	return f, err
}

func (a txn) EffectDeadlinesDue(ctx context.Context, p *store.EffectDeadlinesDueParams) ([]store.DeadlineDue, error) {
	var dues []store.DeadlineDue
	err := a.t.query(ctx, "select due deadlines", `SELECT id, state, deadline_at, deadline_missed_at IS NOT NULL, on_deadline
		FROM effects WHERE deadline_at IS NOT NULL AND state IN `+pendingStates+` AND deadline_at <= $1
		AND (deadline_missed_at IS NULL OR (on_deadline = 'dead' AND state <> 'submitting'))
		ORDER BY deadline_at, id LIMIT $2 FOR UPDATE SKIP LOCKED`, []any{p.Now, p.Limit}, func(rows pgx.Rows) error {
		for rows.Next() {
			var d store.DeadlineDue
			var on string
			if err := rows.Scan(&d.ID, &d.State, &d.Deadline, &d.Missed, &on); err != nil {
				return err
			}
			d.OnDead = on == "dead"
			dues = append(dues, d)
		}
		return nil
	})
	return dues, err
}

func (a txn) EffectDeadlineMissed(_ context.Context, id int64, at time.Time) error {
	a.t.exec("mark deadline missed", `UPDATE effects SET deadline_missed_at = $1 WHERE id = $2`, at, id)
	return nil
}

func (a txn) EffectKill(_ context.Context, p *store.EffectKillParams) error {
	a.t.exec("move effect to dead", `UPDATE effects SET state = 'dead', error_class = $1, reason = $2,
		suggested_repair = $3, next_attempt_at = '-infinity', updated_at = $4, owner = $6 WHERE id = $5`,
		string(p.Class), p.Reason, p.Repair, p.Now, p.ID, p.Owner)
	return nil
}

// findCompensationSQL is EffectCompensationFind's statement: two index
// probes, the second through effects_compensates, whose predicate it
// repeats, and one of the tombstones.
const findCompensationSQL = `SELECT id FROM effects WHERE episode_key = $1
	UNION ALL SELECT id FROM effects WHERE compensates = $2 AND compensates <> 0
	UNION ALL SELECT 0 FROM effect_tombstones WHERE episode_key = $1 LIMIT 1`

func (a txn) EffectCompensationFind(ctx context.Context, key string, id int64) (found int64, ok bool, err error) {
	err = a.t.query(ctx, "find compensation", findCompensationSQL, []any{key, id}, func(rows pgx.Rows) error {
		if !rows.Next() {
			return nil
		}
		ok = true
		return rows.Scan(&found)
	})
	return found, ok, err
}

func (a txn) EffectCompensationInsert(ctx context.Context, p *store.EffectCompensationInsertParams) (int64, error) {
	var id int64
	err := a.t.query(ctx, "insert compensation", `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at, compensates)
		SELECT episode_key || $1, flow, entity, version, version_sort, effect || $1, destination,
			'approved', $2::jsonb, source_event_pk, causation_id, hop, $3, $3, id
		FROM effects WHERE id = $4 RETURNING id`,
		[]any{p.Suffix, string(p.Request), p.Now, p.Original}, func(rows pgx.Rows) error {
			if !rows.Next() {
				return fmt.Errorf("effect %d vanished", p.Original)
			}
			return rows.Scan(&id)
		})
	return id, dbErrors.Classify(err)
}

func (a txn) VerifyCursorGet(ctx context.Context, destination string) (int64, error) {
	var after int64
	err := a.t.query(ctx, "read cursor", `SELECT coalesce((SELECT after_id FROM verify_cursors WHERE destination = $1), 0)`,
		[]any{destination}, func(rows pgx.Rows) error {
			if !rows.Next() {
				return nil
			}
			return rows.Scan(&after)
		})
	return after, err
}

// EffectsOfDestination reads through effects_destination, which holds
// (destination, id): the page is read in id order from the cursor.
func (a txn) EffectsOfDestination(ctx context.Context, p *store.EffectsOfDestinationParams, visit func(*store.Effect) bool) error {
	return a.t.query(ctx, "read page", `SELECT `+effectColumns+effectFrom+`
		WHERE f.destination = $1 AND f.id > $2 ORDER BY f.id LIMIT $3`, []any{p.Destination, p.AfterID, p.Limit},
		func(rows pgx.Rows) error {
			for rows.Next() {
				f := &store.Effect{}
				if err := scanEffect(rows, f); err != nil {
					return err
				}
				if !visit(f) {
					break
				}
			}
			return nil
		})
}

func (a txn) EffectMismatchMark(_ context.Context, p *store.EffectMismatchMarkParams) error {
	a.t.exec("update effect", `UPDATE effects SET state = 'needs_reconciliation', next_attempt_at = '-infinity',
		mismatch_at = $1, error_class = $2, reason = $3, suggested_repair = $4, updated_at = $1, owner = $6 WHERE id = $5`,
		p.Now, string(store.ClassUnknown), p.Reason, p.Repair, p.ID, p.Owner)
	return nil
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
