package deliver_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

// limitedDests is a run-time source that also limits its destinations'
// calls in flight, as publishing does per endpoint.
type limitedDests struct {
	runtimeDests
	limit atomic.Int64
}

func (l *limitedDests) InFlightLimit(string) int { return int(l.limit.Load()) }

// A run-time source that limits calls in flight is obeyed in each claim:
// a step claims no more than its limit, never more than the destination's
// max_in_flight however high the limit, and the max_in_flight alone when
// the source has no opinion (0).
func TestRuntimeInFlightLimit(t *testing.T) {
	x := newWorld(t, setup{})
	ctx := context.Background()
	if _, err := x.st.EndpointPut(ctx, &store.EndpointPutParams{ID: "ep1", Origin: store.OriginAPI, Enabled: true,
		Spec: store.EndpointSpec{URL: "https://ep.example"}, Actor: "test", Now: x.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	for i := range 12 {
		id := fmt.Sprintf("msg_%d", i)
		if _, err := x.st.MessagePublish(ctx, &store.MessagePublishParams{ID: id, Key: "k-" + id, Fingerprint: "f", Type: "a.b",
			KeyExpiresAt: x.clk.Now().Add(time.Hour), Payload: []byte(`{"type":"a.b","data":{}}`), Actor: "test", Now: x.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	act := &scriptedAction{statuses: []int{204}}
	src := &limitedDests{}
	src.set(&config.Destination{Name: store.EndpointDestination("ep1"), Kind: config.KindEndpoint, Preset: "generic", BaseURL: "https://ep.example",
		Timeout: config.Duration(5 * time.Second), Retry: config.RetryPolicy{Base: config.Duration(time.Second), Factor: 2, Cap: config.Duration(time.Minute), Attempts: 5},
		Schedule: []time.Duration{5 * time.Second}, MaxInFlight: 4, Builtin: true})
	cfg := *x.cfg
	w, err := deliver.New(&cfg, x.st, deliver.Options{Workers: 16, LeaseFor: time.Minute, Clock: x.clk, Rand: func() float64 { return 0.5 },
		Actions: map[string]deliver.Action{config.KindEndpoint: act}, Runtime: src, Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		limit int64
		want  int
	}{{2, 2}, {1, 1}, {100, 4}, {0, 4}} {
		src.limit.Store(step.limit)
		n, err := w.Step(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n != step.want {
			t.Fatalf("with the source's limit at %d (max_in_flight 4) a step claimed %d, want %d", step.limit, n, step.want)
		}
	}
	if act.calls != 11 {
		t.Fatalf("%d calls, want 11", act.calls)
	}
}
