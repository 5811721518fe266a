package deliver_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// stuckServer holds every request until released, counting how many it
// holds at once.
type stuckServer struct {
	*httptest.Server
	release chan struct{}
	now     atomic.Int64
	most    atomic.Int64
	total   atomic.Int64
}

func newStuck(t *testing.T) *stuckServer {
	s := &stuckServer{release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := s.now.Add(1)
		s.total.Add(1)
		for {
			m := s.most.Load()
			if n <= m || s.most.CompareAndSwap(m, n) {
				break
			}
		}
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
		s.now.Add(-1)
	}))
	t.Cleanup(func() {
		select {
		case <-s.release:
		default:
			close(s.release)
		}
		s.Close()
	})
	return s
}

const bulkheadYAML = `destinations:
  - name: stuck
    base_url: %s
    allow_private_networks: true
    timeout: 1h
    max_in_flight: 2
  - name: healthy
    base_url: %s
    allow_private_networks: true
delivery:
  lease: 2h
sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
flows:
  - name: orders
    source: shop
    events: ["*"]
    entity: event.id
    version: {mode: revision, revision: event.rev}
    effects:
      - {name: to_stuck, destination: stuck, request: {path: '"/x"'}}
      - {name: to_healthy, destination: healthy, request: {path: '"/y"'}}
`

type rt struct {
	st  *sqlite.Store
	cfg *config.Config
	clk *clock.Fake
	w   *deliver.Worker
}

