package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestAnalyzeGrown: a pipelined statement prepared and run while its
// tables are nearly empty gets a generic plan that PostgreSQL keeps until
// the tables are analyzed again: at 20,000 rows it still scans the work
// table for every page it settles. AnalyzeGrown analyzes the tables that
// doubled, which makes PostgreSQL plan the statement again, by index. A
// table whose owner switched autovacuum off is left alone.
func TestAnalyzeGrown(t *testing.T) {
	pgtest.ServerURL(t)
	ctx := context.Background()
	// The case needs a generic plan made on tiny tables to survive until
	// it runs on grown ones. Any invalidation of the session's caches in
	// between (on a shared server, another test creating or dropping a
	// database invalidates shared catalogs) makes PostgreSQL plan the
	// statement again, for the grown tables: then the case did not happen,
	// and it is set up again in a fresh database.
	var h *handle
	var conn *pgxpool.Conn
	var plan func() string
	for attempt := 1; ; attempt++ {
		var before string
		h, conn, plan, before = tinyPlanScene(t)
		if strings.Contains(before, "Seq Scan on work") {
			t.Logf("plan made on 5 rows, run on 20,000 (attempt %d):\n%s", attempt, before)
			break
		}
		conn.Release()
		if attempt == 5 {
			t.Fatalf("in 5 fresh databases the plan made on 5 rows was planned again before it ran on 20,000: the case this test is about no longer happens:\n%s", before)
		}
		t.Logf("attempt %d: the plan was made again before it ran (a cache invalidation); setting up again:\n%s", attempt, before)
	}
	defer conn.Release()
	// Another process analyzing work at the moment: this one leaves it
	// to that process, without waiting for it.
	other, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_xact_lock($1, 'work'::regclass::oid::int)`, analyzeLockKey); err != nil {
		t.Fatal(err)
	}
	grown, err := h.AnalyzeGrown(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(grown, "events") || slices.Contains(grown, "work") || slices.Contains(grown, "audit") {
		t.Fatalf("AnalyzeGrown analyzed %v while another process held work: want events only (not audit: autovacuum off)", grown)
	}
	if err := other.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if grown, err = h.AnalyzeGrown(ctx); err != nil || !slices.Equal(grown, []string{"work"}) {
		t.Fatalf("AnalyzeGrown analyzed %v (%v), want work once the other process let it go", grown, err)
	}
	after := plan()
	t.Logf("after AnalyzeGrown:\n%s", after)
	if strings.Contains(after, "Seq Scan") || !strings.Contains(after, "work_pkey") || !strings.Contains(after, "events_pkey") {
		t.Fatalf("the page's work read still scans:\n%s", after)
	}
	if again, err := h.AnalyzeGrown(ctx); err != nil || len(again) != 0 {
		t.Fatalf("a second AnalyzeGrown analyzed %v (%v): nothing grew since", again, err)
	}
}

// tinyPlanScene makes a fresh database whose events, work and audit tables
// hold 5 rows when page_work is prepared and run six times (PostgreSQL
// plans the first five for their arguments, then settles on the generic
// plan if it costs no more), then 20,000 rows, unanalyzed; it returns the
// session and the plan page_work runs with now.
func tinyPlanScene(t *testing.T) (*handle, *pgxpool.Conn, func() string, string) {
	t.Helper()
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}
	// Autovacuum must not analyze first, yet count as on. Nor may it
	// vacuum: a VACUUM after the inserts updates the table's size in
	// pg_class, which also makes PostgreSQL plan the statement again.
	for _, tbl := range []string{"events", "work", "entities", "deliveries", "effects", "effect_attempts"} {
		exec(`ALTER TABLE ` + tbl + ` SET (autovacuum_analyze_threshold = 2000000000,
			autovacuum_vacuum_threshold = 2000000000, autovacuum_vacuum_insert_threshold = 2000000000)`)
	}
	exec(`ALTER TABLE audit SET (autovacuum_enabled = off)`)
	seed := func(from, to int) {
		exec(`INSERT INTO events (source, event_id, type, entity, account, received_at, deliveries, disposition, routed)
			SELECT 'shop', 'e' || g, 'order.updated', 'o' || g, '', $1::timestamptz, 1, 'accepted', true
			FROM generate_series($2::int, $3::int) g`, at, from, to)
		exec(`INSERT INTO work (flow, entity, event_pk, order_key, created_at)
			SELECT 'orders', entity, pk, 'k', $1::timestamptz FROM events WHERE pk BETWEEN $2 AND $3`, at, from, to)
		exec(`INSERT INTO audit (at, actor, action, source, event_id, entity, detail)
			SELECT $1::timestamptz, 'x', 'x', 'shop', 'e' || g, '', '' FROM generate_series($2::int, $3::int) g`, at, from, to)
	}
	seed(1, 5)
	exec(`ANALYZE events, work, audit`) // five rows each: as small as they are
	exec(`PREPARE page_work(bigint[]) AS ` + readBatchWorkSQL)
	for range 6 {
		exec(`EXECUTE page_work('{1,2,3}')`)
	}
	seed(6, 20000)
	plan := func() string {
		t.Helper()
		rows, err := conn.Query(ctx, `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) EXECUTE page_work('{19990,19991,19992}')`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var b strings.Builder
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			b.WriteString(line + "\n")
		}
		return b.String()
	}
	// Wait for the statistics system to count the new rows.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var live int64
		if err := conn.QueryRow(ctx, `SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'work'`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		if live >= 20000 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return h, conn, plan, plan()
}
