package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookledger/hookledger/internal/store"
)

// Ledger locking: each transaction locks effect rows only, and waits on at
// most one (settle, release and operate touch one effect; claims never
// wait, they skip locked rows). FlowApply's superseding update may wait on
// a claim's locks, never the other way round, so no cycle can form.

// effectColumns selects a store.Effect from effects f joined to its source
// event e; scanEffect reads them in this order.
const effectColumns = `f.id, f.episode_key, f.flow, f.entity, f.version, f.effect, f.destination, f.state, f.request::text,
	e.source, e.event_id, f.causation_id, f.hop, f.attempts, f.created_at, f.updated_at,
	f.next_attempt_at, f.redrives, f.error_class, f.reason, f.suggested_repair, f.destination_ref,
	f.last_response, f.owner, f.note, f.compensates, f.deadline_at, f.deadline_warn_at, f.on_deadline,
	f.deadline_missed_at, f.mismatch_at, f.calls, f.restart, e.trace_context, ` + laterSourcesSQL

// laterSourcesSQL reads the later source events of effect f as a JSON
// array of [source, event id] pairs, oldest first; most effects have none
// and read nothing more.
const laterSourcesSQL = `CASE WHEN cardinality(f.later_event_pks) = 0 THEN '[]' ELSE (
	SELECT json_agg(json_build_array(le.source, le.event_id) ORDER BY l.n)::text
	FROM unnest(f.later_event_pks) WITH ORDINALITY l(pk, n) JOIN events le ON le.pk = l.pk) END`

// effectColumnsWithoutRequest is effectColumns with an empty request
// (EffectListParams.WithoutRequest).
var effectColumnsWithoutRequest = strings.Replace(effectColumns, "f.request::text,", "''::text,", 1)

const effectFrom = ` FROM effects f JOIN events e ON e.pk = f.source_event_pk`

// effectScan holds the columns of effectColumns that need converting
// after the scan.
type effectScan struct {
	req, later                       string
	next                             pgtype.Timestamptz
	deadline, warn, missed, mismatch *time.Time
}

// dests are the scan destinations of effectColumns, in order.
func (sc *effectScan) dests(f *store.Effect) []any {
	return []any{&f.ID, &f.EpisodeKey, &f.Flow, &f.Entity, &f.Version, &f.Effect, &f.Destination, &f.State, &sc.req,
		&f.Source, &f.SourceEventID, &f.CausationID, &f.Hop, &f.Attempts, &f.CreatedAt, &f.UpdatedAt,
		&sc.next, &f.Redrives, &f.ErrorClass, &f.Reason, &f.SuggestedRepair, &f.DestinationRef,
		&f.LastResponse, &f.Owner, &f.Note, &f.Compensates, &sc.deadline, &sc.warn, &f.OnDeadline,
		&sc.missed, &sc.mismatch, &f.Calls, &f.Restart, &f.TraceContext, &sc.later}
}

// finish converts what dests scanned into f.
func (sc *effectScan) finish(f *store.Effect) error {
	f.DeadlineAt, f.DeadlineWarnAt = fromNull(sc.deadline), fromNull(sc.warn)
	f.DeadlineMissedAt, f.MismatchAt = fromNull(sc.missed), fromNull(sc.mismatch)
	f.Request = []byte(sc.req)
	f.CreatedAt, f.UpdatedAt = f.CreatedAt.UTC(), f.UpdatedAt.UTC()
	// '-infinity' is "nothing scheduled": the zero time.
	f.NextAttemptAt = time.Time{}
	if sc.next.Valid && sc.next.InfinityModifier == pgtype.Finite {
		f.NextAttemptAt = sc.next.Time.UTC()
	}
	return store.SetLaterSources(f, sc.later)
}

func scanEffect(row pgx.Row, f *store.Effect) error {
	var sc effectScan
	if err := row.Scan(sc.dests(f)...); err != nil {
		return err
	}
	return sc.finish(f)
}

func collectEffects(rows pgx.Rows) ([]*store.Effect, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Effect, error) {
		f := &store.Effect{}
		return f, scanEffect(r, f)
	})
}

// effectByIDSQL selects one effect.
const effectByIDSQL = `SELECT ` + effectColumns + effectFrom + ` WHERE f.id = $1`

