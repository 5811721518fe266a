package postgres

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// seedScale fills a store with n events, n work items, n effects, n audit
// rows and n/10 entities, almost all settled, with a sprinkling of what
// each signal counts, and analyzes it, so that the planner sees a store
// shaped like a real one.
func seedScale(t *testing.T, s *Store, at time.Time, n int) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO events (source, event_id, type, entity, account, received_at, deliveries, disposition, routed)
		SELECT 'src' || (g % 5), 'e' || g, 't', 'ent' || (g % ($2::int / 10)), 'a', $1::timestamptz + g * interval '1 ms', 1,
			CASE WHEN g % 2000 = 0 THEN 'accepted' WHEN g % 3331 = 0 THEN 'dead_lettered' ELSE 'applied' END, true
		FROM generate_series(1, $2::int) g`,
		`INSERT INTO entities (flow, entity, updated_at, newest_key, settled_key, behind_since)
		SELECT 'f' || (g % 3), 'ent' || g, $1::timestamptz, lpad(g::text, 10, '0'),
			CASE WHEN g % 1000 = 0 THEN '' ELSE lpad(g::text, 10, '0') END, $1::timestamptz
		FROM generate_series(1, $2::int / 10) g`,
		`INSERT INTO work (flow, entity, event_pk, order_key, created_at, done_at, disposition)
		SELECT 'f' || (g % ($2::int / 10) % 3), 'ent' || (g % ($2::int / 10)), g, lpad(g::text, 10, '0'), $1::timestamptz,
			CASE WHEN g % 2000 = 0 THEN NULL ELSE $1::timestamptz END,
			CASE WHEN g % 2000 = 0 THEN '' WHEN g % 3331 = 0 THEN 'dead_lettered' ELSE 'applied' END
		FROM generate_series(1, $2::int) g`,
		`INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state, request,
			source_event_pk, causation_id, hop, created_at, updated_at, compensates, deadline_at, deadline_warn_at, mismatch_at)
		SELECT 'k' || g, 'f' || (g % 3), 'ent' || (g % ($2::int / 10)), 'r1', '1', 'push', 'd' || (g % 7),
			CASE WHEN g % 5000 = 0 THEN 'needs_reconciliation' WHEN g % 5003 = 0 THEN 'submitting'
				WHEN g % 3001 = 0 THEN 'dead' WHEN g % 2003 = 0 THEN 'approved' ELSE 'done' END,
			'{}', g, '', 0, $1::timestamptz, $1::timestamptz, CASE WHEN g % 2003 = 0 AND g % 3 = 0 THEN 1 ELSE 0 END,
			CASE WHEN g % 2003 = 0 THEN $1::timestamptz + (g % 7200) * interval '1 s' END,
			CASE WHEN g % 2003 = 0 THEN $1::timestamptz END,
			CASE WHEN g % 20011 = 0 THEN $1::timestamptz END
		FROM generate_series(1, $2::int) g`,
		`INSERT INTO audit (at, actor, action, source, event_id, entity, detail)
		SELECT $1::timestamptz - interval '2 hours' + g * (interval '2 hours' / $2::int), 'w',
			CASE WHEN g % 10007 = 0 THEN 'key_conflict' WHEN g % 10009 = 0 THEN 'loop_blocked' ELSE 'work_settled' END,
			'', '', '', 'episode_key x'
		FROM generate_series(1, $2::int) g`,
	} {
		if _, err := s.pool.Exec(ctx, q, at, n); err != nil {
			t.Fatalf("seed: %v\n%s", err, q)
		}
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatalf("analyze: %v", err)
	}
}

// The outcome signals must stay cheap on a large store: on an analyzed
// store of n rows per table (HOOKLEDGER_SIGNAL_SCALE, default 30000) no
// signal query reads a table in full. The snapshot's time is logged, not
// asserted (a figure, not a test).
func TestSignalPlans(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	n := 30000
	if v, err := strconv.Atoi(os.Getenv("HOOKLEDGER_SIGNAL_SCALE")); err == nil && v > 0 {
		n = v
	}
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	seedStart := time.Now()
	seedScale(t, h.Store, at, n)
	t.Logf("seeded %d rows per table in %v", n, time.Since(seedStart).Round(time.Millisecond))
	ctx := context.Background()
	for _, c := range []struct {
		name, sql string
		args      []any
	}{
		{"lag by flow", signalSQL[store.SignalQueryLagByFlow], nil},
		{"lag largest gap", signalSQL[store.SignalQueryLagLargest], nil},
		{"unfinished", signalSQL[store.SignalQueryUnfinished], nil},
		{"deadline", signalSQL[store.SignalQueryDeadline], []any{at}},
		{"unknown", signalSQL[store.SignalQueryUnknown], []any{at}},
		{"window start", signalSQL[store.SignalQueryWindowStart], []any{at.Add(-time.Hour)}},
		{"windowed", signalSQL[store.SignalQueryWindowAudit], []any{int64(n / 2), at.Add(-time.Hour)}},
		{"dead effects", signalSQL[store.SignalQueryDeadEffects], nil},
		{"dead events", signalSQL[store.SignalQueryDeadEvents], nil},
		{"mismatch", signalSQL[store.SignalQueryMismatch], nil},
		{"compensation", signalSQL[store.SignalQueryCompensation], nil},
	} {
		got, _, _ := explain(t, h.pool, "", c.sql, c.args...)
		t.Logf("%s:\n%s", c.name, got)
		if strings.Contains(got, "Seq Scan") {
			t.Errorf("%s reads a table in full:\n%s", c.name, got)
		}
	}
	start := time.Now()
	snap, err := h.SignalSnapshot(ctx, &store.SignalSnapshotParams{Now: at, Window: time.Hour})
	if err != nil {
		t.Fatalf("SignalSnapshot: %v", err)
	}
	t.Logf("SignalSnapshot on %d events and %d effects: %v", n, n, time.Since(start).Round(time.Microsecond))
	for _, m := range snap.Measures {
		t.Logf("  %s = %d (oldest %v)", m.Name, m.Value, m.Oldest)
		if m.Value == 0 {
			t.Errorf("%s measured nothing on a store seeded with some", m.Name)
		}
	}
}
