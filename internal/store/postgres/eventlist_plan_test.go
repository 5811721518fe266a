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

// TestEventListTimePlans: on an analyzed store whose events are received
// (and occur) in pk order, a page of events in a time window in the middle
// reads the window through its index rather than walking the pk index
// from the start and filtering by time (the planner's even-spread estimate
// made it do that, reading half the table for one page). The rows the
// plan reads are asserted from EXPLAIN ANALYZE: about the window's, not
// the table's.
func TestEventListTimePlans(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	n := 30000
	if v, err := strconv.Atoi(os.Getenv("HOOKLEDGER_SIGNAL_SCALE")); err == nil && v > 0 {
		n = v
	}
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	seedScale(t, h.Store, at, n)
	ctx := context.Background()
	// Every event occurred a second before it was received.
	if _, err := h.pool.Exec(ctx, `UPDATE events SET occurred_at = received_at - interval '1 s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := h.pool.Exec(ctx, `ANALYZE events`); err != nil {
		t.Fatal(err)
	}
	// seedScale receives event g at at + g ms: a window of n/30 events
	// in the middle of the table.
	ms := func(g int) time.Time { return at.Add(time.Duration(g) * time.Millisecond) }
	window := n / 30
	from, to := ms(n/2), ms(n/2+window)
	for _, c := range []struct {
		name  string
		p     *store.EventListParams
		index string
		// first is the page's first pk: event g is received at at + g ms
		// and occurred a second before.
		first int64
	}{
		{"received window", &store.EventListParams{ReceivedFrom: from, ReceivedTo: to}, "events_received", int64(n / 2)},
		{"occurred window", &store.EventListParams{OccurredFrom: from, OccurredTo: to}, "events_occurred", int64(n/2 + 1000)},
		{"received window from a cursor", &store.EventListParams{ReceivedFrom: from, ReceivedTo: to, AfterPK: int64(n/2 + 100)}, "events_received", int64(n/2 + 101)},
	} {
		q, args, windowed := eventListQuery(c.p, 51, true, h.windowCap)
		if !windowed {
			t.Fatalf("%s: not the windowed query", c.name)
		}
		got, removed, _ := explain(t, h.pool, "(ANALYZE, COSTS OFF, TIMING OFF)", q, args...)
		t.Logf("%s:\n%s", c.name, got)
		if !strings.Contains(got, c.index) {
			t.Errorf("%s does not read %s:\n%s", c.name, c.index, got)
		}
		// The pk index may only look the page's rows up (events e).
		if strings.Contains(got, "using events_pkey on events (") || strings.Contains(got, "Seq Scan") {
			t.Errorf("%s walks the pk index or the table:\n%s", c.name, got)
		}
		if removed > window {
			t.Errorf("%s read %d rows outside the window of %d:\n%s", c.name, removed, window, got)
		}
		// The page is the same read first by the window or, once the
		// window holds more rows than the cap, by the pk walk.
		for _, capRows := range []int{defaultWindowCap, window / 2} {
			h.windowCap = capRows
			res, err := h.EventList(ctx, &store.EventListParams{ReceivedFrom: c.p.ReceivedFrom, ReceivedTo: c.p.ReceivedTo,
				OccurredFrom: c.p.OccurredFrom, OccurredTo: c.p.OccurredTo, AfterPK: c.p.AfterPK, Limit: 50})
			if err != nil || len(res.Events) != 50 || res.NextAfterPK != res.Events[49].PK {
				t.Fatalf("%s (cap %d): %v", c.name, capRows, err)
			}
			for i, e := range res.Events {
				if e.PK != c.first+int64(i) {
					t.Fatalf("%s (cap %d): event %d at %d, want pk order from the window's start", c.name, capRows, e.PK, i)
				}
				in := e.ReceivedAt
				if !c.p.OccurredFrom.IsZero() {
					in = e.OccurredAt
				}
				if in.Before(from) || !in.Before(to) {
					t.Fatalf("%s (cap %d): event %d at %v outside the window", c.name, capRows, e.PK, in)
				}
			}
		}
		h.windowCap = defaultWindowCap
	}
}
