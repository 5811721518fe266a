package publish

import (
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

// A re-read of the endpoints (the refresh loop's) that read the endpoint
// enabled before a 410 disabled it, and installs what it read after the
// 410's own re-read, must not enable it again in this process: the next
// message parks without being sent.
func TestStaleRefreshCannotReenableADisabledEndpoint(t *testing.T) {
	eachStore(t, testStaleRefreshCannotReenableADisabledEndpoint)
}

func testStaleRefreshCannotReenableADisabledEndpoint(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	rcv.setStatus(http.StatusGone)
	e := newEnv(t, storeURL, "{}")
	e.create("partner", rcv.srv.URL)

	// The next re-read stops between reading and installing until
	// released; every other one runs straight through.
	read, release := make(chan struct{}), make(chan struct{})
	var armed atomic.Bool
	armed.Store(true)
	e.s.afterRead = func() {
		if armed.CompareAndSwap(true, false) {
			close(read)
			<-release
		}
	}
	stale := make(chan error, 1)
	go func() { stale <- e.s.Refresh(e.ctx) }()
	<-read // it has read partner enabled

	first := e.publish("k1", "invoice.paid", `{"n":1}`).ID
	e.drain() // answered 410: partner is disabled, the message parked
	if ep := e.stored("partner"); ep.Enabled || !strings.Contains(ep.DisabledReason, "410") {
		t.Fatalf("after the 410 partner is %+v, want disabled naming 410", ep)
	}
	close(release)
	if err := <-stale; err != nil {
		t.Fatal(err)
	}
	if ep := e.s.endpoint("partner"); ep == nil || ep.Enabled {
		t.Errorf("after the re-read that began before the 410 the snapshot holds partner enabled (%v): want it disabled", ep != nil)
	}

	second := e.publish("k2", "invoice.paid", `{"n":2}`).ID
	e.drain()
	if ids := rcv.ids(); !slices.Equal(ids, []string{first}) {
		t.Fatalf("the disabled endpoint received %v, want only %s (the message answered 410)", ids, first)
	}
	dead := e.effects("partner", store.EffectDead)
	if len(dead) != 2 || dead[1].EpisodeKey != store.PublishEpisodeKey(second, "partner") ||
		!strings.HasPrefix(dead[1].Reason, "parked: endpoint partner is disabled") {
		t.Fatalf("parked effects %+v, want both messages, the second parked unsent", dead)
	}
	if v := e.counter(e.s.m.disabled); v != 1 {
		t.Fatalf("hookledger_endpoints_disabled_total = %v, want 1", v)
	}
}

// A delivery the worker took up while the endpoint was enabled, whose call
// begins after the endpoint was disabled, is not sent: the action reads
// the endpoint's state again at the last moment.
func TestDeliveryBeginningAfterADisableIsNotSent(t *testing.T) {
	rcv := newReceiver(t)
	e := newEnv(t, sqliteURLOf(t), "{}")
	e.create("partner", rcv.srv.URL)
	_, dests := e.s.RuntimeDestinations()
	if len(dests) != 1 || dests[0].Paused != "" {
		t.Fatalf("destinations %+v, want partner enabled", dests)
	}
	if _, err := e.s.SetEnabled(e.ctx, "partner", false, "by test", "test"); err != nil {
		t.Fatal(err)
	}
	call := &deliver.Call{Destination: dests[0], Method: "POST", Header: http.Header{},
		EpisodeKey: store.PublishEpisodeKey("msg_1", "partner"), Body: []byte(`{"type":"a","timestamp":"x","data":{}}`)}
	resp, err := (&endpointAction{s: e.s}).Do(e.ctx, call)
	if err == nil || !strings.Contains(err.Error(), "disabled") || (resp != nil && resp.Sent) {
		t.Fatalf("Do = %+v, %v; want an error naming the disabled endpoint, nothing sent", resp, err)
	}
	if n := len(rcv.deliveries()); n != 0 {
		t.Fatalf("the disabled endpoint received %d requests, want none", n)
	}
}