func newRuntime(t *testing.T, stuckURL, healthyURL string, workers int, actions map[string]deliver.Action, yaml string) *rt {
	t.Helper()
	if yaml == "" {
		yaml = fmt.Sprintf(bulkheadYAML, stuckURL, healthyURL)
	}
	cfg, err := config.Parse("b.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "b.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(t0)
	w, err := deliver.New(cfg, st, deliver.Options{Workers: workers, LeaseFor: cfg.Delivery.Lease.D(), Clock: clk,
		PollInterval: 5 * time.Millisecond, Actions: actions})
	if err != nil {
		t.Fatal(err)
	}
	return &rt{st: st, cfg: cfg, clk: clk, w: w}
}

// orders stores n order events and processes them into effects.
func (r *rt) orders(t *testing.T, n int) {
	t.Helper()
	r.ordersFrom(t, 0, n)
}

// ordersFrom stores the order events from..from+n-1 and processes them
// into effects.
func (r *rt) ordersFrom(t *testing.T, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		commitOrder(t, r, i)
	}
	if err := flow.New(r.cfg, r.st, flow.Options{Clock: r.clk}).Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (r *rt) count(t *testing.T, dest string, state store.EffectState) int {
	t.Helper()
	es, err := r.st.EffectList(context.Background(), &store.EffectListParams{Flow: "orders", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if e.Destination == dest && e.State == state {
			n++
		}
	}
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up after 60 s waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// While every slot a destination may hold is blocked on a call that does
// not return, effects to another destination are still claimed and done:
// no head-of-line blocking, and the stuck one never holds more than its
// max_in_flight.
func TestStuckDestinationDoesNotBlockOthers(t *testing.T) {
	stuck := newStuck(t)
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer healthy.Close()
	r := newRuntime(t, stuck.URL, healthy.URL, 8, nil, "")
	r.orders(t, 20)
	if err := r.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "both slots of the stuck destination to be taken", func() bool { return stuck.now.Load() == 2 })
	waitUntil(t, "every effect to the healthy destination to be done", func() bool { return r.count(t, "healthy", store.EffectDone) == 20 })
	if m := stuck.most.Load(); m != 2 {
		t.Errorf("the stuck destination held %d calls at once, want its max_in_flight of 2", m)
	}
	if n := r.count(t, "stuck", store.EffectDone); n != 0 {
		t.Errorf("%d stuck effects done while the destination holds every call", n)
	}
	// Released, the stuck destination's effects are done too, still at
	// most two at a time.
	close(stuck.release)
	waitUntil(t, "the stuck destination's effects to be done", func() bool { return r.count(t, "stuck", store.EffectDone) == 20 })
	if m := stuck.most.Load(); m != 2 {
		t.Errorf("at most %d calls at once to the stuck destination, want 2", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.w.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestWorkerStartTwiceAndStopBeforeStart(t *testing.T) {
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer healthy.Close()
	r := newRuntime(t, healthy.URL, healthy.URL, 4, nil, "")
	if err := r.w.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	r2 := newRuntime(t, healthy.URL, healthy.URL, 4, nil, "")
	if err := r2.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := r2.w.Start(context.Background()); !errors.Is(err, loop.ErrStarted) {
		t.Fatalf("second Start: %v, want loop.ErrStarted", err)
	}
	if err := r2.w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A stuck call is canceled by Stop within its deadline; the effect stays
// submitting for the next process to reconcile.
func TestStopCancelsCallsInFlight(t *testing.T) {
	stuck := newStuck(t)
	r := newRuntime(t, stuck.URL, stuck.URL, 4, nil, "")
	r.orders(t, 1)
	if err := r.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the calls to start", func() bool { return stuck.now.Load() == 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.w.Stop(ctx); err != nil {
		t.Fatalf("Stop with calls in flight: %v", err)
	}
	if n := r.count(t, "stuck", store.EffectSubmitting) + r.count(t, "healthy", store.EffectSubmitting); n != 2 {
		t.Fatalf("%d effects submitting after Stop, want the 2 whose calls were cut short", n)
	}
}

type panicAction struct{ calls atomic.Int64 }

func (p *panicAction) Do(ctx context.Context, c *deliver.Call) (*deliver.Response, error) {
	p.calls.Add(1)
	panic("the custom action exploded")
}

// A panic in a custom action is that effect's failure (dead, outcome
// unknown, the stack in the log), not the end of the process; the worker
// goes on with the others.
func TestPanickingCustomActionKillsOnlyItsEffect(t *testing.T) {
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer healthy.Close()
	yaml := strings.Replace(fmt.Sprintf(bulkheadYAML, healthy.URL, healthy.URL),
		"    timeout: 1h\n    max_in_flight: 2\n", "    timeout: 1h\n    max_in_flight: 2\n    kind: boom\n", 1)
	p := &panicAction{}
	r := newRuntime(t, "", "", 4, map[string]deliver.Action{"boom": p}, yaml)
	r.orders(t, 3)
	if err := r.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer r.w.Stop(context.Background())
	waitUntil(t, "every effect to settle", func() bool {
		return r.count(t, "stuck", store.EffectDead) == 3 && r.count(t, "healthy", store.EffectDone) == 3
	})
	es, err := r.st.EffectList(context.Background(), &store.EffectListParams{Flow: "orders", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Destination != "stuck" {
			continue
		}
		if e.ErrorClass != store.ClassUnknown || !strings.Contains(e.Reason, "panic: the custom action exploded") || e.SuggestedRepair == "" {
			t.Errorf("%s: [%s] %s / %s", e.EpisodeKey, e.ErrorClass, e.Reason, e.SuggestedRepair)
		}
		as, err := r.st.AttemptList(context.Background(), e.ID)
		if err != nil || len(as) != 1 || as[0].Class != store.ClassUnknown {
			t.Errorf("%s attempts %+v (%v), want the one call recorded", e.EpisodeKey, as, err)
		}
	}
	if n := p.calls.Load(); n != 3 {
		t.Errorf("the action was called %d times, want 3", n)
	}
}

// A notification webhook that hangs does not hold a delivery slot: with a
// single worker, effects keep being delivered while notifications wait.
func TestSlowNotificationsStayOutOfDeliverySlots(t *testing.T) {
	var hooks sync.WaitGroup
	hookRelease := make(chan struct{})
	var hooked atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hooks.Add(1)
		defer hooks.Done()
		hooked.Add(1)
		select {
		case <-hookRelease:
		case <-r.Context().Done():
		}
	}))
	defer hook.Close()
	defer close(hookRelease)
	refuse := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusUnprocessableEntity)
	}))
	defer refuse.Close()
	yaml := fmt.Sprintf(bulkheadYAML, refuse.URL, refuse.URL) + "notifications: {webhook_url: " + hook.URL + ", timeout: 1h, allow_private_networks: true}\n"
	r := newRuntime(t, "", "", 1, nil, yaml)
	r.orders(t, 5)
	if err := r.w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every effect to go dead while the first notification hangs", func() bool {
		return r.count(t, "stuck", store.EffectDead)+r.count(t, "healthy", store.EffectDead) == 10
	})
	if n := hooked.Load(); n != 1 {
		t.Fatalf("%d notifications reached the webhook, want the first one, still hanging", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_ = r.w.Stop(ctx) // the hanging notification is abandoned at the deadline
}

// effectClaimCounter passes every call to the store and counts claims.
type effectClaimCounter struct {
	*sqlite.Store
	claims atomic.Int64
	// returned counts the groups whose claim has returned.
	returned atomic.Int64
}

// EffectClaimGroup counts each destination's claim of the group.
func (c *effectClaimCounter) EffectClaimGroup(ctx context.Context, ps []*store.EffectClaimParams) ([][]*store.ClaimedEffect, error) {
	c.claims.Add(int64(len(ps)))
	defer c.returned.Add(1)
	return c.Store.EffectClaimGroup(ctx, ps)
}

// startCountedWorker starts a worker in the background for one flow
// whose effects go to destURL (at most maxInFlight at once), over a store that counts
// claims, with the poll out of the way; it is stopped when the test ends.
func startCountedWorker(t *testing.T, destURL string, maxInFlight int) (*rt, *deliver.Worker, *effectClaimCounter) {
	t.Helper()
	r := oneDestRuntime(t, destURL, maxInFlight)
	cc := &effectClaimCounter{Store: r.st}
	w, err := deliver.New(r.cfg, cc, deliver.Options{Workers: 4, LeaseFor: time.Hour, Clock: r.clk, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	startWorker(t, w)
	return r, w, cc
}

// oneDestRuntime is one flow whose effects go to destURL, destination
// "healthy" (at most maxInFlight at once).
func oneDestRuntime(t *testing.T, destURL string, maxInFlight int) *rt {
	t.Helper()
	return newRuntime(t, "", "", 4, nil, fmt.Sprintf(`destinations:
  - name: healthy
    base_url: %s
    allow_private_networks: true
    max_in_flight: %d
sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
flows:
  - name: orders
    source: shop
    events: ["*"]
    entity: event.id
    version: {mode: revision, revision: event.rev}
    effects:
      - {name: to_healthy, destination: healthy, request: {path: '"/y"'}}
`, destURL, maxInFlight))
}

// startWorker starts w's background loop and stops it when the test ends.
func startWorker(t *testing.T, w *deliver.Worker) {
	t.Helper()
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
}

// The background loop claims only when asked to. With the poll out of the
// way, one effect delivered alone is one claim: the effect written asks
// for it, and the call's end asks for none. Claiming after every call made
// it two, and going round again after every claim that found something
// three.
func TestWorkerClaimsOnlyWhenWoken(t *testing.T) {
	var calls atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer dest.Close()
	r, w, cc := startCountedWorker(t, dest.URL, 4)
	const n = 5
	for i := range n {
		r.ordersFrom(t, i, 1)
		w.Wake()
		waitUntil(t, fmt.Sprintf("effect %d done", i), func() bool { return r.count(t, "healthy", store.EffectDone) == i+1 })
		// Let the wake of the call's end be taken.
		time.Sleep(20 * time.Millisecond)
	}
	if got := calls.Load(); got != n {
		t.Fatalf("%d calls for %d effects", got, n)
	}
	// One claim when the worker starts, one per effect: the call's end
	// asks for none.
	if got := cc.claims.Load(); got > 1+n {
		t.Errorf("%d claims for %d effects delivered one at a time, want at most %d", got, n, 1+n)
	}
}

// Processing with a handoff claims the effects it writes in the
// transaction that writes them: each call starts with no claim of the
// worker's own (the start's aside). And at max_in_flight, what the
// handoff could not take is claimed by the worker when a slot frees.
func TestProcessingHandsEffectsToTheWorker(t *testing.T) {
	var calls atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer dest.Close()
	r, w, cc := startCountedWorker(t, dest.URL, 4)
	waitUntil(t, "the start's claim", func() bool { return cc.claims.Load() == 1 })
	eng := flow.New(r.cfg, r.st, flow.Options{Clock: r.clk, Handoff: w})
	const n = 5
	for i := range n {
		commitOrder(t, r, i)
		if err := eng.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, fmt.Sprintf("effect %d done", i), func() bool { return r.count(t, "healthy", store.EffectDone) == i+1 })
	}
	time.Sleep(20 * time.Millisecond) // any wake the calls' ends sent is taken
	if got := calls.Load(); got != n {
		t.Fatalf("%d calls for %d effects", got, n)
	}
	if got := cc.claims.Load(); got != 1 {
		t.Errorf("%d claims of the worker's own for %d effects handed over, want 1 (the start's)", got, n)
	}
}

func TestHandoffAtMaxInFlightLeavesTheRestToTheWorker(t *testing.T) {
	hold := make(chan struct{})
	var calls atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		<-hold
	}))
	defer dest.Close()
	defer close(hold)
	r, w, cc := startCountedWorker(t, dest.URL, 1)
	waitUntil(t, "the start's claim", func() bool { return cc.claims.Load() == 1 })
	for i := range 3 {
		commitOrder(t, r, i)
	}
	// Three effects in one group: the handoff has room for one.
	if err := flow.New(r.cfg, r.st, flow.Options{Clock: r.clk, Handoff: w, Workers: 4}).Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first call", func() bool { return calls.Load() >= 1 })
	time.Sleep(20 * time.Millisecond)
	if got := calls.Load(); got != 1 {
		t.Fatalf("%d calls at max_in_flight 1, want 1", got)
	}
	hold <- struct{}{}
	hold <- struct{}{}
	waitUntil(t, "all three called", func() bool { return calls.Load() == 3 })
}

