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
	deadline := time.Now().Add(10 * time.Second)
	for st.claims.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the worker's first round never claimed")
		}
		time.Sleep(time.Millisecond)
	}
	res := e.publish("k1", "invoice.paid", `{"id":"in_1"}`)
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
