package deliver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// heldSettles is the SQLite store with its settles held until released:
// a ledger whose commits are slow.
type heldSettles struct {
	*sqlite.Store
	release chan struct{}
	held    atomic.Int64
}

func (h *heldSettles) EffectSettle(ctx context.Context, p *store.EffectSettleParams) error {
	h.held.Add(1)
	<-h.release
	return h.Store.EffectSettle(ctx, p)
}

func (h *heldSettles) EffectSettleGroup(ctx context.Context, ps []*store.EffectSettleParams) []error {
	h.held.Add(1)
	<-h.release
	return h.Store.EffectSettleGroup(ctx, ps)
}

// A slot bounds the calls at the receiver: once a call has succeeded, the
// next effect to its destination is called while the first one's settle
// still waits for the ledger, even at max_in_flight 1. The effects are
// still done once each, when the settles go through.
func TestSlotFreesWhenTheCallSucceeds(t *testing.T) {
	var calls, most, now atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		n := now.Add(1)
		defer now.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
	}))
	defer dest.Close()
	r := oneDestRuntime(t, dest.URL, 1)
	held := &heldSettles{Store: r.st, release: make(chan struct{})}
	w, err := deliver.New(r.cfg, held, deliver.Options{Workers: 4, LeaseFor: time.Hour, Clock: r.clk, PollInterval: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r.orders(t, 3)
	startWorker(t, w)
	waitUntil(t, "all three effects called while the first settle is held", func() bool { return calls.Load() == 3 })
	if n := r.count(t, "healthy", store.EffectDone); n != 0 {
		t.Fatalf("%d effects done while every settle is held", n)
	}
	close(held.release)
	waitUntil(t, "the three effects done", func() bool { return r.count(t, "healthy", store.EffectDone) == 3 })
	if got, m := calls.Load(), most.Load(); got != 3 || m != 1 {
		t.Fatalf("%d calls for 3 effects, at most %d at once; want 3, one at a time (max_in_flight 1)", got, m)
	}
}
