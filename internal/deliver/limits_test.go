package deliver_test

import (
	"testing"
	"time"
)

// Limits shows the token bucket as the calls left it: spent by a call,
// refilled by the clock, and the calls in flight bounded by max_in_flight.
func TestLimitsReportBucketAndInFlight(t *testing.T) {
	x := newWorld(t, setup{dest: "rate_limit: {per_second: 1, burst: 2}\nmax_in_flight: 4"})
	ls := x.w.Limits()
	if len(ls) != 1 || ls[0].PerSecond != 1 || ls[0].Burst != 2 || ls[0].Tokens != 2 || ls[0].MaxInFlight != 4 || ls[0].InFlight != 0 {
		t.Fatalf("limits before any call: %+v; want a full bucket of 2 at 1/s and 4 calls at most", ls)
	}
	x.order("o1", 1)
	x.drain()
	if got := x.w.Limits()[0].Tokens; got != 1 {
		t.Fatalf("tokens after one call: %v, want 1", got)
	}
	x.clk.Advance(time.Second)
	if got := x.w.Limits()[0].Tokens; got != 2 {
		t.Fatalf("tokens a second later: %v, want the bucket full again", got)
	}
}
