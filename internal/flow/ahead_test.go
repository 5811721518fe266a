package flow

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/inbox"
	"github.com/hookledger/hookledger/internal/store"
)

// An inbox group's events are routed and settled by routing ahead, with
// no routing take of the router's: the engine's poll is an hour away and
// nobody wakes it. Then a group that holds a duplicate, whose event waits
// for the router (its first delivery was stored before, with another
// order in its body), is left whole to the router, which the take wakes:
// the duplicate's event is decided on its first delivery's body (and the
// group's other event is not routed before that older one:
// EventRouteStored's own test). A group too large to settle in routing is
// the router's too.
func TestRouteAheadSettlesTheGroupsEvents(t *testing.T) {
	yaml := fmt.Sprintf(sources, "http://127.0.0.1:1") + ordersRevisionFlow
	f := newFixture(t, yaml)
	counted := &aheadCounter{Store: f.st}
	f.eng = New(f.cfg, counted, Options{Clock: f.clk, LeaseFor: time.Minute, PollInterval: time.Hour})
	ctx := context.Background()
	if err := f.eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The start's own routing take, which finds nothing, must be over:
	// from here on only a wake starts one.
	for !f.eng.loop.Fresh(&f.eng.routeLook) || f.eng.routing.Load() {
		time.Sleep(time.Millisecond)
	}
	w := inbox.New(f.st, inbox.Options{RouteAhead: f.eng.RouteAhead})
	w.Start()
	defer func() {
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stop the writer: %v", err)
		}
	}()
	delivery := func(id, body string, received time.Time) *store.DeliveryInput {
		return &store.DeliveryInput{RequestID: "req-ahead-" + id, Source: "shop", EventID: id, Type: "order.updated",
			OccurredAt: t0, ReceivedAt: received, Headers: map[string]string{"Content-Type": "application/json"}, Body: []byte(body)}
	}
	submit := func(ds ...*store.DeliveryInput) {
		t.Helper()
		res, err := w.Submit(ctx, &store.Submission{Deliveries: ds})
		if err != nil || res.Err != nil {
			t.Fatalf("submit: %v %v", err, res.Err)
		}
	}
	// Nanoseconds the store does not keep: the event as decided must
	// still be the event as stored.
	at := t0.Add(1500 * time.Nanosecond)
	var group []*store.DeliveryInput
	for i := range 3 {
		group = append(group, delivery(fmt.Sprint("evt-", i), fmt.Sprintf(`{"order_id":"o%d","revision":1}`, i), at))
	}
	submit(group...)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 3; {
		switch d := f.disposition("shop", fmt.Sprint("evt-", i)); {
		case d == "applied":
			i++
		case time.Now().After(deadline):
			t.Fatalf("evt-%d is %s after 30 s, with the router asleep: routing ahead did not settle it", i, d)
		default:
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Counted as the take hears its commit, just after the events show.
	for counted.routed.Load() != 3 {
		if time.Now().After(deadline) {
			t.Fatalf("routing ahead routed %d events, want the group's 3 (the others were the router's)", counted.routed.Load())
		}
		time.Sleep(time.Millisecond)
	}

	f.send("shop", "evt-dup", `{"order_id":"o-first","revision":1}`)
	submit(delivery("evt-dup", `{"order_id":"o-retry","revision":1}`, at), delivery("evt-3", `{"order_id":"o3","revision":1}`, at))
	// The take wakes the router for what it left.
	for _, id := range []string{"evt-dup", "evt-3"} {
		for f.disposition("shop", id) != "applied" {
			if time.Now().After(deadline) {
				t.Fatalf("%s is %s after 30 s: the router was not woken for what routing ahead left", id, f.disposition("shop", id))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// A group larger than a routing page settles in routing is the
	// router's whole, also woken.
	group = group[:0]
	for i := range inlineMax + 1 {
		group = append(group, delivery(fmt.Sprint("evt-big-", i), fmt.Sprintf(`{"order_id":"b%d","revision":1}`, i), at))
	}
	submit(group...)
	for i := range inlineMax + 1 {
		for f.disposition("shop", fmt.Sprint("evt-big-", i)) != "applied" {
			if time.Now().After(deadline) {
				t.Fatalf("evt-big-%d is not applied after 30 s: the router was not woken for a large group", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	// Stop waits for the takes in flight: every count is in.
	if err := f.eng.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if n := counted.routed.Load(); n != 3 {
		t.Fatalf("routing ahead routed %d events in all, want the first group's 3", n)
	}
	for entity, want := range map[string]bool{"o-first": true, "o-retry": false} {
		p, err := f.st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: "orders", Entity: entity})
		if err != nil {
			t.Fatal(err)
		}
		if (p != nil) != want {
			t.Fatalf("projection of %s: %+v; the duplicate's event is routed by its first delivery's body", entity, p)
		}
	}
}

// aheadCounter passes every call to the store and counts the events
// routing ahead routed.
type aheadCounter struct {
	store.Store
	routed atomic.Int64
}

func (c *aheadCounter) EventRouteStored(ctx context.Context, p *store.EventRouteStoredParams) (store.RoutedPage, error) {
	page, err := c.Store.EventRouteStored(ctx, p)
	c.routed.Add(int64(page.Events))
	return page, err
}
