package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/store"
)

// A panic while an item's expressions run dead-letters that event with the
// reason; the entity's later events, and the engine, go on.
func TestPanickingExpressionDeadLettersOnlyItsEvent(t *testing.T) {
	yaml := fmt.Sprintf(sources, "http://127.0.0.1:1") + ordersRevisionFlow
	f := newFixture(t, yaml)
	f.eng.prepareHook = func(it *store.WorkItem) {
		if it.Event.EventID == "evt-boom" {
			panic("an expression exploded")
		}
	}
	f.send("shop", "evt-boom", `{"order_id":"o1","revision":1}`)
	f.send("shop", "evt-next", `{"order_id":"o1","revision":2}`)
	f.drain()
	if d := f.disposition("shop", "evt-boom"); d != "dead_lettered" {
		t.Fatalf("the panicking event is %s, want dead_lettered", d)
	}
	if d := f.disposition("shop", "evt-next"); d != "applied" {
		t.Fatalf("the next event is %s, want applied", d)
	}
	rows, err := f.st.AuditList(context.Background(), &store.AuditListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, a := range rows {
		if a.EventID == "evt-boom" && strings.Contains(a.Detail, "panic: an expression exploded") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no audit row gives the panic as the reason: %+v", rows)
	}
}

// The background loop keeps entities flowing while the source API of a
// refetch flow hangs: that API holds at most its max_in_flight entities,
// and another flow's entities are processed meanwhile.
func TestHangingSourceAPIHoldsOnlyItsBulkhead(t *testing.T) {
	var inFlight, most atomic.Int64
	release := make(chan struct{})
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		fmt.Fprintf(w, `{"status":"PAID"}`)
	}))
	defer api.Close()
	defer close(release)
	yaml := strings.Replace(fmt.Sprintf(sources, api.URL), "      bearer_token: api-token\n",
		"      bearer_token: api-token\n      timeout: 1h\n      max_in_flight: 2\n", 1) + `  - name: plain
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
processing: {workers: 4, lease: 2h}
flows:
  - name: refetched
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: refetch, path: '"/orders/" + pathEscape(entity)', hash: [object.status]}
  - name: counted
    source: plain
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
`
	f := newFixture(t, yaml)
	f.eng = New(f.cfg, f.st, Options{Clock: f.clk, Workers: 4, LeaseFor: 2 * time.Hour, PollInterval: 5 * time.Millisecond})
	for i := range 6 {
		f.send("shop", fmt.Sprint("evt-shop-", i), fmt.Sprintf(`{"order_id":"s%d"}`, i))
	}
	for i := range 30 {
		f.send("plain", fmt.Sprint("evt-plain-", i), fmt.Sprintf(`{"order_id":"p%d","revision":1}`, i))
	}
	if err := f.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := f.eng.Start(context.Background()); !errors.Is(err, loop.ErrStarted) {
		t.Fatalf("second Start: %v, want loop.ErrStarted", err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		done := 0
		for i := range 30 {
			if f.disposition("plain", fmt.Sprint("evt-plain-", i)) == "applied" {
				done++
			}
		}
		if done == 30 && inFlight.Load() == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: %d of 30 plain events applied, %d refetches hanging", done, inFlight.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if m := most.Load(); m != 2 {
		t.Errorf("the hanging API held %d refetches at once, want its max_in_flight of 2", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.eng.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := f.eng.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// claimCounter passes every call to the store and counts entity claims
// and routing takes.
type claimCounter struct {
	store.Store
	claims, takes, lists, settles atomic.Int64
}

func (c *claimCounter) FlowApplyGroup(ctx context.Context, subs [][]*store.FlowApplyParams) []store.FlowApplyOutcome {
	c.settles.Add(int64(len(subs)))
	return c.Store.FlowApplyGroup(ctx, subs)
}

func (c *claimCounter) FlowApplyBatch(ctx context.Context, ps []*store.FlowApplyParams) ([]*store.FlowApplyResult, error) {
	c.settles.Add(1)
	return c.Store.FlowApplyBatch(ctx, ps)
}

func (c *claimCounter) EntityClaim(ctx context.Context, p *store.EntityClaimParams) ([]*store.Lease, error) {
	c.claims.Add(1)
	return c.Store.EntityClaim(ctx, p)
}

func (c *claimCounter) EventRouteNext(ctx context.Context, p *store.EventRouteNextParams) (store.RoutedPage, error) {
	c.takes.Add(1)
	return c.Store.EventRouteNext(ctx, p)
}

func (c *claimCounter) WorkListPendingGroup(ctx context.Context, ps []*store.WorkListPendingParams) ([][]*store.WorkItem, error) {
	c.lists.Add(int64(len(ps)))
	return c.Store.WorkListPendingGroup(ctx, ps)
}

// An entity leased by the routing take comes with its pending work, read
// in the routing transaction (on SQLite its keys, the events being the
// page's), and that work is settled there: processing a lone event lists
// and settles nothing of its own, where each was a transaction (on SQLite
// a commit of the one writer) more per webhook.
func TestRoutedLeaseCarriesItsWork(t *testing.T) {
	for name, open := range stores() {
		t.Run(name, func(t *testing.T) {
			f, cc := countedOn(t, open, 4)
			const n = 5
			sendOneByOne(t, f, n)
			// The loop's first claim may take the first entity before
			// routing leases it: that entity is listed, and settled by
			// the processor.
			lists, claims, settles := cc.lists.Load(), cc.claims.Load(), cc.settles.Load()
			if lists > min(claims, 1) {
				t.Errorf("%d entities' work listed by the processor (%d claims of its own) for %d events each leased by routing, want at most the first", lists, claims, n)
			}
			if settles > min(claims, 1) {
				t.Errorf("%d pages settled by the processor (%d claims of its own) for %d events each leased with its work by routing, want at most the first", settles, claims, n)
			}
		})
	}
}

// sendOneByOne sends n events of n orders, each routed and applied
// before the next is sent.
func sendOneByOne(t *testing.T, f *fixture, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprint("evt-", i)
		f.send("shop", id, fmt.Sprintf(`{"order_id":"o%d","rev":1}`, i))
		f.eng.WakeRouting()
		waitApplied(t, f, id)
	}
}

// Work settled in the routing transaction is prepared from the body the
// routing decision decoded (on SQLite before the transaction, on
// PostgreSQL inside it): each event's body is decoded once on its way to
// its effect, not once to route and again to prepare.
func TestRoutingDecodesEachBodyOnce(t *testing.T) {
	for name, open := range stores() {
		t.Run(name, func(t *testing.T) {
			f, cc := countedOn(t, open, 4)
			var mu sync.Mutex
			decoded := map[string]int{}
			f.eng.decodeHook = func(ev *store.RoutableEvent) {
				mu.Lock()
				decoded[ev.EventID]++
				mu.Unlock()
			}
			const n = 5
			sendOneByOne(t, f, n)
			mu.Lock()
			defer mu.Unlock()
			total := 0
			for _, c := range decoded {
				total += c
			}
			// The loop's first claim may take the first entity before
			// routing leases it: the processor then decodes that event
			// again.
			if settles := int(cc.settles.Load()); total > n+settles || len(decoded) != n {
				t.Errorf("bodies decoded %v (%d times for %d events, %d pages settled by the processor), want each once", decoded, total, n, settles)
			}
		})
	}
}

// A flow whose effects read the entity's previous state reads the
// database while it is prepared: prepared before the lease (SQLite's
// routing prepares before its transaction) it could read a state another
// slot was about to replace, and inside PostgreSQL's routing transaction
// the read would wait with the page's row locks held. Its lone events are
// settled by the processor, under the lease, and the read sees the state
// the earlier event left.
func TestRoutingLeavesFlowsReadingPreviousToTheProcessor(t *testing.T) {
	for name, open := range stores() {
		t.Run(name, func(t *testing.T) {
			f, cc := countedFlowOn(t, open, previousFlow, 4)
			for i, id := range []string{"evt-1", "evt-2"} {
				f.send("shop", id, fmt.Sprintf(`{"order_id":"o1","rev":%d}`, i+1))
				f.eng.WakeRouting()
				waitApplied(t, f, id)
			}
			if got := cc.settles.Load(); got < 2 {
				t.Errorf("the processor settled %d pages for two events of a flow reading previous, want both: none is settled in routing", got)
			}
			var seen []string
			was := -1.0
			for _, e := range f.effectRows() {
				if e.Version == "r2" {
					seen = append(seen, string(e.Request))
					var req struct {
						Body struct {
							Was float64 `json:"was"`
						} `json:"body"`
					}
					if err := json.Unmarshal(e.Request, &req); err != nil {
						t.Fatal(err)
					}
					was = req.Body.Was
				}
			}
			if len(seen) != 1 || was != 1 {
				t.Errorf("r2's effect requests %q, want one whose body saw r1's state (was 1)", seen)
			}
		})
	}
}

// previousFlow is ordersFlow with an effect whose body reads previous.
const previousFlow = ordersFlow + `    state: '{"rev": event.rev}'
    effects:
      - name: sync
        destination: crm
        request: {path: '"/deals/" + entity', body: '{"rev": event.rev, "was": previous != null ? previous.rev : 0}'}
`

// A routing page of more than inlineMax events is a busy pipeline: it
// settles nothing itself, and the processor settles its entities; on
// PostgreSQL from the work their leases carry, without listing it again,
// on SQLite from its own listing on a reader (such a page lists nothing
// on the writer).
func TestRoutingSettlesOnlySmallPages(t *testing.T) {
	for name, open := range stores() {
		t.Run(name, func(t *testing.T) {
			f, cc := countedOn(t, open, 16)
			// The start's round first: its claim holds every slot while
			// its routing take runs, which could lease nothing.
			for cc.takes.Load() == 0 || cc.claims.Load() == 0 || f.eng.routing.Load() || f.eng.inFlight() > 0 {
				time.Sleep(time.Millisecond)
			}
			startClaims := cc.claims.Load()
			const n = inlineMax + 4
			for i := range n {
				f.send("shop", fmt.Sprint("evt-", i), fmt.Sprintf(`{"order_id":"o%d","rev":1}`, i))
			}
			f.eng.WakeRouting()
			for i := range n {
				waitApplied(t, f, fmt.Sprint("evt-", i))
			}
			lists, claims, settles := cc.lists.Load(), cc.claims.Load()-startClaims, cc.settles.Load()
			if name == "postgres" {
				if settles != n || lists != 0 || claims != 0 {
					t.Errorf("the processor settled %d pages and listed %d entities' work (%d claims of its own) after one routing take of %d events; want all %d settled from the work the leases carried, none listed",
						settles, lists, claims, n, n)
				}
			} else if settles < n || lists < n {
				t.Errorf("the processor settled %d pages and listed %d entities' work for %d events on SQLite, want each at least once", settles, lists, n)
			}
		})
	}
}

// countedOn is an orders fixture on the store open returns, its engine
// started over a counting store (startCounted) with workers slots.
func countedOn(t *testing.T, open func(t *testing.T) store.Store, workers int) (*fixture, *claimCounter) {
	t.Helper()
	return countedFlowOn(t, open, ordersFlow, workers)
}

// countedFlowOn is countedOn with the flows config flows.
func countedFlowOn(t *testing.T, open func(t *testing.T) store.Store, flows string, workers int) (*fixture, *claimCounter) {
	t.Helper()
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+flows)
	f.st = open(t)
	if _, err := f.st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return f, startCounted(t, f, workers)
}

// startCounted starts f's engine in the background over a store that
// counts claims, routing takes and listings, with the poll out of the way.
func startCounted(t *testing.T, f *fixture, workers int) *claimCounter {
	t.Helper()
	return startCountedHooked(t, f, workers, nil)
}

// startCountedHooked is startCounted with the engine's prepareHook set
// before it starts: set after, the first round may prepare an item
// before the test's hook is there to see it.
func startCountedHooked(t *testing.T, f *fixture, workers int, hook func(*store.WorkItem)) *claimCounter {
	t.Helper()
	cc := &claimCounter{Store: f.st}
	startOn(t, f, cc, workers, hook)
	return cc
}

// startOn starts f's engine on st, with workers slots, the poll out of
// the way and hook as its prepareHook, and stops it when the test ends.
func startOn(t *testing.T, f *fixture, st store.Store, workers int, hook func(*store.WorkItem)) {
	t.Helper()
	startWith(t, f, st, Options{Clock: f.clk, Workers: workers, LeaseFor: time.Hour, PollInterval: time.Hour}, hook)
}

// startWith starts f's engine on st with opts and hook as its
// prepareHook, and stops it when the test ends.
func startWith(t *testing.T, f *fixture, st store.Store, opts Options, hook func(*store.WorkItem)) {
	t.Helper()
	f.eng = New(f.cfg, st, opts)
	f.eng.prepareHook = hook
	if err := f.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := f.eng.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
}

// waitApplied waits for the event to be applied, then for the slots to
// empty and the wakes they send to be handled.
func waitApplied(t *testing.T, f *fixture, eventID string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for f.disposition("shop", eventID) != "applied" {
		if time.Now().After(deadline) {
			t.Fatalf("event %s not applied after 30 s", eventID)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for f.eng.inFlight() > 0 {
		time.Sleep(2 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
}

const ordersFlow = `flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
`

// ordersRevisionFlow is ordersFlow for events that carry their order as
// "revision".
const ordersRevisionFlow = `flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
`

// The background loop routes only when asked to and claims only when
// asked to. With the poll out of the way, one event processed alone is
// one routing take, which leases the entity it made ready in its own
// transaction: the receiver asks for routing, the routed page needs no
// claim of its own while slots are free, and the entity released with
// nothing left asks for nothing. Doing both on every wake made it three
// of each; a claim after each routed page, one more commit per event.
func TestLoopClaimsOnlyWhenWoken(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+ordersFlow)
	cc := startCounted(t, f, 4)
	const n = 5
	for i := range n {
		id := fmt.Sprint("evt-", i)
		f.send("shop", id, fmt.Sprintf(`{"order_id":"o%d","rev":1}`, i))
		f.eng.WakeRouting() // as the receiver does after storing
		waitApplied(t, f, id)
	}
	// One of each when the loop starts (the start's claim may meet the
	// first event's), then one routing take per event and no claim.
	if got := cc.claims.Load(); got > 2 {
		t.Errorf("%d entity claims for %d events processed one at a time, want at most 2: routing leases what it makes ready", got, n)
	}
	if got := cc.takes.Load(); got > 1+n {
		t.Errorf("%d routing takes for %d events processed one at a time, want at most %d", got, n, 1+n)
	}
}

// An entity made ready while every slot is busy is claimed when a slot
// frees, without the poll: the claim its routed page asked for waits for
// the slot, although the entity that frees it was drained.
func TestLoopClaimsWhenASlotFrees(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+ordersFlow)
	hold, entered := make(chan struct{}), make(chan struct{}, 1)
	// A page larger than inlineMax, so that o1 (first in claim order)
	// is leased by the routing take and prepared by the processor in the
	// only slot, not in routing; the others wait for the slot. The page
	// is stored before the engine starts, so that its first take reads
	// it whole: an engine running while the events arrive could route
	// the first few on their own, leave o1 in a page small enough to
	// settle in routing, and hold the routing take itself in the hook.
	for i := range inlineMax + 1 {
		f.send("shop", fmt.Sprint("evt-b", i), fmt.Sprintf(`{"order_id":"o1%d","rev":1}`, i))
	}
	f.send("shop", "evt-1", `{"order_id":"o1","rev":1}`)
	cc := startCountedHooked(t, f, 1, func(it *store.WorkItem) {
		if it.Entity == "o1" {
			entered <- struct{}{}
			<-hold
		}
	})
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("o1 not processed after 30 s")
	}
	claimsBefore, takesBefore := cc.claims.Load(), cc.takes.Load()
	// o1 holds the only slot; o2 is routed and ready meanwhile.
	f.send("shop", "evt-2", `{"order_id":"o2","rev":1}`)
	f.eng.WakeRouting()
	deadline := time.Now().Add(30 * time.Second)
	for cc.takes.Load() <= takesBefore || f.eng.routing.Load() {
		if time.Now().After(deadline) {
			t.Fatal("evt-2 not routed after 30 s (was o1 prepared in a routing take, held in the hook?)")
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Let the loop handle the routed page's wake while the slot is busy.
	time.Sleep(50 * time.Millisecond)
	if got := cc.claims.Load(); got != claimsBefore {
		t.Errorf("%d entity claims while the only slot was busy, want none", got-claimsBefore)
	}
	close(hold)
	waitApplied(t, f, "evt-1")
	waitApplied(t, f, "evt-2")
	for i := range inlineMax + 1 {
		waitApplied(t, f, fmt.Sprint("evt-b", i))
	}
}

// gatedClaims holds the entity claims made once armed until open is
// closed, as a claim queued behind a busy writer waits: waiting hears
// each one held.
type gatedClaims struct {
	store.Store
	armed   atomic.Bool
	open    chan struct{}
	waiting chan struct{}
}

func (g *gatedClaims) EntityClaim(ctx context.Context, p *store.EntityClaimParams) ([]*store.Lease, error) {
	if g.armed.Load() {
		select {
		case g.waiting <- struct{}{}:
		default:
		}
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.Store.EntityClaim(ctx, p)
}

// A claim holds no slot while it waits for the database: its slots are
// promised as the database runs it (store.Slots). The routing take
// beside it leases and settles the entity it made ready although the
// claim, asked for first, still waits. Promised as the claim was made,
// the slots were the waiting claim's, and the entity waited for it.
func TestClaimHoldsNoSlotWhileItWaits(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+ordersFlow)
	g := &gatedClaims{Store: f.st, open: make(chan struct{}), waiting: make(chan struct{}, 1)}
	startOn(t, f, g, 2, nil)
	opened := false
	t.Cleanup(func() { // before the engine stops: cleanups run last first
		if !opened {
			close(g.open)
		}
	})
	f.send("shop", "evt-0", `{"order_id":"o0","rev":1}`)
	f.eng.WakeRouting()
	waitApplied(t, f, "evt-0") // the loop is idle

	g.armed.Store(true)
	f.send("shop", "evt-1", `{"order_id":"o1","rev":1}`)
	f.eng.claimWanted.Store(true) // the round routes, then claims
	f.eng.WakeRouting()
	select {
	case <-g.waiting:
	case <-time.After(30 * time.Second):
		t.Fatal("no entity claim after 30 s")
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.disposition("shop", "evt-1") != "applied" {
		if time.Now().After(deadline) {
			t.Fatalf("evt-1 not applied after 10 s while a claim waited: %d slots promised", f.eng.inFlight())
		}
		time.Sleep(2 * time.Millisecond)
	}
	opened = true
	close(g.open)
	waitApplied(t, f, "evt-1")
}

// inFlight is how many entities the background loop holds slots for.
func (e *Engine) inFlight() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inflight
}