func getEffect(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, id int64, lock string) (*store.Effect, error) {
	f := &store.Effect{}
	err := scanEffect(q.QueryRow(ctx, effectByIDSQL+lock, id), f)
	if err != nil {
		return store.NoRow[store.Effect](err, pgx.ErrNoRows, "")
	}
	return f, nil
}

// EffectLease runs each claim in one statement. As in EntityClaim, SKIP
// LOCKED lets claimers in several processes run at once, each passing
// over rows another holds and re-checking the due condition on the rows
// it locks; the candidates are MATERIALIZED so the locking select runs
// once. The update applies store.LeaseTransition in SQL, reads the state
// each row had before the claim from the candidate list and returns the
// claimed effects whole. With their settings (effectClaimSettings) and
// the pipe's BEGIN the claims are the transaction's first round trip,
// however many destinations they name; the rows a re-drive or a resumed
// call adds go with the COMMIT, the second. Each round trip a claim holds
// its locks across is one more wait for a busy process to be scheduled
// (it was four: BEGIN, the claim, reading the claimed rows back, COMMIT).
func (a txn) EffectLease(ctx context.Context, ps []*store.EffectLeaseParams) ([][]*store.LeasedEffect, error) {
	got := make([][]leaseRow, len(ps))
	a.t.exec("claim plan settings", `SELECT `+effectClaimSettings)
	a.t.beforeReads()
	for i, p := range ps {
		destFilter, dests := claimDestinations(p.Destinations)
		a.t.later("claim effects", effectClaimSQL(destFilter),
			[]any{p.Now, p.MaxRedrives, dests, p.Limit, p.Owner, p.Until, p.ResumedReason}, scanLeaseRows(&got[i]))
	}
	if err := a.t.flush(ctx); err != nil {
		return nil, err
	}
	out := make([][]*store.LeasedEffect, len(ps))
	for i, g := range got {
		// RETURNING keeps no order, and the rows are due at the lease's
		// end now: put them in claim order, due time then id.
		slices.SortFunc(g, func(a, b leaseRow) int {
			return cmp.Or(a.due.Compare(b.due), cmp.Compare(a.c.ID, b.c.ID))
		})
		out[i] = make([]*store.LeasedEffect, len(g))
		for j, x := range g {
			out[i][j] = x.c
		}
	}
	return out, nil
}

// leaseRow is one effect a claim leased, as its statement returned it.
type leaseRow struct {
	c *store.LeasedEffect
	// When it was due: the claim's order. Never -infinity here: every
	// claimable state needs next_attempt_at <= now, and a
	// needs_reconciliation or dead effect a finite one.
	due time.Time
}

// scanLeaseRows appends the rows of one claim's statement to *got.
func scanLeaseRows(got *[]leaseRow) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			x := leaseRow{c: &store.LeasedEffect{}}
			var sc effectScan
			var prior store.EffectState
			var due pgtype.Timestamptz
			if err := rows.Scan(append(sc.dests(&x.c.Effect), &x.c.Token, &prior, &x.c.PriorAt, &x.c.PriorUntil, &due)...); err != nil {
				return err
			}
			if err := sc.finish(&x.c.Effect); err != nil {
				return err
			}
			x.c.State, x.due = prior, due.Time
			x.c.PriorAt, x.c.PriorUntil = x.c.PriorAt.UTC(), x.c.PriorUntil.UTC()
			*got = append(*got, x)
		}
		return nil
	}
}

// AttemptInsert queues the insert of one attempts row.
func (a txn) AttemptInsert(_ context.Context, at *store.Attempt) error {
	a.t.exec("record attempt", `INSERT INTO effect_attempts (effect_id, number, started_at, duration_us, status,
		class, error, response, retry_after, retry_after_unit, wait_us, reconcile, restart)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`,
		at.EffectID, at.Number, at.StartedAt, at.Duration.Microseconds(), at.Status, string(at.Class), at.Error, at.Response,
		at.RetryAfter, at.RetryAfterUnit, at.Wait.Microseconds(), at.Reconcile, at.Restart)
	return nil
}

