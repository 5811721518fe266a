package publish

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/aimd"
	"github.com/hookledger/hookledger/internal/store"
)

// An endpoint that answers fast gets more deliveries in flight, one more
// per window of fast successes up to its max_in_flight; a 429 halves them
// (once for the calls that failed together), its Retry-After is honoured
// as before, and every message still reaches it exactly once.
func TestInFlightRisesOnFastAnswersAndFallsOn429(t *testing.T) {
	rcv := newReceiver(t)
	e := newEnv(t, sqliteURLOf(t), "publish:\n  max_in_flight: 8\n")
	e.create("partner", rcv.srv.URL)
	dest := store.EndpointDestination("partner")
	if n := e.s.InFlightLimit(dest); n != 1 {
		t.Fatalf("a new endpoint may have %d deliveries in flight, want 1", n)
	}
	for i := range 10 {
		e.publish(fmt.Sprint("k", i), "invoice.paid", fmt.Sprintf(`{"n":%d}`, i))
	}
	// Each step claims what the limit allows: 1, then 2, 3 and 4 once
	// each window of fast answers has come back.
	for _, want := range []int{1, 2, 3, 4} {
		if n := e.step(); n != want {
			t.Fatalf("a step delivered %d messages, want %d (limit now %d)", n, want, e.s.InFlightLimit(dest))
		}
	}
	if n := e.s.InFlightLimit(dest); n != 5 {
		t.Fatalf("after 10 fast successes the limit is %d, want 5", n)
	}

	// Five deliveries in flight together are answered 429 Retry-After: 7.
	rcv.setStatus(http.StatusTooManyRequests)
	rcv.setHeader("Retry-After", "7")
	for i := range 5 {
		e.publish(fmt.Sprint("r", i), "invoice.paid", `{"n":1}`)
	}
	if n := e.step(); n != 5 {
		t.Fatalf("a step sent %d, want 5", n)
	}
	if n := e.s.InFlightLimit(dest); n != 2 {
		t.Fatalf("after five 429s sent together the limit is %d, want 2 (halved once)", n)
	}
	waiting := e.effects("partner", store.EffectRetryWait)
	if len(waiting) != 5 || !waiting[0].NextAttemptAt.Equal(e.clk.Now().Add(7*time.Second)) {
		t.Fatalf("after the 429s %d wait for a retry (first due %v), want 5 due after the Retry-After of 7 s", len(waiting), waiting)
	}
	rcv.setStatus(http.StatusNoContent)
	rcv.setHeader("Retry-After", "")
	e.clk.Advance(7 * time.Second)
	e.drain()
	seen := map[string]int{}
	for _, id := range rcv.ids() {
		seen[id]++
	}
	if len(seen) != 15 {
		t.Fatalf("partner received %d distinct messages, want 15", len(seen))
	}
	for id, n := range seen {
		// The five 429s were answers: each of those was sent twice.
		if want := 1 + countIf(waiting, id); n != want {
			t.Fatalf("message %s reached partner %d times, want %d", id, n, want)
		}
	}
}

// An endpoint that cannot be reached (a refused connection, as a timeout)
// halves its limit; with max_in_flight 1 it never rises.
func TestInFlightFallsOnFailedConnections(t *testing.T) {
	rcv := newReceiver(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	e := newEnv(t, sqliteURLOf(t), "{}")
	e.create("down", down)
	e.create("strict", rcv.srv.URL)
	one := 1
	if _, err := e.s.Update(e.ctx, "strict", &EndpointInput{MaxInFlight: &one}, "test"); err != nil {
		t.Fatal(err)
	}
	l := e.s.limit(store.EndpointDestination("down"))
	t1 := e.clk.Now()
	for range 3 {
		l.Observe(t1, t1, aimd.Success) // 1 -> 2 -> 3
	}
	if n := l.Current(); n != 3 {
		t.Fatalf("limit %d, want 3", n)
	}
	for i := range 5 {
		e.publish(fmt.Sprint("k", i), "invoice.paid", `{"n":1}`)
	}
	e.clk.Advance(time.Millisecond)
	e.step()
	if n := e.s.InFlightLimit(store.EndpointDestination("down")); n != 1 {
		t.Fatalf("after refused connections the limit is %d, want 1 (3 halved)", n)
	}
	e.drain()
	if n := e.s.InFlightLimit(store.EndpointDestination("strict")); n != 1 {
		t.Fatalf("an endpoint with max_in_flight 1 may have %d in flight, want 1", n)
	}
	if n := len(rcv.ids()); n != 5 {
		t.Fatalf("strict received %d, want 5", n)
	}
}

// What an answer says about an endpoint's load.
func TestLoadSignal(t *testing.T) {
	ctx := context.Background()
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	for _, tc := range []struct {
		name   string
		ctx    context.Context
		status int
		err    error
		want   aimd.Signal
	}{
		{"2xx", ctx, 204, nil, aimd.Success},
		{"429", ctx, 429, nil, aimd.Overload},
		{"503", ctx, 503, nil, aimd.Overload},
		{"timeout", ctx, 0, context.DeadlineExceeded, aimd.Overload},
		{"connection", ctx, 0, errors.New("connection refused"), aimd.Overload},
		{"500", ctx, 500, nil, aimd.Neutral},
		{"400", ctx, 400, nil, aimd.Neutral},
		{"410", ctx, 410, nil, aimd.Neutral},
		{"stopping", stopped, 0, context.Canceled, aimd.Neutral},
	} {
		if got := loadSignal(tc.ctx, tc.status, tc.err); got != tc.want {
			t.Errorf("%s: signal %d, want %d", tc.name, got, tc.want)
		}
	}
}

func countIf(effs []*store.Effect, msgID string) int {
	n := 0
	for _, f := range effs {
		if f.Version == msgID {
			n++
		}
	}
	return n
}

// step runs one step of the worker and returns how many it claimed.
func (e *env) step() int {
	e.t.Helper()
	n, err := e.w.Step(e.ctx)
	if err != nil {
		e.t.Fatalf("deliver: %v", err)
	}
	return n
}
