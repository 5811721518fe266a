package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestEffectClaimPlan: a delivery claim for one destination reads that
// destination's due effects from effects_due_destination in order and
// stops at its limit, in the custom plan and in the generic plan that
// PostgreSQL keeps for the prepared statement, however deep the backlog
// behind them. Before, the claim matched the destination with = ANY, and
// every claim read and sorted the whole due backlog. A destination with
// nothing due reads none of its scheduled retries.
func TestEffectClaimPlan(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	const backlog = 3000
	// Per destination: sink has a due backlog, 64 calls in flight (due
	// long ago, leases live: as claims left them before a claim moved
	// next_attempt_at to the lease's end) and retries scheduled for
	// later; other has a
	// due backlog of its own; later has only scheduled retries.
	type seed struct {
		dest, state string
		n           int
		due, lease  string // next_attempt_at and lease_until, as SQL of g
	}
	seeds := []seed{
		{"sink", "approved", backlog, "$1::timestamptz - g * interval '1 ms'", "'-infinity'"},
		{"sink", "submitting", 64, "$1::timestamptz - interval '1 hour' + g * interval '1 ms'", "$1::timestamptz + interval '1 minute'"},
		{"sink", "retry_wait", backlog, "$1::timestamptz + g * interval '1 s'", "'-infinity'"},
		{"other", "approved", backlog, "$1::timestamptz - g * interval '1 ms'", "'-infinity'"},
		{"later", "retry_wait", backlog, "$1::timestamptz + g * interval '1 s'", "'-infinity'"},
	}
	pk := 0
	for _, s := range seeds {
		seedAppliedEvents(t, h.pool, now, pk+1, pk+s.n)
		q := `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state, request,
				source_event_pk, causation_id, hop, created_at, updated_at, next_attempt_at, lease_until, lease_token)
			SELECT 'k' || ($2 + g), 'orders', 'o' || ($2 + g), 'r1', '0000000001', 'sync', '` + s.dest + `', '` + s.state + `', '{}',
				$2 + g, '', 0, $1, $1, ` + s.due + `, ` + s.lease + `, CASE WHEN '` + s.state + `' = 'submitting' THEN 'w0:x' ELSE '' END
			FROM generate_series(1, $3::int) g`
		if _, err := h.pool.Exec(ctx, q, now, pk, s.n); err != nil {
			t.Fatalf("seed %s %s: %v\n%s", s.dest, s.state, err, q)
		}
		pk += s.n
	}
	if _, err := h.pool.Exec(ctx, `ANALYZE events, effects`); err != nil {
		t.Fatal(err)
	}

	filter, _ := claimDestinations([]string{"sink"})
	sql := effectClaimSQL(filter)
	const limit = 20
	until := now.Add(time.Minute)
	args := func(dest string) []any {
		_, arg := claimDestinations([]string{dest})
		return []any{now, 3, arg, limit, "w1", until, store.ResumedReason}
	}

	plan, removed, returned := explainWith(t, h.pool, effectClaimPlanSQL, "(ANALYZE, COSTS OFF, TIMING OFF)", sql, args("sink")...)
	t.Logf("claim for sink, custom plan:\n%s", plan)
	if returned != limit {
		t.Errorf("the claim took %d effects, want %d", returned, limit)
	}
	if !strings.Contains(plan, "Index Scan using effects_due_destination") || strings.Contains(plan, "Sort") {
		t.Errorf("the claim does not read effects_due_destination in order:\n%s", plan)
	}
	// Only the calls in flight ahead of the backlog are read and passed
	// over; a claim that sorts the backlog reads all 3,000.
	if removed > 64 {
		t.Errorf("the claim read and passed over %d effects, want at most the 64 in flight:\n%s", removed, plan)
	}

	plan, removed, returned = explainWith(t, h.pool, effectClaimPlanSQL, "(ANALYZE, COSTS OFF, TIMING OFF)", sql, args("later")...)
	t.Logf("claim for later (nothing due), custom plan:\n%s", plan)
	if returned != 0 || removed != 0 {
		t.Errorf("a claim with nothing due took %d effects and passed over %d, want 0 and 0:\n%s", returned, removed, plan)
	}

	// What the claim's pipe runs: the generic plan under its settings.
	generic, removed, returned := explainGeneric(t, h.pool, effectClaimPlanSQL, "(ANALYZE, COSTS OFF, TIMING OFF)", sql, args("sink")...)
	t.Logf("claim, generic plan:\n%s", generic)
	if !strings.Contains(generic, "effects_due_destination") || strings.Contains(generic, "Sort") {
		t.Errorf("the claim's generic plan does not read effects_due_destination in order:\n%s", generic)
	}
	if returned != limit || removed > 64 {
		t.Errorf("the claim's generic plan took %d effects and passed over %d, want %d and at most the 64 in flight:\n%s",
			returned, removed, limit, generic)
	}
}