// effectClaimSQL is the claim: $1 now, $2 the re-drive limit, $3 the
// destinations, with the filter claimDestinations gives, $4 the limit, $5
// the owner, $6 the lease's end, $7 the reason of a resumed call.
func effectClaimSQL(destFilter string) string {
	return `WITH c AS MATERIALIZED (
			-- A free lease is -infinity, which no time.Time holds: only
			-- an abandoned call needs its lease's end.
			SELECT id, state, updated_at, next_attempt_at,
				CASE WHEN state = 'submitting' THEN lease_until ELSE updated_at END AS lease_until
			FROM effects d
			WHERE ` + effectDueSQL("d", "$1", "$2") + `
			AND ` + destFilter + `
			AND ` + store.NoOlderInFlightSQL("d", "") + `
			ORDER BY next_attempt_at, id
			LIMIT $4 FOR UPDATE SKIP LOCKED)
		UPDATE effects f SET state = 'submitting',
			lease_token = $5 || ':' || replace(gen_random_uuid()::text, '-', ''), lease_until = $6, next_attempt_at = $6, updated_at = $1, claimed_at = $1,
			attempts = CASE WHEN c.state = 'dead' THEN 0 WHEN c.state = 'submitting' THEN f.attempts + 1 ELSE f.attempts END,
			redrives = CASE WHEN c.state = 'dead' THEN f.redrives + 1 ELSE f.redrives END,
			error_class = CASE WHEN c.state = 'submitting' THEN 'unknown_outcome' ELSE f.error_class END,
			reason = CASE WHEN c.state = 'submitting' THEN $7 ELSE f.reason END,
			calls = CASE WHEN c.state = 'submitting' THEN f.calls + 1 ELSE f.calls END,
			restart = CASE WHEN c.state = 'dead' THEN '` + store.RestartRedrive + `' ELSE f.restart END
		FROM c, events e WHERE f.id = c.id AND e.pk = f.source_event_pk
		RETURNING ` + effectColumns + `, f.lease_token, c.state, c.updated_at, c.lease_until, c.next_attempt_at`
}

// effectDueSQL is the claim's due condition on effect d at now, dead
// effects being re-driven below redrives: the same condition claimDestinations
// explains, for the claim and for an insert that claims its own effects
// (firstClaimableSQL).
func effectDueSQL(d, now, redrives string) string {
	return `((` + d + `.state = 'approved' AND ` + d + `.next_attempt_at <= ` + now + `)
				OR (` + d + `.state = 'retry_wait' AND ` + d + `.next_attempt_at <= ` + now + `)
				OR (` + d + `.state = 'needs_reconciliation' AND ` + d + `.next_attempt_at > '-infinity' AND ` + d + `.next_attempt_at <= ` + now + `)
				OR (` + d + `.state = 'dead' AND ` + d + `.redrives < ` + redrives + ` AND ` + d + `.next_attempt_at > '-infinity' AND ` + d + `.next_attempt_at <= ` + now + `)
				OR (` + d + `.state = 'submitting' AND ` + d + `.lease_until <= ` + now + `))
			AND ` + d + `.state IN ('approved', 'retry_wait', 'dead', 'submitting', 'needs_reconciliation')
			AND ` + d + `.next_attempt_at <= ` + now
}

// firstClaimableSQL is the id of the effect a claim at destination dest
// at now (re-drives below redrives) would take first, NULL when it would
// take none: what an insert of effects already claimed asks before it
// claims them (a publish's, a settle's). It looks as the claim does, the
// destination's due effects in due order (effects_due_destination):
// asked as an EXISTS, a settle's insert read every due effect of every
// destination through effects_due once the planner had statistics
// (TestPipelinePlans).
func firstClaimableSQL(dest, now, redrives string) string {
	return `(SELECT x.id FROM effects x WHERE x.destination = ` + dest + ` AND ` + effectDueSQL("x", now, redrives) + `
		AND ` + store.NoOlderInFlightSQL("x", "") + ` ORDER BY x.next_attempt_at, x.id LIMIT 1)`
}

