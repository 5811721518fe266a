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

// Like the pipeline, every ledger write runs in an immediate transaction on
// the single writer connection: selecting due effects and leasing them is
// one atomic step, so two claimers never lease one effect.

// noTime is the next_attempt_at of an effect with nothing scheduled (the
// column's default).
const noTime = 0

// effectColumns selects a store.Effect from effects f joined to its source
// event e; scanEffect reads them in this order.
const effectColumns = `f.id, f.episode_key, f.flow, f.entity, f.version, f.effect, f.destination, f.state, f.request,
	e.source, e.event_id, f.causation_id, f.hop, f.attempts, f.created_at, f.updated_at,
	f.next_attempt_at, f.redrives, f.error_class, f.reason, f.suggested_repair, f.destination_ref,
	f.last_response, f.owner, f.note, f.compensates, f.deadline_at, f.deadline_warn_at, f.on_deadline,
	f.deadline_missed_at, f.mismatch_at, f.calls, f.restart, e.trace_context, ` + laterSourcesSQL

// laterSourcesSQL reads the later source events of effect f as a JSON
// array of [source, event id] pairs, oldest first; most effects have none
// and read nothing more. json_each yields the array in order, and the
// aggregate takes its rows as the one scan yields them: no sort.
const laterSourcesSQL = `CASE WHEN f.later_event_pks = '[]' THEN '[]' ELSE (
	SELECT json_group_array(json((SELECT json_array(le.source, le.event_id) FROM events le WHERE le.pk = l.value)))
	FROM json_each(f.later_event_pks) l) END`

// effectColumnsWithoutRequest is effectColumns with an empty request
// (EffectListParams.WithoutRequest).
var effectColumnsWithoutRequest = strings.Replace(effectColumns, "f.request,", "'',", 1)

const effectFrom = ` FROM effects f JOIN events e ON e.pk = f.source_event_pk`

func scanEffect(sc scanner, f *store.Effect) error {
	var req, later string
	var created, updated, next int64
	var deadline, warn, missed, mismatch sql.NullInt64
	if err := sc.Scan(&f.ID, &f.EpisodeKey, &f.Flow, &f.Entity, &f.Version, &f.Effect, &f.Destination, &f.State, &req,
		&f.Source, &f.SourceEventID, &f.CausationID, &f.Hop, &f.Attempts, &created, &updated,
		&next, &f.Redrives, &f.ErrorClass, &f.Reason, &f.SuggestedRepair, &f.DestinationRef,
		&f.LastResponse, &f.Owner, &f.Note, &f.Compensates, &deadline, &warn, &f.OnDeadline,
		&missed, &mismatch, &f.Calls, &f.Restart, &f.TraceContext, &later); err != nil {
		return err
	}
	if err := store.SetLaterSources(f, later); err != nil {
		return err
	}
	f.DeadlineAt, f.DeadlineWarnAt = fromMicros(deadline), fromMicros(warn)
	f.DeadlineMissedAt, f.MismatchAt = fromMicros(missed), fromMicros(mismatch)
	f.Request = []byte(req)
	f.CreatedAt = time.UnixMicro(created).UTC()
	f.UpdatedAt = time.UnixMicro(updated).UTC()
	f.NextAttemptAt = time.Time{}
	if next != noTime {
		f.NextAttemptAt = time.UnixMicro(next).UTC()
	}
	return nil
}

// dueAt stores a zero time as "nothing scheduled".
func dueAt(t time.Time) int64 {
	if t.IsZero() {
		return noTime
	}
	return t.UnixMicro()
}

// effectByID selects one effect for getEffect.
const effectByID = `SELECT ` + effectColumns + effectFrom + ` WHERE f.id = ?`

// getEffect scans the row of effectByID, or returns nil when there is none.
func getEffect(row scanner) (*store.Effect, error) {
	f := &store.Effect{}
	err := scanEffect(row, f)
	if err != nil {
		return store.NoRow[store.Effect](err, sql.ErrNoRows, "")
	}
	return f, nil
}

