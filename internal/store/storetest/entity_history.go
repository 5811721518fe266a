package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// testEntityHistory: an entity's work comes back in business order (order
// key, then work id), not in receipt order, with every disposition side by
// side, its reason and the version applied, a replay's pending pass after
// the first, and nothing of another flow or entity.
func testEntityHistory(t *testing.T, o Opener) {
	f := newPipe(t, o)
	received := func(sec int) func(*store.DeliveryInput) {
		return func(d *store.DeliveryInput) { d.ReceivedAt = t0.Add(time.Duration(sec) * time.Second) }
	}
	noOccurrence := func(d *store.DeliveryInput) { d.OccurredAt = time.Time{} }
	// Received C, A, E, B, D; business order A B C D E.
	c := f.event("evt_c", received(1))
	a := f.event("evt_a", received(2), func(d *store.DeliveryInput) { d.Type = "deal.created" })
	e := f.event("evt_e", received(3))
	b := f.event("evt_b", received(4), noOccurrence)
	d := f.event("evt_d", received(5))
	x := f.event("evt_x", received(6))
	f.route(t0,
		to(c, rt("deals", "d1", "k3")),
		to(a, rt("deals", "d1", "k1"), rt("audit", "d1", "k1")),
		to(e, rt("deals", "d1", "k5")),
		to(b, rt("deals", "d1", "k2")),
		to(d, rt("deals", "d1", "k4")),
		to(x, rt("deals", "d2", "k0")),
	)
	steps := []store.FlowApplyParams{
		rev(1, `{"s":1}`),      // a: applied
		rev(1, `{"s":1}`),      // b: duplicate
		rev(3, `{"s":3}`),      // c: applied
		{Fail: "refetch: 404"}, // d: dead-lettered
		rev(2, `{"s":2}`),      // e: stale
	}
	for i, ap := range steps {
		f.step("deals", "d1", t0.Add(time.Duration(10+i)*time.Second), ap)
	}
	replay, err := f.s.ReplayCreate(f.ctx, &store.ReplayCreateParams{Now: t0.Add(time.Minute), Actor: "operator:ann",
		Selection: "evt_a", Decisions: []*store.RouteDecision{to(a, rt("deals", "d1", "k1"))}})
	if err != nil {
		t.Fatalf("ReplayCreate: %v", err)
	}

	got, err := f.s.EntityHistory(f.ctx, &store.EntityHistoryParams{Flow: "deals", Entity: "d1", Limit: 100})
	if err != nil {
		t.Fatalf("EntityHistory: %v", err)
	}
	type row struct {
		event  string
		key    string
		replay int64
		disp   store.Disposition
		reason string
		sort   string
		done   bool
	}
	want := []row{
		{"evt_a", "k1", 0, store.DispositionApplied, "", "0000000001", true},
		{"evt_a", "k1", replay, "", "", "", false},
		{"evt_b", "k2", 0, store.DispositionDuplicate, "version r1 already applied", "", true},
		{"evt_c", "k3", 0, store.DispositionApplied, "", "0000000003", true},
		{"evt_d", "k4", 0, store.DispositionDeadLettered, "refetch: 404", "", true},
		{"evt_e", "k5", 0, store.DispositionStale, "version r2 is older than applied r3", "", true},
	}
	var lines []string
	for _, it := range got {
		lines = append(lines, fmt.Sprintf("%s %s replay=%d %q %q %q done=%v", it.EventID, it.OrderKey, it.ReplayID,
			it.Disposition, it.Reason, it.VersionSort, !it.DoneAt.IsZero()))
	}
	var wantLines []string
	for _, w := range want {
		wantLines = append(wantLines, fmt.Sprintf("%s %s replay=%d %q %q %q done=%v", w.event, w.key, w.replay,
			w.disp, w.reason, w.sort, w.done))
	}
	if strings.Join(lines, "\n") != strings.Join(wantLines, "\n") {
		t.Fatalf("history:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(wantLines, "\n"))
	}
	first, pending, dead := got[0], got[1], got[4]
	if first.WorkID >= pending.WorkID {
		t.Errorf("the replay's pass (work %d) sorts before the first pass (work %d)", pending.WorkID, first.WorkID)
	}
	if first.EventPK != a || first.Source != "crm" || first.Type != "deal.created" ||
		!first.OccurredAt.Equal(t0.Add(-time.Minute)) || !first.ReceivedAt.Equal(t0.Add(2*time.Second)) ||
		!first.DoneAt.Equal(t0.Add(10*time.Second)) {
		t.Errorf("first item = %+v", first)
	}
	if !got[2].OccurredAt.IsZero() || got[2].EventPK != b {
		t.Errorf("event without an occurrence time: %+v", got[2])
	}
	if dead.EventPK != d || !dead.DoneAt.Equal(t0.Add(13*time.Second)) {
		t.Errorf("dead-lettered item = %+v", dead)
	}

	// The read is bounded, from the start of the business order.
	page, err := f.s.EntityHistory(f.ctx, &store.EntityHistoryParams{Flow: "deals", Entity: "d1", Limit: 2})
	if err != nil || len(page) != 2 || page[0].WorkID != first.WorkID || page[1].WorkID != pending.WorkID {
		t.Fatalf("limited history: %+v %v", page, err)
	}
	// Another flow's or entity's work is not this entity's history.
	for _, p := range []*store.EntityHistoryParams{{Flow: "audit", Entity: "d1"}, {Flow: "deals", Entity: "d2"}} {
		h, err := f.s.EntityHistory(f.ctx, p)
		if err != nil || len(h) != 1 || h[0].Disposition != "" || h[0].OrderKey != map[string]string{"audit": "k1", "deals": "k0"}[p.Flow] {
			t.Fatalf("history of %s/%s: %+v %v", p.Flow, p.Entity, h, err)
		}
	}
	if h, err := f.s.EntityHistory(f.ctx, &store.EntityHistoryParams{Flow: "deals", Entity: "nobody"}); err != nil || len(h) != 0 {
		t.Fatalf("history of an unknown entity: %+v %v", h, err)
	}
}