// claimDestinations is the claim's condition on $3 and the argument for
// it. The delivery worker claims for one destination at a time, and it
// gets a scalar equality: with it the planner reads effects_due_destination
// in due order and stops at the claim's limit. Under = ANY, even of one
// element, PostgreSQL 15 cannot use that order, so every claim read and
// sorted the destination's whole backlog: at 5,000 due effects, 9.2 ms and
// 199 buffers against 0.5 ms and 24 (docs/benchmarks-history.md,
// "Delivery claims in due order").
//
// Every branch of the due condition implies next_attempt_at <= $1 (a claim
// sets next_attempt_at to the lease's end, so a call whose lease ran out
// is due; a call still in flight is not, and sits behind the due effects
// in the index instead of ahead of them, where each claim read through
// every call in flight). The query repeats it so that the scan stops at
// the first effect not yet due instead of walking the destination's
// scheduled retries and calls in flight.
func claimDestinations(dests []string) (filter string, arg any) {
	switch len(dests) {
	case 0:
		return `$3::text IS NULL`, nil
	case 1:
		return `destination = $3::text`, dests[0]
	}
	return `destination = ANY($3::text[])`, dests
}

// EffectsFence reads and locks, in one round trip, every effect whose
// lease still holds (in id order). The lock is FOR NO KEY UPDATE, the lock
// the settle's UPDATE takes anyway: a claimer skips the locked row, and a
// row changed meanwhile is re-checked as it now stands. A lock, not a
// no-op UPDATE: that wrote a row version, and its index entries, per
// settle. One settle reads its one row by its keys; a group joins the
// arrays of its ids, tokens and times.
func (a txn) EffectsFence(ctx context.Context, ps []*store.EffectSettleParams) (map[int64]*store.FencedEffect, error) {
	held := make(map[int64]*store.FencedEffect, len(ps))
	scan := func(rows pgx.Rows) error {
		for rows.Next() {
			f := &store.FencedEffect{}
			if err := rows.Scan(f.Dests()...); err != nil {
				return err
			}
			held[f.ID] = f
		}
		return nil
	}
	if len(ps) == 1 {
		p := ps[0]
		return held, a.t.query(ctx, "check lease", fenceOneSQL, []any{p.EffectID, p.Token, p.Now}, scan)
	}
	n := len(ps)
	ids, tokens, nows := make([]int64, n), make([]string, n), make([]time.Time, n)
	for i, p := range ps {
		ids[i], tokens[i], nows[i] = p.EffectID, p.Token, p.Now
	}
	return held, a.t.query(ctx, "check leases", fenceGroupSQL, []any{ids, tokens, nows}, scan)
}

// submittingSQL is true of an effect f in submitting. A fence's, a
// guarded settle's or a release's check of the state is written so, as a
// CASE the planner cannot match to an index: effects_due's key starts
// with the state, and with f.state = 'submitting' the planner read that
// index's entries of every call in flight and filtered them by id,
// instead of looking the ids up by primary key (TestPipelinePlans, on a
// table with statistics and without).
const submittingSQL = `CASE WHEN f.state = 'submitting' THEN true ELSE false END`

// fenceOneSQL fences one settle's effect ($1, its token $2, at $3).
const fenceOneSQL = `SELECT ` + store.FencedEffectColumns + effectFrom + `
	WHERE f.id = $1 AND f.lease_token = $2 AND ` + submittingSQL + ` AND f.lease_until > $3
	FOR NO KEY UPDATE OF f`

// fenceGroupSQL fences a group's effects (arrays $1-$3 of ids, tokens and
// times).
const fenceGroupSQL = `SELECT ` + store.FencedEffectColumns + effectFrom + `
	JOIN unnest($1::bigint[], $2::text[], $3::timestamptz[]) AS u(id, token, now)
		ON f.id = u.id AND f.lease_token = u.token AND f.lease_until > u.now
	WHERE f.id = ANY($1) AND ` + submittingSQL + `
	ORDER BY f.id FOR NO KEY UPDATE OF f`

// EffectsSettle queues the attempts rows and the effects' new states as
// one statement each, whatever the group's size: one transaction a settle
// cost a commit and four statements per effect.
func (a txn) EffectsSettle(_ context.Context, ws []*store.SettleWrite) error {
	var w settleWrites
	for _, s := range ws {
		if s.Call != nil {
			w.attempts = append(w.attempts, s.Call)
		}
		w.updates = append(w.updates, s)
	}
	w.queue(a.t)
	return nil
}

// settleWrites collects a settle group's attempts rows and effect updates,
// to go as one statement each.
type settleWrites struct {
	attempts []*store.Attempt
	updates  []*store.SettleWrite
}