// TestEffectClaimPlanStaleStatistics: the claim keeps to
// effects_due_destination in order when the statistics are older than the
// backlog. A burst makes the due backlog grow faster than any ANALYZE
// follows it: statistics taken early say almost nothing is approved, and
// with them, and the index grown with the entries of effects already
// settled, PostgreSQL chose bitmap scans of effects_due, which read every
// due effect and sort them, to claim one (docs/benchmarks-history.md,
// "Delivery claims behind a burst"). The claim runs under
// effectClaimPlanSQL, which leaves the ordered scan the only plan; this
// test fails without it.
func TestEffectClaimPlanStaleStatistics(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	seed := func(from, n int, dest, state, due, lease string) {
		t.Helper()
		seedAppliedEvents(t, h.pool, now, from, from+n-1)
		q := `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state, request,
				source_event_pk, causation_id, hop, created_at, updated_at, next_attempt_at, lease_until, lease_token)
			SELECT 'k' || g, 'orders', 'o' || g, 'r1', '0000000001', 'sync', $3, $4, '{}',
				g, '', 0, $1, $1, ` + due + `, ` + lease + `, CASE WHEN $4 = 'submitting' THEN 'w0:x' ELSE '' END
			FROM generate_series($2::int, $2::int + $5::int - 1) g`
		if _, err := h.pool.Exec(ctx, q, now, from, dest, state, n); err != nil {
			t.Fatalf("seed %s %s: %v\n%s", dest, state, err, q)
		}
	}
	// Statistics taken early in a burst, as the store's own ANALYZE
	// (AnalyzeGrown) takes them: one destination, most effects done, a few
	// approved; every next_attempt_at -infinity (an approved effect is due
	// from the start, a done one has nothing scheduled). Autovacuum is
	// kept off the table so that nothing refreshes them during the test.
	if _, err := h.pool.Exec(ctx, `ALTER TABLE effects SET (autovacuum_enabled = off)`); err != nil {
		t.Fatal(err)
	}
	seed(1, 5000, "sink", "done", "'-infinity'", "'-infinity'")
	seed(5001, 10, "sink", "approved", "'-infinity'", "'-infinity'")
	if _, err := h.pool.Exec(ctx, `ANALYZE events, effects`); err != nil {
		t.Fatal(err)
	}
	// Then the backlog grows while calls are made: the first 5,000 of it
	// claimed and settled (leaving their index entries dead behind
	// them, as a busy store does between vacuums), then calls in flight,
	// due when their leases end.
	seed(5011, 12000, "sink", "approved", "'-infinity'", "'-infinity'")
	for _, q := range []string{
		`UPDATE effects SET state = 'submitting', next_attempt_at = $1::timestamptz + interval '1 minute',
			lease_until = $1::timestamptz + interval '1 minute', lease_token = 'w0:y' WHERE id BETWEEN 5011 AND 10010`,
		`UPDATE effects SET state = 'done', next_attempt_at = '-infinity', lease_until = '-infinity', lease_token = ''
			WHERE id BETWEEN 5011 AND 10010 AND $1::timestamptz IS NOT NULL`,
	} {
		if _, err := h.pool.Exec(ctx, q, now); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	seed(17011, 64, "sink", "submitting", "$1::timestamptz + interval '1 minute'", "$1::timestamptz + interval '1 minute'")

	filter, arg := claimDestinations([]string{"sink"})
	until := now.Add(time.Minute)
	for _, limit := range []int{1, 20} {
		plan, removed, returned := explainWith(t, h.pool, effectClaimPlanSQL, "(ANALYZE, BUFFERS, COSTS OFF, TIMING OFF)",
			effectClaimSQL(filter), now, 3, arg, limit, "w1", until, store.ResumedReason)
		t.Logf("claim of %d for sink, stale statistics:\n%s", limit, plan)
		if returned != limit {
			t.Errorf("the claim took %d effects, want %d", returned, limit)
		}
		if !strings.Contains(plan, "Index Scan using effects_due_destination") || strings.Contains(plan, "Sort") ||
			strings.Contains(plan, "Bitmap") {
			t.Errorf("the claim of %d does not read effects_due_destination in order:\n%s", limit, plan)
		}
		// The calls in flight are due when their leases end, behind the
		// backlog: nothing is read and passed over.
		if removed != 0 {
			t.Errorf("the claim of %d read and passed over %d effects, want 0:\n%s", limit, removed, plan)
		}
	}
}

// TestPipedStatementsAreNotCompiled: a statement planned under the pipes'
// settings is never compiled to machine code (JIT) as it runs. A plan
// that needs a node the settings turn off (here the sort of a claim for
// every destination, which no index gives in due order) costs ten billion
// to the planner, far above jit_above_cost, and PostgreSQL then spent
// about two seconds compiling and optimizing each run of a claim on a
// table of 24 rows: TestConformance/LedgerClaimConcurrent took a minute.
// The pipes' statements are short lookups by key, which compiling never
// pays for.
func TestPipedStatementsAreNotCompiled(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	now := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	seedAppliedEvents(t, h.pool, now, 1, 24)
	if _, err := h.pool.Exec(ctx, `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state, request,
			source_event_pk, causation_id, hop, created_at, updated_at, next_attempt_at)
		SELECT 'k' || g, 'orders', 'o' || g, 'r1', '0000000001', 'sync', 'd' || (g % 3), 'approved', '{}', g, '', 0, $1, $1, $1
		FROM generate_series(1, 24) g`, now); err != nil {
		t.Fatal(err)
	}
	filter, dests := claimDestinations(nil)
	sql := effectClaimSQL(filter)
	args := []any{now, 3, dests, 10, "w1", now.Add(time.Minute), store.ResumedReason}

	var available bool
	if err := h.pool.QueryRow(ctx, `SELECT pg_jit_available()`).Scan(&available); err != nil {
		t.Fatal(err)
	}
	if available {
		// The test means something only where the server would compile
		// the claim: with the compiler allowed, it does.
		plan, _, _ := explainWith(t, h.pool, effectClaimPlanSQL+`, set_config('jit', 'on', true)`, "(ANALYZE, TIMING OFF)", sql, args...)
		if !strings.Contains(plan, "JIT:") {
			t.Fatalf("with jit on, the claim for every destination was not compiled; the test no longer exercises what it guards:\n%s", plan)
		}
	} else {
		t.Log("this server has no JIT compiler (pg_jit_available() is false): only the settings are checked")
	}
	plan, _, returned := explainWith(t, h.pool, effectClaimPlanSQL, "(ANALYZE, TIMING OFF)", sql, args...)
	if strings.Contains(plan, "JIT:") {
		t.Errorf("under the pipes' settings the claim was compiled as it ran:\n%s", plan)
	}
	if returned != 10 {
		t.Errorf("the claim took %d effects, want 10", returned)
	}
	tx, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
	if _, err := tx.Exec(ctx, pipePlanSQL); err != nil {
		t.Fatal(err)
	}
	var jit string
	if err := tx.QueryRow(ctx, `SELECT current_setting('jit')`).Scan(&jit); err != nil {
		t.Fatal(err)
	}
	if jit != "off" {
		t.Errorf("the pipes' settings leave jit %q, want off", jit)
	}
}