// A handoff claim that filled its room may have left effects due: Take
// wakes the worker's own claim for them, or they would wait for the poll.
func TestTakeWakesTheWorkerWhenAClaimFilledItsRoom(t *testing.T) {
	var calls atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { calls.Add(1) }))
	defer dest.Close()
	r, w, cc := startCountedWorker(t, dest.URL, 1)
	waitUntil(t, "the start's claim", func() bool { return cc.claims.Load() == 1 })
	r.ordersFrom(t, 0, 3) // three effects due, no wake
	effects := map[string]int{"healthy": 3}
	claims := w.Reserve(effects)
	if len(claims) != 1 || claims[0].Limit != 1 || claims[0].Destinations[0] != "healthy" {
		t.Fatalf("Reserve at max_in_flight 1: %+v, want one claim of 1 for healthy", claims)
	}
	claimed, err := r.st.EffectClaim(context.Background(), claims[0])
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	w.Take(claims, [][]*store.ClaimedEffect{claimed}, effects)
	waitUntil(t, "all three called", func() bool { return calls.Load() == 3 })
}

// commitOrder stores event i of the shop source.
func commitOrder(t *testing.T, r *rt, i int) {
	t.Helper()
	res, err := r.st.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: []*store.Submission{{
		Deliveries: []*store.DeliveryInput{{RequestID: fmt.Sprint("req-", i), Source: "shop", EventID: fmt.Sprint("evt-", i),
			Type: "order.paid", ReceivedAt: t0, Body: []byte(fmt.Sprintf(`{"id":"o%d","rev":1}`, i))}},
	}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("commit: %v %v", err, res)
	}
}