// effectClaimSQL is the claim's read: the due effects, oldest due first.
func effectClaimSQL(p *store.EffectLeaseParams, now int64) (string, []any) {
	// A needs_reconciliation or dead effect is only due when something
	// scheduled it; without a time it waits for a person.
	// An approved effect released by a worker (its destination's token
	// bucket was empty) is due again only at the release's NotBefore.
	where, args := effectDueSQL(now, p.MaxRedrives)
	where += ` AND ` + store.NoOlderInFlightSQL("f", "INDEXED BY effects_entity")
	// The IN term repeats the partial indexes' WHERE word for word, which
	// is what lets SQLite use effects_due_destination: one destination's
	// claimable effects in due order, not every effect it ever had.
	// Every branch of the due condition implies next_attempt_at <= now (a
	// claim sets it to the lease's end, so a call whose lease ran out is
	// due). Repeated on its own, it bounds the index range: a claim stops
	// at the first effect not yet due instead of walking the destination's
	// scheduled retries and calls in flight.
	if len(p.Destinations) > 0 {
		where += ` AND f.destination IN (?` + strings.Repeat(", ?", len(p.Destinations)-1) + `)`
		for _, d := range p.Destinations {
			args = append(args, d)
		}
	}
	return `SELECT ` + effectColumns + effectFrom + ` WHERE ` + where + ` ORDER BY f.next_attempt_at, f.id` + limitSQL(p.Limit), args
}

// effectDueSQL is the claim's due condition on effect f at now, dead
// effects being re-driven below maxRedrives, and its arguments.
func effectDueSQL(now int64, maxRedrives int) (string, []any) {
	return `((f.state = 'approved' AND f.next_attempt_at <= ?)
		OR (f.state = 'retry_wait' AND f.next_attempt_at <= ?)
		OR (f.state = 'needs_reconciliation' AND f.next_attempt_at <> 0 AND f.next_attempt_at <= ?)
		OR (f.state = 'dead' AND f.redrives < ? AND f.next_attempt_at <> 0 AND f.next_attempt_at <= ?)
		OR (f.state = 'submitting' AND f.lease_until <= ?))
		AND f.state IN ('approved', 'retry_wait', 'dead', 'submitting', 'needs_reconciliation')
		AND f.next_attempt_at <= ?`, []any{now, now, now, maxRedrives, now, now, now}
}

