package publish

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

// claimsCounted is the real store, counting the worker's claims once each
// has returned.
type claimsCounted struct {
	store.Store
	claims atomic.Int64
}

func (c *claimsCounted) EffectClaimGroup(ctx context.Context, ps []*store.EffectClaimParams) ([][]*store.ClaimedEffect, error) {
	defer c.claims.Add(1)
	return c.Store.EffectClaimGroup(ctx, ps)
}

// idle waits until the worker's first round has claimed and given back
// the slots it did not fill: until then a publish finds no room.
func idle(t *testing.T, w *deliver.Worker, st *claimsCounted) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		busy := st.claims.Load() == 0
		for _, l := range w.Limits() {
			busy = busy || l.InFlight > 0
		}
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker's first round: %d claims, limits %+v", st.claims.Load(), w.Limits())
		}
		time.Sleep(time.Millisecond)
	}
}

// With the worker as its handoff, a publish inserts the deliveries
// already claimed and the worker calls them as soon as the publish
// commits: no wake, no claim of its own. This worker polls once an hour
// and the test publishes after its first round's claim has returned, so
// it claims again only when woken: a message this test sees delivered
// was handed to it.
func TestPublishHandsOffToTheWorker(t *testing.T) { eachStore(t, testPublishHandsOffToTheWorker) }

func testPublishHandsOffToTheWorker(t *testing.T, storeURL string) {
	e := newEnv(t, storeURL, "publish:\n  max_in_flight: 4\n")
	st := &claimsCounted{Store: e.st}
	w, err := deliver.New(e.cfg, st, deliver.Options{Clock: e.clk, Actions: e.s.Actions(), Runtime: e.s,
		Rand: func() float64 { return 0 }, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e.s.opts.Handoff = w
	rcv := map[string]*receiver{"a": newReceiver(t), "b": newReceiver(t)}
	for id, r := range rcv {
		e.create(id, r.srv.URL)
	}
	if err := w.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Stop(e.ctx); err != nil {
			t.Errorf("stop the worker: %v", err)
		}
	})
	idle(t, w, st)
	res := e.publish("k1", "invoice.paid", `{"id":"in_1"}`)
	deadline := time.Now().Add(10 * time.Second)
	for id, r := range rcv {
		for len(e.effects(id, store.EffectDone)) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("endpoint %s: %d deliveries received, effects %+v", id, len(r.deliveries()), e.effects(id))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if ids := r.ids(); len(ids) != 1 || ids[0] != res.ID {
			t.Fatalf("endpoint %s received %v, want %s once", id, ids, res.ID)
		}
	}
	if n := e.wakeCount(); n != 0 {
		t.Fatalf("the publish woke the worker %d times; the handoff should have", n)
	}
}

// stopsBeforeTheCalls is a worker that stops between a publish's commit
// and its calls, as a process killed at that moment does.
type stopsBeforeTheCalls struct{ *deliver.Worker }

func (s stopsBeforeTheCalls) Take(claims []*store.EffectClaimParams, claimed [][]*store.ClaimedEffect, effects map[string]int) {
	if err := s.Stop(context.Background()); err != nil {
		panic(err)
	}
	s.Worker.Take(claims, claimed, effects)
}

// A delivery handed to a worker that stops before calling stays leased to
// it: no other worker calls it before the lease ends, and the next one
// makes it once it has, exactly once.
func TestHandedOffDeliveryOutlivesItsWorker(t *testing.T) {
	eachStore(t, testHandedOffDeliveryOutlivesItsWorker)
}

func testHandedOffDeliveryOutlivesItsWorker(t *testing.T, storeURL string) {
	e := newEnv(t, storeURL, "publish:\n  max_in_flight: 4\n")
	rcv := newReceiver(t)
	e.create("a", rcv.srv.URL)
	st := &claimsCounted{Store: e.st}
	gone, err := deliver.New(e.cfg, st, deliver.Options{Clock: e.clk, Actions: e.s.Actions(), Runtime: e.s,
		Rand: func() float64 { return 0 }, PollInterval: time.Hour, LeaseFor: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	idle(t, gone, st)
	e.s.opts.Handoff = stopsBeforeTheCalls{gone}
	res := e.publish("k1", "invoice.paid", `{"id":"in_1"}`)
	if got := e.effects("a", store.EffectSubmitting); len(got) != 1 {
		t.Fatalf("the delivery after the stop: %+v, want it submitting", e.effects("a"))
	}
	e.drain() // the next process's worker, before the lease ends
	if n := len(rcv.deliveries()); n != 0 {
		t.Fatalf("%d deliveries while the stopped worker's lease held", n)
	}
	// Once the lease has ended the next worker takes the call over as
	// one cut short: its outcome unknown, it is resent under the same
	// webhook-id on the retry schedule.
	e.clk.Advance(time.Minute + time.Second)
	e.drain()
	waiting := e.effects("a", store.EffectRetryWait)
	if len(waiting) != 1 || waiting[0].ErrorClass != store.ClassUnknown {
		t.Fatalf("the delivery after the lease: %+v, want it waiting to be resent", e.effects("a"))
	}
	e.clk.Set(waiting[0].NextAttemptAt)
	e.drain()
	if ids := rcv.ids(); len(ids) != 1 || ids[0] != res.ID {
		t.Fatalf("received %v, want %s once", ids, res.ID)
	}
	if got := e.effects("a", store.EffectDone); len(got) != 1 {
		t.Fatalf("the delivery after its retry: %+v, want it done", e.effects("a"))
	}
}