func (w *settleWrites) queue(t *pipeTx) {
	if len(w.attempts) > 0 {
		t.exec("record attempts", `INSERT INTO effect_attempts (`+attemptInsertColumns+`)
			SELECT * FROM unnest(`+attemptArrays.params(1)+`)`, attemptArrays.args(w.attempts)...)
	}
	if len(w.updates) > 0 {
		t.exec("update effects", settleEffectsSQL, settleArrays.args(w.updates)...)
	}
}

// arrays is a statement's parameters of one array per column, for the
// rows of a group: their types, and how to fill them from the group.
type arrays[T any] struct {
	types []string
	args  func([]T) []any
}

// params names the arrays as parameters $from, $from+1, ... with their
// types.
func (a arrays[T]) params(from int) string {
	ps := make([]string, len(a.types))
	for i, typ := range a.types {
		ps[i] = postgresDialect.Param(from+i) + "::" + typ + "[]"
	}
	return strings.Join(ps, ", ")
}

// attemptInsertColumns are the columns of effect_attempts that
// attemptArrays fill, in their order.
const attemptInsertColumns = `effect_id, number, started_at, duration_us, status, class, error, response, retry_after,
	retry_after_unit, wait_us, reconcile, restart`

// attemptArrays are the attempts rows of a settle group.
var attemptArrays = arrays[*store.Attempt]{
	types: []string{"bigint", "int", "timestamptz", "bigint", "int", "text", "text", "text", "text", "text", "bigint", "bool", "text"},
	args: func(as []*store.Attempt) []any {
		n := len(as)
		ids, numbers, started, dur, status := make([]int64, n), make([]int32, n), make([]time.Time, n), make([]int64, n), make([]int32, n)
		class, errText, resp, ra, raUnit := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		wait, reconcile, restart := make([]int64, n), make([]bool, n), make([]string, n)
		for i, a := range as {
			ids[i], numbers[i], started[i], dur[i], status[i] = a.EffectID, int32(a.Number), a.StartedAt, a.Duration.Microseconds(), int32(a.Status)
			class[i], errText[i], resp[i], ra[i], raUnit[i] = string(a.Class), a.Error, a.Response, a.RetryAfter, a.RetryAfterUnit
			wait[i], reconcile[i], restart[i] = a.Wait.Microseconds(), a.Reconcile, a.Restart
		}
		return []any{ids, numbers, started, dur, status, class, errText, resp, ra, raUnit, wait, reconcile, restart}
	},
}

// settleArrays are the effects' next states of a settle group, named
// settleColumns in settleEffectSet.
var settleArrays = arrays[*store.SettleWrite]{
	types: []string{"bigint", "text", "timestamptz", "bigint", "text", "text", "text", "text", "text", "timestamptz", "text", "bigint", "text"},
	args: func(ws []*store.SettleWrite) []any {
		n := len(ws)
		ids, states, attempts := make([]int64, n), make([]string, n), make([]int64, n)
		next := make([]pgtype.Timestamptz, n)
		class, reason, repair, ref, resp, at := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]time.Time, n)
		owner, calls, restart := make([]string, n), make([]int64, n), make([]string, n)
		for i, p := range ws {
			ids[i], states[i], attempts[i], owner[i] = p.EffectID, string(p.State), int64(p.Attempts), p.Owner
			calls[i], restart[i] = int64(p.Calls), p.Restart
			next[i] = pgtype.Timestamptz{Time: p.NextAttemptAt, Valid: !p.NextAttemptAt.IsZero()}
			class[i], reason[i], repair[i], ref[i], resp[i], at[i] = string(p.Class), p.Reason, p.SuggestedRepair, p.DestinationRef, p.LastResponse, p.Now
		}
		return []any{ids, states, next, attempts, class, reason, repair, ref, resp, at, owner, calls, restart}
	},
}

// settleColumns name settleArrays' columns as settleEffectSet reads them
// (u.state, u.next_at, ...).
const settleColumns = `id, state, next_at, attempts, class, reason, repair, ref, resp, at, owner, calls, restart`

// settleEffectSet moves an effect f on to the settle u.
const settleEffectSet = `state = u.state, next_attempt_at = coalesce(u.next_at, '-infinity'),
		attempts = u.attempts, error_class = u.class, reason = u.reason, suggested_repair = u.repair,
		destination_ref = CASE WHEN u.ref = '' THEN f.destination_ref ELSE u.ref END,
		last_response = u.resp, lease_token = '', lease_until = '-infinity', updated_at = u.at, owner = u.owner,
		mismatch_at = CASE WHEN u.state = 'done' THEN NULL ELSE f.mismatch_at END, calls = u.calls, restart = u.restart`

