package postgres

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestSupersedePlanOnSmallTables: a settle group's lookup of each entity's
// open effects is planned by effects_open on a small ledger not analyzed
// yet (200 effects of one flow, as in a new install's first seconds). Before
// 0017_effects_flow_partial the planner took effects_flow there, which
// names the flow alone, and PostgreSQL kept that generic plan while the
// table grew: every lookup read every effect of the flow. The operators'
// list of a flow's effects can still read effects_flow in a generic plan.
func TestSupersedePlanOnSmallTables(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	// seed adds events from..to with one approved effect each, of the flow
	// flowSQL names (an expression of g, the event's pk).
	seed := func(from, to int, flowSQL string) {
		t.Helper()
		seedAppliedEvents(t, h.pool, at, from, to)
		q := `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state, request,
				source_event_pk, causation_id, hop, created_at, updated_at)
			SELECT 'k' || g, ` + flowSQL + `, 'o' || g, 'r1', '0000000001', 'sync', 'sink', 'approved', '{}', g, '', 0, $1::timestamptz, $1::timestamptz
			FROM generate_series($2::int, $3::int) g`
		if _, err := h.pool.Exec(ctx, q, at, from, to); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	for _, q := range []string{`ALTER TABLE effects SET (autovacuum_enabled = off)`, `ALTER TABLE events SET (autovacuum_enabled = off)`} {
		if _, err := h.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	// Not analyzed yet: the planner goes by the tables' size on disk.
	seed(1, 200, "'orders'")

	const n = 30
	arr := func(f func(i int) string) string {
		vs := make([]string, n)
		for i := range vs {
			vs[i] = f(i)
		}
		return "'{" + strings.Join(vs, ",") + "}'"
	}
	args := strings.Join([]string{
		arr(func(int) string { return "orders" }), arr(func(i int) string { return fmt.Sprintf("new%d", i) }),
		arr(func(int) string { return "sync" }), arr(func(int) string { return "0000000002" }),
		arr(func(int) string { return "true" }), arr(func(int) string { return at.Format(time.RFC3339) }),
		arr(func(i int) string { return fmt.Sprint(i) }),
	}, ", ")
	got := genericPlan(t, h.pool, pipePlanSQL, supersedeOlderManySQL, "EXECUTE plan_me("+args+")")
	t.Logf("supersede, generic plan on 200 effects:\n%s", got)
	if !strings.Contains(got, "effects_open") || strings.Contains(got, "effects_flow") {
		t.Errorf("the lookup of open effects does not read effects_open alone:\n%s", got)
	}

	// A ledger of 200 flows, analyzed: a page of one flow reads
	// effects_flow.
	seed(201, 10000, "'f' || g % 200")
	if _, err := h.pool.Exec(ctx, `ANALYZE events, effects`); err != nil {
		t.Fatal(err)
	}
	q, qargs := effectListSQL(&store.EffectListParams{Flow: "f7", AfterID: 100, Limit: 50})
	custom, _, _ := explain(t, h.pool, "(COSTS OFF)", q, qargs...)
	literals := make([]string, len(qargs))
	for i, a := range qargs {
		literals[i] = fmt.Sprintf("'%v'", a)
	}
	generic := genericPlan(t, h.pool, "", q, "EXECUTE plan_me("+strings.Join(literals, ", ")+")")
	t.Logf("a flow's effects, custom plan:\n%s", custom)
	t.Logf("a flow's effects, generic plan:\n%s", generic)
	// A custom plan knows the flow and may read it by another index; the
	// generic plan, which PostgreSQL keeps, can use effects_flow only if
	// the query repeats the index's predicate.
	if strings.Contains(custom, "Seq Scan on effects") {
		t.Errorf("a flow's page of effects scans the ledger (custom plan):\n%s", custom)
	}
	if !strings.Contains(generic, "effects_flow") {
		t.Errorf("a flow's page of effects does not read effects_flow (generic plan):\n%s", generic)
	}
}
