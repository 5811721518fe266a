// Package clock provides the time source that every component reads, so tests
// can drive leases, backoff and tolerances exactly with a fake clock instead
// of sleeping on real time.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}

// Real is the wall clock.
type Real struct{}

// Now returns time.Now in UTC.
func (Real) Now() time.Time { return time.Now().UTC() }

// Fake is a manually advanced clock for tests. The zero value starts at the
// zero time; use NewFake for a meaningful start.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a fake clock set to t.
func NewFake(t time.Time) *Fake { return &Fake{now: t.UTC()} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Advance moves the fake time forward by d.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

// Set moves the fake time to t.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t.UTC()
	f.mu.Unlock()
}

// Sleep waits d of real time, or until ctx ends (its error). The waits it
// serves (a pause between pruning batches, routing's linger) are paced on
// the machine's time, not told by it: a fake clock has no timers.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