// settleEffectsSQL moves effects $1 on (settleArrays, one element per
// effect); f.id = ANY($1) names the primary key lookups outright.
var settleEffectsSQL = `UPDATE effects f SET ` + settleEffectSet + `
	FROM unnest(` + settleArrays.params(1) + `) AS u(` + settleColumns + `)
	WHERE f.id = u.id AND f.id = ANY($1)`

// EffectsSettleSeen settles each of ws whose effect stands as its claim
// left it, in one round trip: BEGIN, settleSeenSQL and COMMIT go
// together. It saves the fence's round trip, which every call's settle
// cost before its writes and the commit could go (docs/postgres.md).
func (s *Store) EffectsSettleSeen(ctx context.Context, ws []*store.SettleWrite, audits []*store.AuditInsertParams) (map[int64]bool, error) {
	if len(audits) != len(ws) {
		return nil, fmt.Errorf("settle effects: %d audit rows for %d settles", len(audits), len(ws))
	}
	args := settleSeenArgs(ws, audits)
	t, err := s.beginPipe(ctx, pipePlanSQL)
	if err != nil {
		return nil, fmt.Errorf("settle effects: %w", err)
	}
	settled := make(map[int64]bool, len(ws))
	err = s.runPipe(ctx, t, func(t *pipeTx) error {
		t.later("settle effects", settleSeenSQL, args, func(rows pgx.Rows) error {
			for rows.Next() {
				var id int64
				if err := rows.Scan(&id); err != nil {
					return err
				}
				settled[id] = true
			}
			return nil
		})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("settle effects: %w", err)
	}
	return settled, nil
}

// settleSeenArgs are settleSeenSQL's arguments for ws and their audit
// rows.
func settleSeenArgs(ws []*store.SettleWrite, audits []*store.AuditInsertParams) []any {
	var calls []*store.Attempt
	for _, w := range ws {
		if w.Call != nil {
			calls = append(calls, w.Call)
		}
	}
	args := settleArrays.args(ws)
	args = append(args, seenArrays.args(ws)...)
	args = append(args, attemptArrays.args(calls)...)
	return append(args, auditArrays.args(audits)...)
}

// seenArrays are what each settle's claim saw (store.FencedEffect) beside
// its lease token: settleSeenSQL's guard.
var seenArrays = arrays[*store.SettleWrite]{
	types: []string{"text", "text", "bigint", "bigint", "text", "text", "text"},
	args: func(ws []*store.SettleWrite) []any {
		n := len(ws)
		token, owner, attempts, calls := make([]string, n), make([]string, n), make([]int64, n), make([]int64, n)
		restart, episode, entity := make([]string, n), make([]string, n), make([]string, n)
		for i, w := range ws {
			c := w.Claimed
			token[i], owner[i], attempts[i], calls[i] = w.Token, c.Owner, int64(c.Attempts), int64(c.Calls)
			restart[i], episode[i], entity[i] = c.Restart, c.EpisodeKey, c.Entity
		}
		return []any{token, owner, attempts, calls, restart, episode, entity}
	},
}

// auditInsertColumns are the columns of audit that auditArrays fill, in
// their order.
const auditInsertColumns = `at, actor, action, source, event_id, entity, detail`

// auditArrays are audit rows.
var auditArrays = arrays[*store.AuditInsertParams]{
	types: []string{"timestamptz", "text", "text", "text", "text", "text", "text"},
	args: func(as []*store.AuditInsertParams) []any {
		n := len(as)
		at := make([]time.Time, n)
		actor, action, source, eventID, entity, detail := make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n)
		for i, a := range as {
			at[i], actor[i], action[i], source[i], eventID[i], entity[i], detail[i] = a.At, a.Actor, a.Action, a.Source, a.EventID, a.Entity, a.Detail
		}
		return []any{at, actor, action, source, eventID, entity, detail}
	},
}

