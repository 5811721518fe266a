// Package aimd keeps an adaptive limit on the calls in flight to one
// receiver, paced as a well-behaved sender paces itself (additive
// increase, multiplicative decrease, like TCP's congestion window): the
// limit rises by one for every limit's worth of calls answered fast and
// successfully, and halves when the receiver times out, answers 429 or
// 503, or cannot be reached. It never goes above its ceiling nor below 1.
//
// A healthy receiver so gets several calls at once within moments, while
// a slow or struggling one keeps the one call at a time it can bear.
package aimd

import (
	"sync"
	"time"
)

// Signal is what one call's answer says about the receiver's load.
type Signal int

const (
	// Neutral says nothing about load: a 4xx, a 5xx other than 503, a
	// redirect, or a call that was never sent. The limit stays.
	Neutral Signal = iota
	// Success is a 2xx. Answered within the limit's slow threshold it
	// raises the limit; slower, it leaves the limit where it is.
	Success
	// Overload is a timeout, a 429, a 503 or a connection that failed:
	// the limit halves.
	Overload
)

// start is the limit of a receiver nothing is known about yet: one call
// at a time, as a careful sender begins.
const start = 1

// Limit is one receiver's adaptive limit. It is safe for concurrent use.
type Limit struct {
	mu      sync.Mutex
	ceiling int
	slow    time.Duration
	limit   int
	// credit counts the fast successes since the limit last changed: a
	// window's worth of them (limit) raises it by one.
	credit int
	// droppedAt is when the limit last halved. A call started before it
	// (or at that instant) was in flight then: its timeout or 429 is the same congestion that
	// halved the limit, not a new one, and halving again for each of the
	// calls in flight together would take the limit to 1 at once.
	droppedAt time.Time
}

// New returns a limit at Start (or the ceiling, when lower) that never
// rises above ceiling (at least 1), and that only answers faster than
// slow raise.
func New(ceiling int, slow time.Duration) *Limit {
	ceiling = max(ceiling, 1)
	return &Limit{ceiling: ceiling, slow: slow, limit: min(start, ceiling)}
}

// Current is how many calls may be in flight now.
func (l *Limit) Current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.limit
}

// Ceiling is the most the limit rises to.
func (l *Limit) Ceiling() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ceiling
}

// SetCeiling changes the ceiling (at least 1); a limit above the new one
// comes down to it.
func (l *Limit) SetCeiling(n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ceiling = max(n, 1)
	l.limit = min(l.limit, l.ceiling)
}

// Observe takes the outcome of one call, sent at started and answered
// (or failed) at ended, and returns the limit after it.
func (l *Limit) Observe(started, ended time.Time, s Signal) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case Success:
		if ended.Sub(started) >= l.slow || l.limit >= l.ceiling {
			break
		}
		if l.credit++; l.credit >= l.limit {
			l.limit, l.credit = l.limit+1, 0
		}
	case Overload:
		if !started.After(l.droppedAt) {
			break // in flight when the limit last halved
		}
		l.limit, l.credit = max(l.limit/2, 1), 0
		l.droppedAt = ended
	}
	return l.limit
}