// EffectLease leases for each of ps in turn (effectLease).
func (a txn) EffectLease(ctx context.Context, ps []*store.EffectLeaseParams) ([][]*store.LeasedEffect, error) {
	out := make([][]*store.LeasedEffect, len(ps))
	for i, p := range ps {
		var err error
		if out[i], err = a.effectLease(ctx, p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// effectLease reads the due effects and leases each in turn: the writer
// lock makes the read and the updates one atomic step, so two claimers
// never lease one effect.
func (a txn) effectLease(ctx context.Context, p *store.EffectLeaseParams) ([]*store.LeasedEffect, error) {
	now := p.Now.UnixMicro()
	q, args := effectClaimSQL(p, now)
	var out []*store.LeasedEffect
	err := a.eachN(ctx, q, args, p.Limit, func(sc scanner) error {
		c := &store.LeasedEffect{}
		if err := scanEffect(sc, &c.Effect); err != nil {
			return err
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, c := range out {
		if c.Token, err = store.LeaseToken(p.Owner); err != nil {
			return nil, err
		}
		c.PriorAt = c.UpdatedAt
		if c.State == store.EffectSubmitting {
			var untilUS int64
			if err := a.tx.QueryRowContext(ctx, `SELECT lease_until FROM effects WHERE id = ?`, c.ID).Scan(&untilUS); err != nil {
				return nil, fmt.Errorf("read lease of effect %d: %w", c.ID, err)
			}
			c.PriorUntil = time.UnixMicro(untilUS).UTC()
		}
		store.LeaseTransition(&c.Effect, p.ResumedReason)
		c.UpdatedAt = p.Now.UTC()
		// The call in flight is next due when its lease ends: it leaves
		// the head of effects_due_destination, which every later claim
		// would otherwise read through and pass over.
		c.NextAttemptAt = p.Until.UTC()
		if _, err := a.tx.ExecContext(ctx, `UPDATE effects SET state = 'submitting', lease_token = ?, lease_until = ?,
			next_attempt_at = ?, attempts = ?, redrives = ?, error_class = ?, reason = ?, updated_at = ?, claimed_at = ?, calls = ?, restart = ?
			WHERE id = ?`,
			c.Token, p.Until.UnixMicro(), p.Until.UnixMicro(), c.Attempts, c.Redrives, c.ErrorClass, c.Reason, now, now, c.Calls, c.Restart,
			c.ID); err != nil {
			return nil, fmt.Errorf("lease effect %d: %w", c.ID, err)
		}
	}
	return out, nil
}

// insertAttemptSQL records one call.
const insertAttemptSQL = `INSERT INTO effect_attempts (effect_id, number, started_at, duration_us, status,
	class, error, response, retry_after, retry_after_unit, wait_us, reconcile, restart)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

func (a txn) AttemptInsert(ctx context.Context, at *store.Attempt) error {
	_, err := a.tx.ExecContext(ctx, insertAttemptSQL, at.EffectID, at.Number, at.StartedAt.UnixMicro(), at.Duration.Microseconds(),
		at.Status, at.Class, at.Error, at.Response, at.RetryAfter, at.RetryAfterUnit, at.Wait.Microseconds(), at.Reconcile, at.Restart)
	return err
}

// EffectsFence reads each settle's effect if its lease still holds: a
// worker whose lease expired or was re-claimed writes nothing. A read is
// enough here, unlike PostgreSQL's row lock: the transaction holds the
// database's only write lock, so nothing can take the lease between this
// read and the settle's writes (a no-op UPDATE as the fence wrote the row
// for nothing).
func (a txn) EffectsFence(ctx context.Context, ps []*store.EffectSettleParams) (map[int64]*store.FencedEffect, error) {
	held := make(map[int64]*store.FencedEffect, len(ps))
	for _, p := range ps {
		f := &store.FencedEffect{}
		err := a.tx.QueryRowContext(ctx, effectFencedByID, p.EffectID, p.Token, p.Now.UnixMicro()).Scan(f.Dests()...)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read effect: %w", err)
		}
		held[f.ID] = f
	}
	return held, nil
}

// effectFencedByID reads an effect's fenced columns when its lease, by
// that token, holds.
const effectFencedByID = `SELECT ` + store.FencedEffectColumns + effectFrom + ` WHERE f.id = ? AND f.lease_token = ? AND f.state = 'submitting' AND f.lease_until > ?`

func (a txn) EffectsSettle(ctx context.Context, ws []*store.SettleWrite) error {
	for _, w := range ws {
		if w.Call != nil {
			if err := a.AttemptInsert(ctx, w.Call); err != nil {
				return fmt.Errorf("record attempt: %w", err)
			}
		}
		if _, err := a.tx.ExecContext(ctx, `UPDATE effects SET state = ?, next_attempt_at = ?, attempts = ?, error_class = ?,
		reason = ?, suggested_repair = ?, destination_ref = CASE WHEN ? = '' THEN destination_ref ELSE ? END,
		last_response = ?, lease_token = '', lease_until = ?, updated_at = ?, owner = ?,
		mismatch_at = CASE WHEN ? = 'done' THEN NULL ELSE mismatch_at END, calls = ?, restart = ? WHERE id = ?`,
			w.State, dueAt(w.NextAttemptAt), w.Attempts, w.Class, w.Reason, w.SuggestedRepair, w.DestinationRef, w.DestinationRef,
			w.LastResponse, leaseFree, w.Now.UnixMicro(), w.Owner, w.State, w.Calls, w.Restart, w.EffectID); err != nil {
			return err
		}
	}
	return nil
}

func (a txn) EffectRetry(ctx context.Context, p *store.EffectOperateParams) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE effects SET state = 'approved', attempts = 0, next_attempt_at = ?, restart = ?,
		note = CASE WHEN ? = '' THEN note ELSE ? END, updated_at = ? WHERE id = ?`,
		noTime, store.RestartOperatorRetry, p.Note, p.Note, p.Now.UnixMicro(), p.EffectID)
	return err
}

func (a txn) EffectResolve(ctx context.Context, p *store.EffectOperateParams) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE effects SET state = 'resolved', next_attempt_at = ?, note = ?, updated_at = ?,
		mismatch_at = NULL WHERE id = ?`, noTime, p.Note, p.Now.UnixMicro(), p.EffectID)
	return err
}

func (a txn) EffectAssign(ctx context.Context, p *store.EffectOperateParams) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE effects SET owner = ?, note = CASE WHEN ? = '' THEN note ELSE ? END,
		updated_at = ? WHERE id = ?`, p.Owner, p.Note, p.Note, p.Now.UnixMicro(), p.EffectID)
	return err
}

// EffectRelease gives a claim back without a call; see store.Ledger for
// where the effect goes. A claim already lost is left alone.
func (s *Store) EffectRelease(ctx context.Context, p *store.EffectReleaseParams) error {
	// A reconciliation without a time would wait for a person: one given
	// back with a zero NotBefore is due at once instead.
	if err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, `UPDATE effects SET state = CASE
			WHEN error_class = 'unknown_outcome' THEN 'needs_reconciliation'
			WHEN attempts = 0 AND error_class = '' THEN 'approved'
			ELSE 'retry_wait' END,
		next_attempt_at = CASE WHEN ? = 0 AND error_class = 'unknown_outcome' THEN ? ELSE ? END,
		lease_token = '', lease_until = ?, updated_at = ?,
		owner = CASE WHEN owner = '' AND error_class = 'unknown_outcome' THEN ? ELSE owner END
		WHERE id = ? AND lease_token = ? AND state = 'submitting'`,
			dueAt(p.NotBefore), p.Now.UnixMicro(), dueAt(p.NotBefore), leaseFree, p.Now.UnixMicro(), p.Owner, p.EffectID, p.Token)
		return err
	}); err != nil {
		return fmt.Errorf("release effect %d: %w", p.EffectID, err)
	}
	return nil
}