// settleSeenSQL settles effects by what their claims saw, in one
// statement: the update of settleEffectsSQL, guarded by the fence's
// condition and by the claim's view (seenArrays), and the attempts and
// audit rows of the effects it updated, inserted from its answer; its
// arguments are settleSeenArgs, the arrays one after the other. It
// answers the ids it updated.
//
// The guard is the fence's, not a weaker one: under READ COMMITTED a row
// another transaction changes meanwhile is waited for and re-checked as
// it then stands, as the fence's row lock re-checks it, and the update's
// own row lock holds until the commit. A settle whose guard fails writes
// nothing, and settles the fenced way (store.SeenSettleDriver). The audit
// and attempts rows go in their settles' order (ORDER BY n), as the
// fenced way writes them. The state is checked as the fence checks it
// (submittingSQL). Its plan reads the ids in primary-key order, so it
// locks them in the fence's order; should two settles still deadlock (a
// stale holder's group beside the new holder's), PostgreSQL aborts one,
// which then wrote nothing, and its settles go the fenced way.
var settleSeenSQL = func() string {
	seen := 1 + len(settleArrays.types)
	calls := seen + len(seenArrays.types)
	audits := calls + len(attemptArrays.types)
	return `WITH u AS (
		SELECT * FROM unnest(` + settleArrays.params(1) + `, ` + seenArrays.params(seen) + `)
		AS u(` + settleColumns + `, token, seen_owner, seen_attempts, seen_calls, seen_restart, seen_episode, seen_entity)),
	s AS (UPDATE effects f SET ` + settleEffectSet + ` FROM u
		WHERE f.id = u.id AND f.id = ANY($1) AND f.lease_token = u.token AND f.lease_until > u.at
			AND ` + submittingSQL + `
			AND f.owner = u.seen_owner AND f.attempts = u.seen_attempts AND f.calls = u.seen_calls
			AND f.restart = u.seen_restart AND f.episode_key = u.seen_episode AND f.entity = u.seen_entity
		RETURNING f.id),
	a AS (INSERT INTO effect_attempts (` + attemptInsertColumns + `)
		SELECT ` + attemptInsertColumns + ` FROM unnest(` + attemptArrays.params(calls) + `)
			WITH ORDINALITY AS a(` + attemptInsertColumns + `, n)
		WHERE a.effect_id IN (SELECT id FROM s) ORDER BY n),
	l AS (INSERT INTO audit (` + auditInsertColumns + `)
		SELECT ` + auditInsertColumns + ` FROM unnest($1::bigint[], ` + auditArrays.params(audits) + `)
			WITH ORDINALITY AS l(effect_id, ` + auditInsertColumns + `, n)
		WHERE l.effect_id IN (SELECT id FROM s) ORDER BY n)
	SELECT id FROM s`
}()

// EffectRelease gives a claim back without a call; see store.Ledger for
// where the effect goes. A claim already lost is left alone. A
// reconciliation without a time would wait for a person: one given back
// with a zero NotBefore is due at once instead.
func (s *Store) EffectRelease(ctx context.Context, p *store.EffectReleaseParams) error {
	if _, err := s.pool.Exec(ctx, releaseEffectSQL, nullTime(p.NotBefore), p.Now, p.EffectID, p.Token, p.Owner); err != nil {
		return fmt.Errorf("release effect %d: %w", p.EffectID, err)
	}
	return nil
}

// releaseEffectSQL gives effect $3 back from the claim of token $4, due
// at $1 (NULL: see EffectRelease), at $2, to owner $5 should it await
// reconciliation without one.
const releaseEffectSQL = `UPDATE effects f SET state = CASE
		WHEN error_class = 'unknown_outcome' THEN 'needs_reconciliation'
		WHEN attempts = 0 AND error_class = '' THEN 'approved'
		ELSE 'retry_wait' END,
	next_attempt_at = CASE WHEN $1::timestamptz IS NULL AND error_class = 'unknown_outcome' THEN $2
		ELSE coalesce($1::timestamptz, '-infinity') END,
	lease_token = '', lease_until = '-infinity', updated_at = $2,
	owner = CASE WHEN owner = '' AND error_class = 'unknown_outcome' THEN $5 ELSE owner END
	WHERE id = $3 AND lease_token = $4 AND ` + submittingSQL

