package aimd_test

import (
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/aimd"
	"github.com/hookledger/hookledger/internal/clock"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// calls drives a limit with calls on a fake clock, each taking took.
type calls struct {
	l   *aimd.Limit
	clk *clock.Fake
}

func newCalls(ceiling int) *calls {
	return &calls{l: aimd.New(ceiling, time.Second), clk: clock.NewFake(t0)}
}

// call makes one call that starts now, lasts took and ends with s.
func (c *calls) call(took time.Duration, s aimd.Signal) int {
	started := c.clk.Now()
	c.clk.Advance(took)
	return c.l.Observe(started, c.clk.Now(), s)
}

// fast makes n calls answered fast with a success.
func (c *calls) fast(n int) int {
	for range n {
		c.call(10*time.Millisecond, aimd.Success)
	}
	return c.l.Current()
}

// The limit starts at one call at a time and rises by one per window of
// fast successes (1, then 2 more, then 3 more...), up to its ceiling and
// no further.
func TestRisesAdditivelyOnFastSuccesses(t *testing.T) {
	c := newCalls(5)
	if n := c.l.Current(); n != 1 {
		t.Fatalf("a new limit is %d, want 1", n)
	}
	for _, step := range []struct{ calls, want int }{{1, 2}, {1, 2}, {1, 3}, {3, 4}, {4, 5}, {100, 5}} {
		if got := c.fast(step.calls); got != step.want {
			t.Fatalf("after %d more fast successes the limit is %d, want %d", step.calls, got, step.want)
		}
	}
}

// A success that took the slow threshold or longer says the receiver is
// working hard: the limit does not rise. Neutral answers change nothing.
func TestSlowSuccessesAndNeutralAnswersHold(t *testing.T) {
	c := newCalls(8)
	c.fast(3) // 1 -> 2 -> 3
	for range 50 {
		c.call(time.Second, aimd.Success)
		c.call(5*time.Millisecond, aimd.Neutral)
	}
	if n := c.l.Current(); n != 3 {
		t.Fatalf("after slow successes and neutral answers the limit is %d, want 3 as before", n)
	}
}

// A timeout, 429 or failed connection halves the limit, never below 1;
// the overloads of calls that were already in flight when it halved do
// not halve it again, a call sent after the halving does.
func TestHalvesOnceOnOverload(t *testing.T) {
	c := newCalls(64)
	if n := c.fast(1 + 2 + 3 + 4 + 5 + 6 + 7); n != 8 {
		t.Fatalf("the limit rose to %d, want 8", n)
	}
	// Eight calls in flight together all time out.
	started := c.clk.Now()
	c.clk.Advance(15 * time.Second)
	ended := c.clk.Now()
	if n := c.l.Observe(started, ended, aimd.Overload); n != 4 {
		t.Fatalf("the first timeout left the limit at %d, want 4 (halved)", n)
	}
	for range 7 {
		c.clk.Advance(time.Millisecond)
		c.l.Observe(started, c.clk.Now(), aimd.Overload)
	}
	if n := c.l.Current(); n != 4 {
		t.Fatalf("timeouts of calls in flight when it halved took the limit to %d, want 4", n)
	}
	// Calls sent after it: each 429 halves again, down to 1 and no lower.
	for _, want := range []int{2, 1, 1, 1} {
		c.clk.Advance(time.Millisecond)
		if n := c.call(time.Millisecond, aimd.Overload); n != want {
			t.Fatalf("a 429 left the limit at %d, want %d", n, want)
		}
	}
	// And it rises again from there once answers come fast.
	if n := c.fast(1); n != 2 {
		t.Fatalf("a fast success after the overload left the limit at %d, want 2", n)
	}
}

// A ceiling of 1 is one call at a time for good; a lower ceiling brings
// the limit down at once; a ceiling below 1 counts as 1.
func TestCeiling(t *testing.T) {
	c := newCalls(1)
	if n := c.fast(100); n != 1 {
		t.Fatalf("with a ceiling of 1 the limit rose to %d", n)
	}
	c = newCalls(10)
	c.fast(1 + 2 + 3 + 4 + 5)
	c.l.SetCeiling(3)
	if n, ceil := c.l.Current(), c.l.Ceiling(); n != 3 || ceil != 3 {
		t.Fatalf("after lowering the ceiling to 3 the limit is %d (ceiling %d), want 3", n, ceil)
	}
	c.l.SetCeiling(0)
	if n := c.l.Current(); n != 1 {
		t.Fatalf("a ceiling of 0 left the limit at %d, want 1", n)
	}
	if l := aimd.New(0, time.Second); l.Current() != 1 || l.Ceiling() != 1 {
		t.Fatalf("New(0) is %d of %d, want 1 of 1", l.Current(), l.Ceiling())
	}
}

// Observations from many calls at once are all counted (run under -race).
func TestConcurrentObservations(t *testing.T) {
	l := aimd.New(1000, time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				l.Observe(t0, t0.Add(time.Millisecond), aimd.Success)
				_ = l.Current()
			}
		})
	}
	wg.Wait()
	// 800 fast successes: 1+2+...+k <= 800 gives k = 39, so 40.
	if n := l.Current(); n != 40 {
		t.Fatalf("after 800 fast successes the limit is %d, want 40", n)
	}
}