// EffectGet returns one effect, or nil when there is none.
func (s *Store) EffectGet(ctx context.Context, id int64) (*store.Effect, error) {
	f, err := getEffect(s.reader.QueryRowContext(ctx, effectByID, id))
	if err != nil {
		return nil, fmt.Errorf("get effect %d: %w", id, err)
	}
	return f, nil
}

// AttemptList returns an effect's attempts in order.
func (s *Store) AttemptList(ctx context.Context, effectID int64) ([]*store.Attempt, error) {
	rows, err := s.readQuery(ctx, `SELECT id, effect_id, number, started_at, duration_us, status, class, error,
		response, retry_after, retry_after_unit, wait_us, reconcile, restart FROM effect_attempts WHERE effect_id = ? ORDER BY id`, effectID)
	if err != nil {
		return nil, fmt.Errorf("list attempts of effect %d: %w", effectID, err)
	}
	defer rows.Close()
	var out []*store.Attempt
	for rows.Next() {
		a := &store.Attempt{}
		var started, dur, wait int64
		if err := rows.Scan(&a.ID, &a.EffectID, &a.Number, &started, &dur, &a.Status, &a.Class, &a.Error,
			&a.Response, &a.RetryAfter, &a.RetryAfterUnit, &wait, &a.Reconcile, &a.Restart); err != nil {
			return nil, fmt.Errorf("list attempts of effect %d: %w", effectID, err)
		}
		a.StartedAt = time.UnixMicro(started).UTC()
		a.Duration = time.Duration(dur) * time.Microsecond
		a.Wait = time.Duration(wait) * time.Microsecond
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list attempts of effect %d: %w", effectID, err)
	}
	return out, nil
}

// EffectNewer finds a newer effect of the same business effect.
func (s *Store) EffectNewer(ctx context.Context, id int64) (string, error) {
	var key string
	err := s.readQueryRow(ctx, `SELECT g.episode_key FROM effects f
		JOIN effects g ON g.flow = f.flow AND g.entity = f.entity AND g.effect = f.effect AND g.id > f.id AND g.compensates = 0
		WHERE f.id = ? AND f.compensates = 0 AND f.flow <> ? ORDER BY g.id DESC LIMIT 1`, id, store.PublishFlow).Scan(&key)
	if err != nil && !errors.Is(err, sql.ErrNoRows) { // none is newer
		return "", fmt.Errorf("newer effect than %d: %w", id, err)
	}
	return key, nil
}
