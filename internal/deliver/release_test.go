package deliver_test

import (
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Effects the token bucket refuses are released until the bucket has a
// token again: they are not due before then, so the worker does not claim
// and release them in a loop (and Drain, which steps until nothing is due,
// returns).
func TestReleasedEffectIsNotDueBeforeNotBefore(t *testing.T) {
	x := newWorld(t, setup{dest: "rate_limit: {per_second: 1, burst: 1}\nmax_in_flight: 4"})
	for _, id := range []string{"o1", "o2", "o3"} {
		x.order(id, 1)
	}
	n, err := x.w.Step(x.ctx)
	if err != nil || n != 3 {
		t.Fatalf("first step claimed %d: %v", n, err)
	}
	if len(x.dest.Requests()) != 1 {
		t.Fatalf("%d calls, the bucket holds 1", len(x.dest.Requests()))
	}
	var released []*store.Effect
	for _, e := range x.effects() {
		if e.State != store.EffectDone {
			released = append(released, e)
		}
	}
	for _, e := range released {
		if e.State != store.EffectApproved || !e.NextAttemptAt.After(t0) {
			t.Errorf("released %s: %s next %v", e.EpisodeKey, e.State, e.NextAttemptAt)
		}
	}
	n, err = x.w.Step(x.ctx)
	if err != nil || n != 0 {
		t.Fatalf("a second step at the same instant claimed %d released effects again (%v): they are due only at their NotBefore", n, err)
	}
	x.clk.Advance(time.Second)
	x.drain()
	x.clk.Advance(time.Second)
	x.drain()
	for _, e := range x.effects() {
		x.wantState(e, store.EffectDone)
	}
}
