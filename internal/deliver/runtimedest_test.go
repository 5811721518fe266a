package deliver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

// runtimeDests is a DestinationSource a test changes between steps.
type runtimeDests struct {
	mu    sync.Mutex
	v     uint64
	dests []*config.Destination
}

func (r *runtimeDests) RuntimeDestinations() (uint64, []*config.Destination) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.v, r.dests
}

func (r *runtimeDests) set(ds ...*config.Destination) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.v++
	r.dests = ds
}

// scriptedAction answers each call with the next status.
type scriptedAction struct {
	mu       sync.Mutex
	statuses []int
	calls    int
}

func (a *scriptedAction) Do(_ context.Context, _ *deliver.Call) (*deliver.Response, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.statuses[min(a.calls, len(a.statuses)-1)]
	a.calls++
	return &deliver.Response{Status: st, Sent: true}, nil
}

// A destination made at run time is claimed for once the source offers
// it; its schedule replaces the backoff; paused, its effects park in the
// exception queue without a call.
func TestRuntimeDestinationScheduleAndParking(t *testing.T) {
	x := newWorld(t, setup{})
	ctx := context.Background()
	if _, err := x.st.EndpointPut(ctx, &store.EndpointPutParams{ID: "ep1", Origin: store.OriginAPI, Enabled: true,
		Spec: store.EndpointSpec{URL: "https://ep.example"}, Actor: "test", Now: x.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	publish := func(id string) int64 {
		t.Helper()
		res, err := x.st.MessagePublish(ctx, &store.MessagePublishParams{ID: id, Key: "k-" + id, Fingerprint: "f", Type: "a.b",
			KeyExpiresAt: x.clk.Now().Add(time.Hour), Payload: []byte(`{"type":"a.b","data":{}}`), Actor: "test", Now: x.clk.Now()})
		if err != nil || len(res.Endpoints) != 1 {
			t.Fatalf("publish: %v %+v", err, res)
		}
		es, err := x.st.EffectList(ctx, &store.EffectListParams{Destination: store.EndpointDestination("ep1"), Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		return es[len(es)-1].ID
	}

	act := &scriptedAction{statuses: []int{500, 500, 204}}
	src := &runtimeDests{}
	cfg := *x.cfg
	w, err := deliver.New(&cfg, x.st, deliver.Options{Workers: 2, LeaseFor: time.Minute, Clock: x.clk, Rand: func() float64 { return 0.5 },
		Actions: map[string]deliver.Action{config.KindEndpoint: act}, Runtime: src, Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	id := publish("msg_1")
	if _, err := w.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if act.calls != 0 {
		t.Fatal("called a destination the source does not offer yet")
	}
	d := &config.Destination{Name: store.EndpointDestination("ep1"), Kind: config.KindEndpoint, Preset: "generic", BaseURL: "https://ep.example",
		Timeout: config.Duration(5 * time.Second), Retry: config.RetryPolicy{Base: config.Duration(time.Second), Factor: 2, Cap: config.Duration(time.Minute), Attempts: 5},
		Schedule: []time.Duration{5 * time.Second, 5 * time.Minute}, Builtin: true}
	src.set(d)
	if _, err := w.Step(ctx); err != nil {
		t.Fatal(err)
	}
	e := x.get(id)
	// 500 from an endpoint is retried on the schedule: 5 s plus a tenth
	// (the draw 0.5 of at most a fifth).
	if act.calls != 1 || e.State != store.EffectRetryWait || !e.NextAttemptAt.Equal(x.clk.Now().Add(5500*time.Millisecond)) {
		t.Fatalf("after one call: calls %d, %s due %s (now %s)", act.calls, e.State, e.NextAttemptAt, x.clk.Now())
	}
	x.clk.Set(e.NextAttemptAt)
	if _, err := w.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if e = x.get(id); !e.NextAttemptAt.Equal(x.clk.Now().Add(330 * time.Second)) {
		t.Fatalf("second wait: due %s, want 5 min + 10%%", e.NextAttemptAt.Sub(x.clk.Now()))
	}

	// Paused: the due effect and a new one park, nothing is called.
	paused := *d
	paused.Paused = "endpoint ep1 is disabled (test)"
	paused.ParkRepair = "enable it"
	src.set(&paused)
	id2 := publish("msg_2")
	x.clk.Set(e.NextAttemptAt)
	// One call in flight for the endpoint: a step each.
	for range 2 {
		if _, err := w.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, pid := range []int64{id, id2} {
		p := x.get(pid)
		if p.State != store.EffectDead || p.Reason != "parked: endpoint ep1 is disabled (test)" || p.SuggestedRepair != "enable it" || !p.NextAttemptAt.IsZero() {
			t.Fatalf("parked effect %+v", p)
		}
	}
	if act.calls != 2 {
		t.Fatalf("%d calls, want none while paused", act.calls)
	}
	// Enabled again and retried by a person (what enabling does): delivered.
	src.set(d)
	for _, pid := range []int64{id, id2} {
		if _, err := x.st.EffectOperate(ctx, &store.EffectOperateParams{EffectID: pid, Action: store.OperateRetry, Actor: "test", Now: x.clk.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Step(ctx); err != nil {
		t.Fatal(err)
	}
	if a, b := x.get(id), x.get(id2); a.State != store.EffectDone || b.State != store.EffectDone {
		t.Fatalf("after enabling: %s %s", a.State, b.State)
	}
}

// An endpoint's answers are read as the Standard Webhooks spec says: only
// 2xx succeeds, a redirect or a 4xx is retried like a 5xx, 410 stops.
func TestClassifyEndpoint(t *testing.T) {
	d := &config.Destination{Name: "endpoint:e", Kind: config.KindEndpoint}
	for _, tc := range []struct {
		status int
		want   store.ErrorClass
	}{
		{200, ""}, {204, ""}, {299, ""},
		{301, store.ClassTransient}, {308, store.ClassTransient},
		{400, store.ClassTransient}, {401, store.ClassTransient}, {404, store.ClassTransient},
		{410, store.ClassPermanent},
		{429, store.ClassQuota},
		{500, store.ClassTransient}, {503, store.ClassTransient},
	} {
		class, reason := deliver.Classify(d, &deliver.Response{Status: tc.status, Sent: true}, nil)
		if tc.want == "" {
			if class != "success" || reason != "" {
				t.Errorf("%d: %s %q, want success", tc.status, class, reason)
			}
			continue
		}
		if class != tc.want || reason == "" {
			t.Errorf("%d: %s %q, want %s with a reason", tc.status, class, reason, tc.want)
		}
	}
}

// claimHook runs a function after each claim, as a change another
// goroutine makes while the claim is in flight.
type claimHook struct {
	deliver.Store
	after func()
}

func (h *claimHook) EffectClaimGroup(ctx context.Context, ps []*store.EffectClaimParams) ([][]*store.ClaimedEffect, error) {
	out, err := h.Store.EffectClaimGroup(ctx, ps)
	h.after()
	return out, err
}

// urlAction records the base url of each call's destination.
type urlAction struct {
	mu   sync.Mutex
	urls []string
}

func (a *urlAction) Do(_ context.Context, c *deliver.Call) (*deliver.Response, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.urls = append(a.urls, c.Destination.BaseURL)
	return &deliver.Response{Status: 204, Sent: true}, nil
}

// A destination changed after a round read the destinations and before
// its claim returned is the one the claimed effect is delivered with: an
// endpoint's url changed and a message published right after must reach
// the new url.
func TestRuntimeDestinationChangedDuringClaim(t *testing.T) {
	x := newWorld(t, setup{})
	ctx := context.Background()
	publishToEndpoint(t, x, "https://old.example")
	src := &runtimeDests{}
	src.set(endpointDest("https://old.example"))
	act := &urlAction{}
	hook := &claimHook{Store: x.st, after: func() { src.set(endpointDest("https://new.example")) }}
	cfg := *x.cfg
	w, err := deliver.New(&cfg, hook, deliver.Options{Workers: 2, LeaseFor: time.Minute, Clock: x.clk,
		Actions: map[string]deliver.Action{config.KindEndpoint: act}, Runtime: src, Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Step(ctx); err != nil || n == 0 {
		t.Fatalf("step: %d claimed, %v", n, err)
	}
	if len(act.urls) != 1 || act.urls[0] != "https://new.example" {
		t.Fatalf("calls went to %v, want the new url once", act.urls)
	}
}

// publishToEndpoint makes endpoint ep1 at url and publishes one message,
// which it is subscribed to.
func publishToEndpoint(t *testing.T, x *world, url string) {
	t.Helper()
	ctx := context.Background()
	if _, err := x.st.EndpointPut(ctx, &store.EndpointPutParams{ID: "ep1", Origin: store.OriginAPI, Enabled: true,
		Spec: store.EndpointSpec{URL: url}, Actor: "test", Now: x.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.st.MessagePublish(ctx, &store.MessagePublishParams{ID: "msg_1", Key: "k1", Fingerprint: "f", Type: "a.b",
		KeyExpiresAt: x.clk.Now().Add(time.Hour), Payload: []byte(`{"type":"a.b","data":{}}`), Actor: "test", Now: x.clk.Now()}); err != nil {
		t.Fatal(err)
	}
}

// endpointDest is endpoint ep1's destination at url, as the runtime
// source gives it.
func endpointDest(url string) *config.Destination {
	return &config.Destination{Name: store.EndpointDestination("ep1"), Kind: config.KindEndpoint, Preset: "generic", BaseURL: url,
		Timeout: config.Duration(5 * time.Second), Retry: config.RetryPolicy{Base: config.Duration(time.Second), Factor: 2, Cap: config.Duration(time.Minute), Attempts: 5},
		Builtin: true}
}