// An effect that came due while its destination was at max_in_flight is
// claimed when that destination's call ends, without the poll.
func TestWorkerClaimsWhenASlotFrees(t *testing.T) {
	hold, entered := make(chan struct{}), make(chan struct{}, 4)
	var calls atomic.Int64
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			entered <- struct{}{}
			<-hold
		}
	}))
	defer dest.Close()
	r, w, _ := startCountedWorker(t, dest.URL, 1)
	r.ordersFrom(t, 0, 1)
	w.Wake()
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the first effect was not called after 30 s")
	}
	// The first call holds the destination's only slot.
	r.ordersFrom(t, 1, 1)
	w.Wake()
	time.Sleep(50 * time.Millisecond) // let the loop take the wake while the slot is busy
	close(hold)
	waitUntil(t, "both effects done", func() bool { return r.count(t, "healthy", store.EffectDone) == 2 })
	if got := calls.Load(); got != 2 {
		t.Errorf("%d calls for 2 effects", got)
	}
}

// A publish's reservation (ReserveFresh) promises no slot where effects
// may be due already: a handoff that found nothing to take there leaves
// the destination marked, until the worker's own claim there comes back
// with room to spare. Processing's Reserve is not held back: its claim
// takes the backlog first.
func TestReserveFreshSkipsADestinationWithABacklog(t *testing.T) {
	dest := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer dest.Close()
	_, w, cc := startCountedWorker(t, dest.URL, 4)
	effects := map[string]int{"healthy": 1}
	// The start's claim holds every slot until it returns, and gives them
	// back just after.
	var claims []*store.EffectClaimParams
	waitUntil(t, "the start's claim", func() bool {
		if cc.returned.Load() == 0 {
			return false
		}
		claims = w.ReserveFresh(effects)
		return len(claims) > 0
	})
	if len(claims) != 1 || claims[0].Limit != 2 {
		t.Fatalf("ReserveFresh with nothing due: %+v, want one claim of 2", claims)
	}
	w.Take(claims, [][]*store.ClaimedEffect{{}}, effects) // held back: something was due
	if claims := w.ReserveFresh(effects); len(claims) != 0 {
		t.Fatalf("ReserveFresh after a handoff was held back: %+v, want none", claims)
	}
	claims = w.Reserve(effects)
	if len(claims) != 1 {
		t.Fatalf("Reserve after a handoff was held back: %+v, want one claim", claims)
	}
	w.Take(claims, [][]*store.ClaimedEffect{{}}, effects)
	w.Wake()
	// The claim is counted as it starts; the mark goes once it returns.
	waitUntil(t, "a slot after the worker's claim found room to spare", func() bool { return len(w.ReserveFresh(effects)) == 1 })
	if n := cc.claims.Load(); n != 2 {
		t.Fatalf("%d claims, want the start's and the wake's", n)
	}
}
