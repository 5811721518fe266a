package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestAnalyzeSkipsPayloads: ANALYZE gathers statistics on the columns
// statements filter, join and sort on, and none on the payload columns
// (0018_analyze_skips_payloads), whose statistics no plan uses and which
// were most of an ANALYZE's time.
func TestAnalyzeSkipsPayloads(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	seedAppliedEvents(t, h.pool, at, 1, 300)
	for _, q := range []string{
		`INSERT INTO deliveries (event_pk, request_id, batch_index, source, event_id, type, entity, account, received_at, headers, body)
		SELECT g, 'r' || g, 0, 'shop', 'e' || g, 'order.updated', 'o' || g, '', $1,
			jsonb_build_object('Stripe-Signature', 't=' || g), convert_to('{"id":"e' || g || '"}', 'UTF8')
		FROM generate_series(1, 300) g`,
		`INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state, request,
			source_event_pk, causation_id, hop, created_at, updated_at, last_response)
		SELECT 'k' || g, 'orders', 'o' || g, 'r1', '0000000001', 'sync', 'sink', 'done', jsonb_build_object('n', g),
			g, '', 0, $1, $1, '{"ok":' || g || '}'
		FROM generate_series(1, 300) g`,
		`INSERT INTO effect_attempts (effect_id, number, started_at, duration_us, status, class, error, response,
			retry_after, retry_after_unit, wait_us, reconcile)
		SELECT id, 1, $1, 1000, 200, 'ok', '', '{"id":' || id || '}', '', '', 0, false FROM effects`,
		`INSERT INTO entities (flow, entity, updated_at, state) SELECT 'orders', 'o' || g, $1, jsonb_build_object('n', g)
		FROM generate_series(1, 300) g`,
		`INSERT INTO audit (at, actor, action, source, event_id, entity, detail)
		SELECT $1, 'flow', 'effect_done', 'shop', 'e' || g, 'o' || g, 'k' || g || ': submitting -> done'
		FROM generate_series(1, 300) g`,
	} {
		if _, err := h.pool.Exec(ctx, q, at); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	if _, err := h.pool.Exec(ctx, `ANALYZE events, deliveries, effects, effect_attempts, entities, audit`); err != nil {
		t.Fatal(err)
	}
	has := func(table, column string) bool {
		t.Helper()
		var n int
		if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stats
			WHERE schemaname = current_schema() AND tablename = $1 AND attname = $2`, table, column).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}
	skipped := [][2]string{{"deliveries", "body"}, {"deliveries", "headers"}, {"effects", "request"},
		{"effects", "last_response"}, {"effect_attempts", "response"}, {"entities", "state"}, {"audit", "detail"}}
	for _, c := range skipped {
		if has(c[0], c[1]) {
			t.Errorf("ANALYZE gathered statistics on the payload column %s.%s", c[0], c[1])
		}
	}
	// The columns plans rest on keep theirs.
	for _, c := range [][2]string{{"deliveries", "event_pk"}, {"effects", "destination"}, {"effects", "state"},
		{"effect_attempts", "effect_id"}, {"entities", "entity"}, {"audit", "action"}} {
		if !has(c[0], c[1]) {
			t.Errorf("ANALYZE gathered no statistics on %s.%s", c[0], c[1])
		}
	}
}
