package storetest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// statsOf is the driver's Stats part; every driver has one.
func statsOf(t *testing.T, s store.Store) store.Stats {
	t.Helper()
	st, ok := s.(store.Stats)
	if !ok {
		t.Fatalf("the driver does not implement store.Stats")
	}
	return st
}

// The destinations page's reads: the newest calls with their destination,
// within a window and a row bound; the parked effects by destination,
// state and owner; the newest events, of one source or all.
func testStats(t *testing.T, o Opener) {
	f := newLed(t, o)
	st := statsOf(t, f.s)
	h := time.Hour
	es := f.seed("crm", "erp", "crm", "erp")
	call := func(at time.Time, status int, dur time.Duration) func(*store.EffectSettleParams) {
		return func(p *store.EffectSettleParams) {
			p.Attempt = &store.Attempt{Number: 1, StartedAt: at, Duration: dur, Status: status, Class: p.Class, Error: p.Reason}
		}
	}
	f.settle(f.claimOne(es[0].ID, t0), t0, store.EffectDead, time.Time{}, call(t0, 503, 100*time.Millisecond))
	f.settle(f.claimOne(es[1].ID, t0.Add(h)), t0.Add(h), store.EffectRetryWait, t0.Add(3*h), call(t0.Add(h), 429, 20*time.Millisecond))
	f.settle(f.claimOne(es[2].ID, t0.Add(2*h)), t0.Add(2*h), store.EffectDone, time.Time{}, call(t0.Add(2*h), 200, 5*time.Millisecond))
	if _, err := f.operate(es[0].ID, store.OperateAssign, "", t0.Add(2*h)); err != nil { // owner bob
		t.Fatal(err)
	}

	recent := func(p store.AttemptRecentParams) []string {
		t.Helper()
		got, err := st.AttemptRecent(f.ctx, &p)
		if err != nil {
			t.Fatalf("AttemptRecent: %v", err)
		}
		var out []string
		for _, a := range got {
			out = append(out, a.Destination+":"+string(rune('0'+a.Status/100)))
		}
		return out
	}
	for _, c := range []struct {
		name string
		p    store.AttemptRecentParams
		want []string
	}{
		{"all, newest first", store.AttemptRecentParams{}, []string{"crm:2", "erp:4", "crm:5"}},
		{"since (inclusive)", store.AttemptRecentParams{Since: t0.Add(h)}, []string{"crm:2", "erp:4"}},
		{"row bound before the window", store.AttemptRecentParams{Limit: 1}, []string{"crm:2"}},
		{"nothing in the window", store.AttemptRecentParams{Since: t0.Add(5 * h)}, nil},
	} {
		if got := recent(c.p); !slices.Equal(got, c.want) {
			t.Errorf("AttemptRecent %s: %v, want %v", c.name, got, c.want)
		}
	}
	all, err := st.AttemptRecent(f.ctx, &store.AttemptRecentParams{})
	if err != nil || len(all) != 3 {
		t.Fatalf("AttemptRecent: %v %v", all, err)
	}
	if a := all[2]; a.EffectID != es[0].ID || a.Duration != 100*time.Millisecond || !a.StartedAt.Equal(t0) || a.Status != 503 {
		t.Errorf("oldest attempt %+v: want effect %d, 100ms, started t0, status 503", a, es[0].ID)
	}

	parked, err := st.EffectParked(f.ctx)
	if err != nil {
		t.Fatalf("EffectParked: %v", err)
	}
	var got []store.ParkedCount
	for _, p := range parked {
		got = append(got, *p)
	}
	want := []store.ParkedCount{{Destination: "crm", State: store.EffectDead, Owner: "bob", Count: 1},
		{Destination: "erp", State: store.EffectRetryWait, Count: 1}}
	if !slices.Equal(got, want) {
		t.Errorf("EffectParked: %+v, want %+v", got, want)
	}

	events := func(p store.EventRecentParams) []string {
		t.Helper()
		got, err := st.EventRecent(f.ctx, &p)
		if err != nil {
			t.Fatalf("EventRecent: %v", err)
		}
		var out []string
		for _, e := range got {
			out = append(out, e.EventID)
		}
		return out
	}
	if got := events(store.EventRecentParams{Limit: 2}); !slices.Equal(got, []string{"led_004", "led_003"}) {
		t.Errorf("EventRecent limit 2: %v, want the newest two, newest first", got)
	}
	if got := events(store.EventRecentParams{Source: "crm", Limit: 1}); !slices.Equal(got, []string{"led_004"}) {
		t.Errorf("EventRecent of source crm: %v", got)
	}
	if got := events(store.EventRecentParams{Source: "nobody"}); got != nil {
		t.Errorf("EventRecent of an unknown source: %v", got)
	}
	one, err := st.EventRecent(f.ctx, &store.EventRecentParams{Limit: 1})
	if err != nil || len(one) != 1 || one[0].Source != "crm" || one[0].Type != "deal.updated" || one[0].ReceivedAt.IsZero() {
		t.Errorf("EventRecent row: %+v %v", one, err)
	}
	counts, err := st.EventRecentCounts(f.ctx, &store.EventRecentParams{Limit: 3})
	if err != nil || len(counts) != 1 || len(one) != 1 ||
		*counts[0] != (store.EventCount{Source: "crm", Disposition: one[0].Disposition, Count: 3, NewestPK: one[0].PK}) {
		t.Errorf("EventRecentCounts of the newest 3: %+v %v; want the 3 of crm up to pk %d", counts, err, one[0].PK)
	}
	f.event("led_late", func(d *store.DeliveryInput) { d.Source = "app" }) // accepted, not routed
	counts, err = st.EventRecentCounts(f.ctx, &store.EventRecentParams{Limit: 2})
	var got2 []string
	for _, c := range counts {
		got2 = append(got2, fmt.Sprintf("%s/%s:%d", c.Source, c.Disposition, c.Count))
	}
	if err != nil || !slices.Equal(got2, []string{"app/accepted:1", "crm/" + string(one[0].Disposition) + ":1"}) {
		t.Errorf("EventRecentCounts of the newest 2: %v %v", got2, err)
	}
}
