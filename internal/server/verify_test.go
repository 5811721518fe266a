package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// The serve process verifies done effects in the background: an effect the
// destination loses after answering 201 becomes a reconciliation mismatch
// once verify.after has passed on the server's clock.
func TestContinuousVerification(t *testing.T) { stores(t, testContinuousVerification) }

func testContinuousVerification(t *testing.T, storeURL string) {
	var mu sync.Mutex
	held := map[string]bool{}
	var lookups atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Method == http.MethodPost:
			held[r.Header.Get("X-Order")] = true
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte(`{"id":"obj_1"}`))
		case strings.HasPrefix(r.URL.Path, "/orders/"):
			lookups.Add(1)
			if !held[strings.TrimPrefix(r.URL.Path, "/orders/")] {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write([]byte(`{"id":"obj_1"}`))
		}
	}))
	t.Cleanup(dest.Close)
	yaml := strings.Replace(testConfig(storeURL), "sources:\n", "sources:\n"+flowSources(), 1) + `
processing:
  poll_interval: 5ms
delivery:
  poll_interval: 5ms
destinations:
  - name: shipping
    base_url: "` + dest.URL + `"
    allow_private_networks: true
    lookup:
      path: '"/orders/" + pathEscape(entity)'
      found: status == 200
    verify: {sample: 1.0, after: 10m, per_second: 100}
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
    state: event.intent
    effects:
      - name: ship
        destination: shipping
        request:
          path: '"/shipments"'
          headers: {X-Order: entity}
`
	h := startWith(t, yaml)
	if code, body := shopPost(t, h, "shop", orderEvent("evt_1", "CREATED", 1), nil); code != http.StatusOK {
		t.Fatalf("post: %d %s", code, body)
	}
	st, err := storeopen.Open(context.Background(), h.cfg.Store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	effect := func() *store.Effect {
		es, err := st.EffectList(ctx, &store.EffectListParams{Flow: "orders"})
		if err != nil || len(es) != 1 {
			return nil
		}
		return es[0]
	}
	waitFor(t, "the effect to be done", func() bool { e := effect(); return e != nil && e.State == store.EffectDone })

	// The destination loses it; once verify.after has passed on the
	// server's clock the verifier finds out (that it waits for the delay
	// is proven against a stepped verifier in package deliver).
	mu.Lock()
	delete(held, "ord-42")
	mu.Unlock()
	h.clk.Advance(11 * time.Minute)
	waitFor(t, "the mismatch", func() bool { e := effect(); return e != nil && e.State == store.EffectNeedsReconciliation })
	e := effect()
	if e.State != store.EffectNeedsReconciliation || e.MismatchAt.IsZero() || !strings.Contains(e.Reason, "shipping does not hold this effect") {
		t.Fatalf("effect is %s: %s, want a reconciliation mismatch", e.State, e.Reason)
	}
	// The line is logged after the settle commits, so it may trail the
	// state the loop above saw.
	waitFor(t, "the mismatch in the log", func() bool { return strings.Contains(h.logs.String(), "verification mismatch") })
	if lookups.Load() == 0 {
		t.Errorf("no lookup was made:\n%s", h.logs.String())
	}
}
