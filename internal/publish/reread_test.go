package publish

import (
	"fmt"
	"net/http"
	"testing"
)

// A delivery to a healthy endpoint changes nothing about it, so it does
// not re-read the endpoints: re-reading after every success cost one read
// of every endpoint per delivery, the largest share of the fan-out's CPU.
// A success that ends a run of failures changes the endpoint and re-reads.
func TestSuccessfulDeliveriesDoNotRereadEndpoints(t *testing.T) {
	rcv := newReceiver(t)
	e := newEnv(t, sqliteURLOf(t), "publish:\n  schedule: [1s]\n")
	e.create("partner", rcv.srv.URL)
	before := e.s.reads.Load()
	for i := range 3 {
		e.publish(fmt.Sprint("k", i), "invoice.paid", `{"n":1}`)
	}
	e.drain()
	if n := len(rcv.deliveries()); n != 3 {
		t.Fatalf("partner received %d, want 3", n)
	}
	if n := e.s.reads.Load() - before; n != 0 {
		t.Fatalf("3 successful deliveries re-read the endpoints %d times, want none", n)
	}

	// A failure starts a run (recorded, re-read); the success after it
	// ends the run (recorded, re-read).
	rcv.setStatus(http.StatusInternalServerError)
	e.publish("k-fail", "invoice.paid", `{"n":1}`)
	e.drain()
	if e.stored("partner").FailingSince.IsZero() {
		t.Fatal("a failed delivery did not record when failures began")
	}
	rcv.setStatus(http.StatusNoContent)
	before = e.s.reads.Load()
	e.clk.Advance(2e9)
	e.drain()
	if !e.stored("partner").FailingSince.IsZero() || e.endpointFailingSince("partner") {
		t.Fatal("the success after a failure did not end the run of failures in the store and the snapshot")
	}
	if n := e.s.reads.Load() - before; n != 1 {
		t.Fatalf("the success that ended a run of failures re-read the endpoints %d times, want 1", n)
	}
}

// endpointFailingSince reports whether the service's snapshot of id has
// a run of failures.
func (e *env) endpointFailingSince(id string) bool {
	ep := e.s.endpoint(id)
	return ep == nil || !ep.FailingSince.IsZero()
}
