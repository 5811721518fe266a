package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	// long ago, leases live) and retries scheduled for later; other has a
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
		return []any{now, 3, arg, limit, "w1", until, resumedReason}
	}

	plan, removed, returned := explain(t, h.pool, "(ANALYZE, COSTS OFF, TIMING OFF)", sql, args("sink")...)
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

	plan, removed, returned = explain(t, h.pool, "(ANALYZE, COSTS OFF, TIMING OFF)", sql, args("later")...)
	t.Logf("claim for later (nothing due), custom plan:\n%s", plan)
	if returned != 0 || removed != 0 {
		t.Errorf("a claim with nothing due took %d effects and passed over %d, want 0 and 0:\n%s", returned, removed, plan)
	}

	literals := make([]string, 0, 7)
	for _, a := range args("sink") {
		switch v := a.(type) {
		case time.Time:
			a = v.Format(time.RFC3339Nano)
		case []string:
			a = "{" + strings.Join(v, ",") + "}"
		}
		literals = append(literals, "'"+strings.ReplaceAll(fmt.Sprint(a), "'", "''")+"'")
	}
	generic := genericPlan(t, h.pool, sql, "EXECUTE plan_me("+strings.Join(literals, ", ")+")")
	t.Logf("claim, generic plan:\n%s", generic)
	if !strings.Contains(generic, "effects_due_destination") || strings.Contains(generic, "Sort") {
		t.Errorf("the claim's generic plan does not read effects_due_destination in order:\n%s", generic)
	}
}
