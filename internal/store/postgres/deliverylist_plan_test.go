package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestDeliveryListPlan: on an analyzed store, one event's deliveries are
// read through the event's unique (source, event_id) and
// deliveries_event, touching that event's rows only: the console's event
// page and replay ask for them by the pair, and no index of deliveries
// holds the pair (0024 dropped it for the receiver's sake).
func TestDeliveryListPlan(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	const n = 20000
	if _, err := h.pool.Exec(ctx, `INSERT INTO events (source, event_id, type, entity, account, received_at, deliveries, disposition, routed)
		SELECT 'src' || (g % 5), 'e' || g, 't', 'ent' || g, 'a', now(), 2, 'applied', true FROM generate_series(1, $1::int) g`, n); err != nil {
		t.Fatalf("seed events: %v", err)
	}
	// Two deliveries of every event, the second a resend.
	if _, err := h.pool.Exec(ctx, `INSERT INTO deliveries (event_pk, request_id, batch_index, source, event_id, type, entity, account, received_at, headers, body)
		SELECT e.pk, 'r' || e.pk || '-' || d, 0, e.source, e.event_id, e.type, e.entity, e.account, e.received_at, '{}', '\x7b7d'
		FROM events e CROSS JOIN generate_series(1, 2) d ORDER BY d, e.pk`); err != nil {
		t.Fatalf("seed deliveries: %v", err)
	}
	if _, err := h.pool.Exec(ctx, `ANALYZE events, deliveries`); err != nil {
		t.Fatal(err)
	}
	var got int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM deliveries`).Scan(&got); err != nil || got != 2*n {
		t.Fatalf("seeded %d deliveries (%v), want %d", got, err, 2*n)
	}
	// Event 12345 of src0 (12345 % 5 is 0).
	ev, src := "e12345", "src0"
	for _, p := range []*store.DeliveryListParams{
		{Source: src, EventID: ev, Limit: 1},
		{Source: src, EventID: ev, Limit: 100, BodyPrefix: 64},
	} {
		q, args := deliveryListQuery(p)
		plan, removed, returned := explain(t, h.pool, "(ANALYZE, COSTS OFF, TIMING OFF)", q, args...)
		t.Logf("%+v:\n%s", p, plan)
		if !strings.Contains(plan, "deliveries_event") || !strings.Contains(plan, "events_source_event_id_key") {
			t.Errorf("%+v: plan does not read deliveries_event through the event's key:\n%s", p, plan)
		}
		if strings.Contains(plan, "Seq Scan") || removed > 0 {
			t.Errorf("%+v: plan scans or filters (%d rows removed):\n%s", p, removed, plan)
		}
		if want := min(p.Limit, 2); returned != want {
			t.Errorf("%+v: %d rows, want %d:\n%s", p, returned, want, plan)
		}
		ds, err := h.DeliveryList(ctx, p)
		if err != nil || len(ds) != min(p.Limit, 2) || ds[0].Source != src || ds[0].EventID != ev {
			t.Fatalf("%+v: %d deliveries, %v", p, len(ds), err)
		}
	}
}
