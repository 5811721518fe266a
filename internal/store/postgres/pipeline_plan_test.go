package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestPipelinePlans: the pipeline's per-event statements read only the
// rows they need on a store the planner knows nothing about (never
// analyzed, as after an install or a burst into empty tables, which is
// where a PostgreSQL node spends its first minutes), and again once the
// tables are analyzed. Seeded like
// a hot entity's history: 20,000 events with one delivery and one work
// item each, all routed and settled but the last 20, whose work is pending; 20,000 effects of one
// entity, all superseded but the newest. Before 0012 the supersede step
// walked every effect of the flow and the first-delivery lookup walked
// the deliveries' primary key from the start, both growing with the table;
// a page's batch read joined a scan of the whole work table.
func TestPipelinePlans(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	const n = 20000
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	for _, q := range []string{
		// No statistics may appear while the test runs.
		`ALTER TABLE events SET (autovacuum_enabled = off)`,
		`ALTER TABLE deliveries SET (autovacuum_enabled = off)`,
		`ALTER TABLE work SET (autovacuum_enabled = off)`,
		`ALTER TABLE effects SET (autovacuum_enabled = off)`,
		`ALTER TABLE effect_tombstones SET (autovacuum_enabled = off)`,
		`ALTER TABLE route_queue SET (autovacuum_enabled = off)`,
		`ALTER TABLE entities SET (autovacuum_enabled = off)`,
		`INSERT INTO events (source, event_id, type, entity, account, received_at, deliveries, disposition, routed)
		SELECT 'shop', 'e' || g, 'order.updated', 'ord-hot', '', $1::timestamptz, 1,
			CASE WHEN g > $2::int - 20 THEN 'accepted' ELSE 'applied' END, g <= $2::int - 20 OR g > $2::int - 10
		FROM generate_series(1, $2::int) g`,
		// Of the 20 events waiting to be routed, 10 wait as an earlier
		// version left them (routed = false), 10 in the queue.
		`INSERT INTO route_queue (pk) SELECT pk FROM events WHERE disposition = 'accepted' AND routed AND $1::timestamptz IS NOT NULL AND $2::int > 0`,
		// A backlog behind them: 5,000 more queued events, past the
		// fixture's last (their rows are left out: a page reads only the
		// queue's first entries, and a queue this long is read by its
		// index, not scanned whole).
		`INSERT INTO route_queue (pk) SELECT $2::int * 10 + g FROM generate_series(1, 5000) g WHERE $1::timestamptz IS NOT NULL`,
		`INSERT INTO deliveries (event_pk, request_id, batch_index, source, event_id, type, entity, account, received_at, headers, body)
		SELECT pk, 'r' || pk, 0, source, event_id, type, entity, '', received_at, '{}', '\x7b7d' FROM events ORDER BY pk`,
		`INSERT INTO work (flow, entity, event_pk, order_key, created_at, done_at, disposition)
		SELECT 'orders', 'ord-hot', pk, lpad(pk::text, 10, '0'), $1::timestamptz,
			CASE WHEN disposition = 'applied' THEN $1::timestamptz END, CASE WHEN disposition = 'applied' THEN 'applied' ELSE '' END
		FROM events WHERE $2::int > 0 ORDER BY pk`,
		`INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state, request,
			source_event_pk, causation_id, hop, created_at, updated_at)
		SELECT 'k' || pk, 'orders', 'ord-hot', 'r' || pk, lpad(pk::text, 10, '0'), 'sync', 'sink',
			CASE WHEN pk = $2::int - 20 THEN 'approved' ELSE 'superseded' END, '{}', pk, '', 0, $1::timestamptz, $1::timestamptz
		FROM events WHERE disposition = 'applied' ORDER BY pk`,
		// Open effects of other entities of the flow, which a supersede
		// step must not read.
		`INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state, request,
			source_event_pk, causation_id, hop, created_at, updated_at)
		SELECT 'open' || g, 'orders', 'ord-open-' || g, 'r1', '0000000001', 'sync', 'sink', 'approved', '{}', g, '', 0,
			$1::timestamptz, $1::timestamptz
		FROM generate_series(1, $2::int / 10) g`,
		// A call in flight, which a settle by its claim finds by its id.
		`INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state, request,
			source_event_pk, causation_id, hop, created_at, updated_at, lease_token, lease_until, next_attempt_at)
		SELECT 'inflight', 'orders', 'ord-inflight', 'r1', '0000000001', 'sync', 'elsewhere', 'submitting', '{}', 1, '', 0,
			$1::timestamptz, $1::timestamptz, 'w:seen', $1::timestamptz + interval '1 hour', $1::timestamptz + interval '1 hour'
		WHERE $2::int > 0`,
		// The entities: ord-hot with its 20 pending items and ord-none,
		// pending without a work row (what a lease's listing must still
		// answer), both free; and as many drained ones, which a claim
		// must not read.
		`INSERT INTO entities (flow, entity, updated_at, pending)
		SELECT 'orders', 'ord-drained-' || g, $1::timestamptz, 0 FROM generate_series(1, $2::int) g
		UNION ALL VALUES ('orders', 'ord-hot', $1::timestamptz, 20), ('orders', 'ord-none', $1::timestamptz, 1)`,
		// What retention left of older effects (an empty table, once
		// analyzed, is rightly read by a sequential scan; a ledger in use
		// is not empty).
		`INSERT INTO effect_tombstones (episode_key, flow, entity, effect, destination, state, request, created_at, deleted_at)
		SELECT 'old' || g, 'orders', 'ord-' || g, 'sync', 'sink', 'done', '{}', $1::timestamptz, $1::timestamptz
		FROM generate_series(1, $2::int) g`,
	} {
		var args []any
		if strings.Contains(q, "$1") {
			args = []any{at, n}
		}
		if _, err := h.pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	var pendingIDs []int64
	rows, err := h.pool.Query(ctx, `SELECT id FROM work WHERE done_at IS NULL`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		pendingIDs = append(pendingIDs, id)
	}
	rows.Close()
	if len(pendingIDs) != 20 {
		t.Fatalf("seeded %d pending work items, want 20", len(pendingIDs))
	}
	n21 := func(v time.Time) []time.Time {
		a := make([]time.Time, 21)
		for i := range a {
			a[i] = v
		}
		return a
	}
	n20 := func(v any) any { // a 20-element array of v
		switch v := v.(type) {
		case string:
			a := make([]string, 20)
			for i := range a {
				a[i] = v
			}
			return a
		case time.Time:
			a := make([]time.Time, 20)
			for i := range a {
				a[i] = v
			}
			return a
		}
		return nil
	}
	// A group's effect inserts: twenty new keys and one the ledger holds.
	fx := make([][]any, 16)
	for i := range 21 {
		key := fmt.Sprintf("knew%d", i)
		if i == 20 {
			key = "k5"
		}
		for j, v := range []any{key, "orders", fmt.Sprintf("ord-%d", i), "r1", "0000000001", "sync", "sink", "{}",
			int64(i + 1), "", int64(0), at, int64(0), nil, nil, ""} {
			fx[j] = append(fx[j], v)
		}
	}
	texts := func(vs []any) []string {
		out := make([]string, len(vs))
		for i, v := range vs {
			out[i] = v.(string)
		}
		return out
	}
	ints := func(vs []any) []int64 {
		out := make([]int64, len(vs))
		for i, v := range vs {
			out[i] = v.(int64)
		}
		return out
	}
	nulls := make([]*time.Time, 21)
	effectArgs := []any{texts(fx[0]), texts(fx[1]), texts(fx[2]), texts(fx[3]), texts(fx[4]), texts(fx[5]), texts(fx[6]), texts(fx[7]),
		ints(fx[8]), texts(fx[9]), ints(fx[10]), n21(at), ints(fx[12]), nulls, nulls, texts(fx[15])}
	// The same inserts, each with a claim for the delivery worker.
	tokens, redrives := make([]string, 21), make([]int64, 21)
	for i := range tokens {
		tokens[i], redrives[i] = fmt.Sprintf("worker:%024d", i), 3
	}
	claimedArgs := append(slices.Clip(effectArgs), tokens, n21(at), n21(at.Add(time.Minute)), redrives)
	// A published message's deliveries to two endpoints, claimed: one
	// where nothing is due (the probe must not read the other
	// destinations' due effects to find that out), one where the
	// ledger's approved effect waits.
	msgKeys, msgEntities, msgDests, msgOf := make([]string, 21), make([]string, 21), make([]string, 21), make([]int32, 21)
	for i := range msgKeys {
		msgKeys[i], msgEntities[i], msgDests[i], msgOf[i] = fmt.Sprintf("msg:%d", i), "ep", "endpoint:quiet", 1
	}
	msgDests[20] = "sink"
	publishArgs := []any{msgKeys, msgEntities, msgDests, msgOf, []string{"publish"}, []string{"msg_1"}, []string{"msg_1"},
		[]string{"deliver"}, []string{"{}"}, []int64{1}, []string{""}, []int32{0}, []time.Time{at},
		[]string{"endpoint:quiet", "sink"}, []int32{30, 30}, tokens, at, at.Add(time.Minute), 3}
	// The settle of that call, by its claim.
	var inflight int64
	if err := h.pool.QueryRow(ctx, `SELECT id FROM effects WHERE episode_key = 'inflight'`).Scan(&inflight); err != nil {
		t.Fatal(err)
	}
	seenArgs := settleSeenArgs([]*store.SettleWrite{{
		EffectSettleParams: &store.EffectSettleParams{EffectID: inflight, Token: "w:seen", Now: at, State: store.EffectDone,
			Claimed: &store.FencedEffect{ID: inflight, EpisodeKey: "inflight", Entity: "ord-inflight"}},
		Attempts: 1, Calls: 1, Call: &store.Attempt{EffectID: inflight, Number: 1, StartedAt: at, Status: 200}}},
		[]*store.AuditInsertParams{{At: at, Actor: "delivery", Action: "effect_done", Entity: "ord-inflight", Detail: "inflight: submitting -> done"}})
	// The ids the read ahead of a settle finds in its transaction's
	// setting (listedWork), as routing's lease leaves them.
	listed := make([]string, len(pendingIDs))
	for i, id := range pendingIDs {
		listed[i] = fmt.Sprint(id)
	}
	listedSetting := `set_config('hookledger.listed_work', '{` + strings.Join(listed, ",") + `}', true)`
	check := func(phase string) {
		for _, c := range []struct {
			name, sql string
			args      []any
			index     string // every index named (space-separated) must be read
			rows      int    // rows the statement returns
			setting   string // a setting of the transaction, set before the statement
		}{
			{"unrouted page", listUnroutedSQL, []any{200}, "events_unrouted route_queue_pkey deliveries_event", 20, ""},
			{"take the unrouted page", takeUnroutedSQL, []any{200}, "events_unrouted route_queue_pkey deliveries_event", 20, ""},
			{"take a page shorter than the waiting events", takeUnroutedSQL, []any{15}, "events_unrouted route_queue_pkey", 15, ""},
			{"pending work", listPendingSQL, []any{"orders", "ord-hot", 50}, "deliveries_event", 20, ""},
			{"pending work of a group", listPendingGroupSQL, []any{[]string{"orders", "orders"}, []string{"ord-none", "ord-hot"}, []int32{50, 50}}, "work_pending", 20, ""},
			{"pending work of leased entities", listLeasedSQL, []any{[]string{"orders", "orders"}, []string{"ord-none", "ord-hot"}, []int32{50, 50}}, "work_pending", 20, ""},
			// Leased until now, so that every run finds both entities free.
			{"lease entities with their work", leaseListedSQL, []any{at, 10, "router", at, int32(50)}, "entities_ready work_pending deliveries_event", 21, ""},
			{"lease entities with their work, read ahead", leaseAheadSQL, []any{at, 10, "router", at, int32(50)}, "entities_ready work_pending deliveries_event", 21, ""},
			{"lock the events listed ahead", lockListedEventsSQL, nil, "events_pkey", 20, listedSetting},
			{"read the work listed ahead", readListedWorkSQL, nil, "work_event", 20, listedSetting},
			{"settle a call by its claim", settleSeenSQL, seenArgs, "effects_pkey", 1, ""},
			{"release a call", releaseEffectSQL, []any{nil, at, inflight, "w:seen", "team"}, "effects_pkey", 0, ""},
			{"fence a call", fenceOneSQL, []any{inflight, "w:seen", at}, "effects_pkey", 1, ""},
			{"fence a group of calls", fenceGroupSQL, []any{[]int64{inflight, inflight + 1}, []string{"w:seen", "w:none"}, []time.Time{at, at}},
				"effects_pkey", 1, ""},
			{"supersede older", supersedeOlderSQL(true), []any{at, "orders", "ord-hot", "sync", "9999999999"}, "effects_open", 1, ""},
			{"lock a page's events", lockBatchEventsSQL, []any{pendingIDs}, "events_pkey", 20, ""},
			{"read a page's work", readBatchWorkSQL, []any{pendingIDs}, "work_event", 20, ""},
			{"settle a page's work", settleWorkSQL, []any{pendingIDs, n20(at), n20("applied"), n20(""), n20("k")}, "work_pkey", 0, ""},
			{"set a page's dispositions", setDispositionsSQL, []any{pendingIDs, n20("applied")}, "events_pkey", 0, ""},
			{"insert a group's effects", insertEffectsSQL, effectArgs, "effects_episode_key_key", 21, ""},
			{"insert a message's deliveries claimed", insertClaimedMessageEffectsSQL, publishArgs, "effects_due_destination", 21, ""},
			{"insert a group's effects claimed", insertClaimedEffectsSQL, claimedArgs, "effects_episode_key_key effects_due_destination", 21, ""},
			{"supersede a group's older effects", supersedeOlderManySQL, []any{[]string{"orders", "orders"}, []string{"ord-hot", "ord-none"},
				[]string{"sync", "sync"}, []string{"9999999999", "9999999999"}, []bool{true, false}, n21(at)[:2], []int32{0, 1}},
				"effects_open", 1, ""},
			{"supersede when a group has nothing older", supersedeOlderManySQL, []any{[]string{"orders"}, []string{"ord-none"},
				[]string{"sync"}, []string{"9999999999"}, []bool{true}, n21(at)[:1], []int32{0}},
				"effects_open", 0, ""},
		} {
			for _, generic := range []bool{false, true} {
				phase, explain := phase, explain
				if c.setting != "" {
					explain = func(t *testing.T, pool *pgxpool.Pool, opts, sql string, args ...any) (string, int, int) {
						return explainWith(t, pool, `SELECT `+c.setting, opts, sql, args...)
					}
				}
				if generic {
					// What a pipe runs: the generic plan under its settings.
					phase += ", generic plan"
					setup := pipePlanSQL
					if c.setting != "" {
						setup += ", " + c.setting
					}
					explain = func(t *testing.T, pool *pgxpool.Pool, opts, sql string, args ...any) (string, int, int) {
						return explainGeneric(t, pool, setup, opts, sql, args...)
					}
				}
				got, removed, returned := explain(t, h.pool, "(ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF)", c.sql, c.args...)
				t.Logf("%s %s:\n%s", c.name, phase, got)
				for _, index := range strings.Fields(c.index) {
					if !strings.Contains(got, index) {
						t.Errorf("%s %s does not read %s:\n%s", c.name, phase, index, got)
					}
				}
				for _, bad := range []string{"Seq Scan", "deliveries_pkey", "effects_flow"} {
					if strings.Contains(got, bad) {
						t.Errorf("%s %s uses %s, a read that grows with the table:\n%s", c.name, phase, bad, got)
					}
				}
				if removed > 100 {
					t.Errorf("%s %s read and dropped %d rows (the table holds %d):\n%s", c.name, phase, removed, n, got)
				}
				if strings.HasSuffix(c.name, "nothing older") && !strings.Contains(got, "One-Time Filter") {
					t.Errorf("%s %s looks for ids to update although none were found:\n%s", c.name, phase, got)
				}
				if c.rows > 0 && !strings.HasPrefix(c.name, "supersede") && returned != c.rows {
					t.Errorf("%s %s returned %d rows, want %d:\n%s", c.name, phase, returned, c.rows, got)
				}
			}
		}
	}
	check("without statistics")
	if _, err := h.pool.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	check("with statistics")
}

// TestEntityPlansWithStatistics: the statements that find a group's
// entities by primary key read the primary key once the table has
// statistics. Every entity of a flow shares its flow, and before the keys
// were named by distinct values the planner costed 30 entities of one flow
// as 900 index probes and scanned the whole table instead (a few ms at
// 10,000 entities, growing with the table, on every group).
func TestEntityPlansWithStatistics(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	if _, err := h.pool.Exec(ctx, `INSERT INTO entities (flow, entity, updated_at, pending, lease_token, lease_until)
		SELECT 'orders', 'ord-' || lpad(g::text, 6, '0'), $1, 1, 't' || g, $1::timestamptz + interval '1 hour'
		FROM generate_series(1, 20000) g`, at); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(ctx, `ANALYZE entities`); err != nil {
		t.Fatal(err)
	}
	const n = 30
	flows, entities, tokens := make([]string, n), make([]string, n), make([]string, n)
	nows, nums := make([]time.Time, n), make([]int32, n)
	proj, versions, states, eventPKs, settled := make([]bool, n), make([]string, n), make([]string, n), make([]int64, n), make([]int64, n)
	for i := range n {
		g := 100 + i
		flows[i], entities[i], tokens[i], nows[i], nums[i] = "orders", fmt.Sprintf("ord-%06d", g), fmt.Sprintf("t%d", g), at, int32(i)
		versions[i], states[i], eventPKs[i], settled[i] = "r1", "{}", int64(g), 1
	}
	for _, c := range []struct {
		name, sql string
		args      []any
	}{
		{"fence", fenceEntitiesSQL, []any{flows, entities, tokens, nows, nums, distinct(flows), distinct(entities)}},
		{"update counters and projections", updateEntitiesSQL, []any{flows, entities, proj, versions, versions, states, eventPKs, nows, settled, versions, distinct(flows), tokens}},
	} {
		got, _, _ := explain(t, h.pool, "(COSTS OFF)", c.sql, c.args...)
		t.Logf("%s:\n%s", c.name, got)
		if !strings.Contains(got, "entities_pkey") || strings.Contains(got, "Seq Scan on entities") {
			t.Errorf("%s does not find the entities by primary key:\n%s", c.name, got)
		}
		// What a pipe runs: the generic plan under its settings, made
		// without knowing how many entities the arrays name.
		got, _, _ = explainGeneric(t, h.pool, pipePlanSQL, "(ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF)", c.sql, c.args...)
		t.Logf("%s, generic plan:\n%s", c.name, got)
		if !strings.Contains(got, "entities_pkey") || strings.Contains(got, "Seq Scan on entities") {
			t.Errorf("%s, generic plan, does not find the entities by primary key:\n%s", c.name, got)
		}
	}
}
