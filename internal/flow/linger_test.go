package flow

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// pageCounter counts the routing takes, those that routed something
// (pages), and the events they routed.
type pageCounter struct {
	store.Store
	takes, pages, events atomic.Int64
}

func (c *pageCounter) EventRouteNext(ctx context.Context, p *store.EventRouteNextParams) (store.RoutedPage, error) {
	c.takes.Add(1)
	page, err := c.Store.EventRouteNext(ctx, p)
	if page.Events > 0 {
		c.pages.Add(1)
		c.events.Add(int64(page.Events))
	}
	return page, err
}

// startLingering starts f's engine on a pageCounter with linger, the poll
// out of the way, and stops it when the test ends.
func startLingering(t *testing.T, f *fixture, linger time.Duration) *pageCounter {
	t.Helper()
	pc := &pageCounter{Store: f.st}
	startWith(t, f, pc, Options{Clock: f.clk, LeaseFor: time.Hour, PollInterval: time.Hour, Linger: linger}, nil)
	return pc
}

// With processing.linger, events that arrive one by one while the router
// waits share its take: three events, each stored and then announced as
// the receiver announces it, are routed in one page, not three. The
// announcements that came while it waited were its own, and ask for no
// take after it (which would find nothing: a transaction for nothing on
// PostgreSQL).
func TestRoutingLingersForLoneEvents(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+ordersFlow)
	pc := startLingering(t, f, 5*time.Second) // far longer than two commits take, however loaded the machine
	// The start's own take, which finds nothing and does not linger, must
	// be over: the next one lingers.
	for !f.eng.loop.Fresh(&f.eng.routeLook) || f.eng.routing.Load() {
		time.Sleep(time.Millisecond)
	}
	const n = 3
	for i := range n {
		f.send("shop", fmt.Sprint("evt-", i), fmt.Sprintf(`{"order_id":"o%d","rev":1}`, i))
		f.eng.WakeRouting()
	}
	for i := range n {
		waitApplied(t, f, fmt.Sprint("evt-", i))
	}
	if p, e := pc.pages.Load(), pc.events.Load(); p != 1 || e != n {
		t.Errorf("%d events routed in %d takes, want all %d in one: the router did not wait for the events that followed the first", e, p, n)
	}
	for deadline := time.Now().Add(30 * time.Second); f.eng.routing.Load() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := pc.takes.Load(); got != 2 {
		t.Errorf("%d routing takes, want 2 (the start's and the one that waited)", got)
	}
}

// A backlog is never waited for: stored before the engine starts, more
// than a page of events is routed in two takes one after the other,
// although the linger is an hour. (The second take follows a full page.)
func TestRoutingDoesNotLingerOverABacklog(t *testing.T) {
	f := newFixture(t, fmt.Sprintf(sources, "https://api.invalid")+ordersFlow)
	const n = routePage + 1
	for i := range n {
		f.send("shop", fmt.Sprint("evt-", i), fmt.Sprintf(`{"order_id":"o%d","rev":1}`, i))
	}
	pc := startLingering(t, f, time.Hour)
	waitApplied(t, f, fmt.Sprint("evt-", n-1))
	if p, e := pc.pages.Load(), pc.events.Load(); p != 2 || e != n {
		t.Errorf("%d events routed in %d takes, want %d in 2", e, p, n)
	}
}

// lingerFor waits only when the take before found less than a page, and
// only with a linger set.
func TestLingerFor(t *testing.T) {
	e := &Engine{opts: Options{Linger: 20 * time.Millisecond}}
	if d := e.lingerFor(); d != 0 {
		t.Errorf("before any take: linger %s, want none", d)
	}
	e.drained.Store(true)
	if d := e.lingerFor(); d != 20*time.Millisecond {
		t.Errorf("after a take that drained the queue: linger %s, want 20ms", d)
	}
	e.opts.Linger = 0
	if d := e.lingerFor(); d != 0 {
		t.Errorf("with no linger set: %s, want none", d)
	}
}