// EffectGet returns one effect, or nil when there is none.
func (s *Store) EffectGet(ctx context.Context, id int64) (*store.Effect, error) {
	f, err := getEffect(ctx, s.pool, id, "")
	if err != nil {
		return nil, fmt.Errorf("get effect %d: %w", id, err)
	}
	return f, nil
}

func (a txn) EffectRetry(_ context.Context, p *store.EffectOperateParams) error {
	a.t.exec("retry effect", `UPDATE effects SET state = 'approved', attempts = 0, next_attempt_at = '-infinity', restart = $4,
		note = CASE WHEN $1::text = '' THEN note ELSE $1::text END, updated_at = $2 WHERE id = $3`, p.Note, p.Now, p.EffectID,
		store.RestartOperatorRetry)
	return nil
}

func (a txn) EffectResolve(_ context.Context, p *store.EffectOperateParams) error {
	a.t.exec("resolve effect", `UPDATE effects SET state = 'resolved', next_attempt_at = '-infinity', note = $1, updated_at = $2,
		mismatch_at = NULL WHERE id = $3`, p.Note, p.Now, p.EffectID)
	return nil
}

func (a txn) EffectAssign(_ context.Context, p *store.EffectOperateParams) error {
	a.t.exec("assign effect", `UPDATE effects SET owner = $1, note = CASE WHEN $2::text = '' THEN note ELSE $2::text END,
		updated_at = $3 WHERE id = $4`, p.Owner, p.Note, p.Now, p.EffectID)
	return nil
}

// AttemptList returns an effect's attempts in order.
func (s *Store) AttemptList(ctx context.Context, effectID int64) ([]*store.Attempt, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, effect_id, number, started_at, duration_us, status, class, error,
		response, retry_after, retry_after_unit, wait_us, reconcile, restart FROM effect_attempts WHERE effect_id = $1 ORDER BY id`, effectID)
	if err != nil {
		return nil, fmt.Errorf("list attempts of effect %d: %w", effectID, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Attempt, error) {
		a := &store.Attempt{}
		var dur, wait int64
		if err := r.Scan(&a.ID, &a.EffectID, &a.Number, &a.StartedAt, &dur, &a.Status, &a.Class, &a.Error,
			&a.Response, &a.RetryAfter, &a.RetryAfterUnit, &wait, &a.Reconcile, &a.Restart); err != nil {
			return nil, err
		}
		a.StartedAt = a.StartedAt.UTC()
		a.Duration = time.Duration(dur) * time.Microsecond
		a.Wait = time.Duration(wait) * time.Microsecond
		return a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list attempts of effect %d: %w", effectID, err)
	}
	return out, nil
}

// effectClaimSettings pin the claim's plan to effects_due_destination in
// due order, for the claim's transaction only. The planner picks between
// that ordered scan and bitmap scans of effects_due and effects_state by
// their estimated rows, and the estimates come from statistics taken
// before the backlog grew: during a burst they say almost nothing is
// approved, the bitmap looks cheaper, and each claim then read every due
// effect and sorted them to take one or a few (400 buffers to claim one
// in TestEffectClaimPlanStaleStatistics, 600 to 900 seen under load).
// The ordered scan reads what it claims and the few rows it passes over,
// whatever the statistics say; with neither a bitmap nor a sort to
// choose, it is the only plan left. They extend the settings of every
// pipelined transaction (pipePlanSettings), which effectClaimPlanSQL
// applies together.
const effectClaimSettings = `set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true)`

// effectClaimPlanSQL applies every setting the claim is planned under.
const effectClaimPlanSQL = `SELECT ` + pipePlanSettings + `, ` + effectClaimSettings

// EffectNewer finds a newer effect of the same business effect
// (effects_entity leads to the effect's siblings).
func (s *Store) EffectNewer(ctx context.Context, id int64) (string, error) {
	var key string
	err := s.pool.QueryRow(ctx, `SELECT g.episode_key FROM effects f
		JOIN effects g ON g.flow = f.flow AND g.entity = f.entity AND g.effect = f.effect AND g.id > f.id AND g.compensates = 0
		WHERE f.id = $1 AND f.compensates = 0 AND f.flow <> $2 ORDER BY g.id DESC LIMIT 1`, id, store.PublishFlow).Scan(&key)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) { // none is newer
		return "", fmt.Errorf("newer effect than %d: %w", id, err)
	}
	return key, nil
}
