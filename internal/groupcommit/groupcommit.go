// Package groupcommit runs concurrent callers' requests as groups
// without waiting: the store calls that cost a transaction or a query
// each (a flow engine's settles and listings, a delivery worker's
// settles) go to the database together when they arrive together, and
// alone when they arrive alone (docs/architecture.md, "Storage").
package groupcommit

import (
	"context"
	"sync"
)

// New returns a Batcher that hands each group to run, which answers
// every request of the group in order. A group holds requests while
// their sizes add up to at most limit (a larger request goes alone).
func New[I, O any](run func(context.Context, []I) []O, size func(I) int, limit int) *Batcher[I, O] {
	return &Batcher[I, O]{run: run, size: size, limit: limit}
}

// Batcher is a group commit without waiting. Each caller hands in its
// request; a caller that finds no group running starts a goroutine that
// runs every request handed in meanwhile as one group, and again while
// more arrive, then ends. Under load requests pile up while the previous
// group runs, and a lone request goes at once. Each caller gets its own
// answer and goes on as soon as its group is done: no caller's goroutine
// is kept running other callers' groups (with 4 workers, one of them
// leading would have cost a quarter of the processing).
type Batcher[I, O any] struct {
	run   func(context.Context, []I) []O
	size  func(I) int
	limit int

	mu      sync.Mutex
	queue   []*request[I, O]
	leading bool
}

type request[I, O any] struct {
	in   I
	out  O
	done chan struct{}
}

// Do runs in in the next group and returns its answer.
func (b *Batcher[I, O]) Do(ctx context.Context, in I) O {
	r := &request[I, O]{in: in, done: make(chan struct{})}
	b.mu.Lock()
	b.queue = append(b.queue, r)
	if !b.leading {
		b.leading = true
		go b.lead(ctx)
	}
	b.mu.Unlock()
	<-r.done
	return r.out
}

// lead runs groups until none is waiting. Its context is that of the
// request that started it; the engine's callers share one.
func (b *Batcher[I, O]) lead(ctx context.Context) {
	for {
		b.mu.Lock()
		n, total := 0, 0
		for n < len(b.queue) && (n == 0 || total+b.size(b.queue[n].in) <= b.limit) {
			total += b.size(b.queue[n].in)
			n++
		}
		group := b.queue[:n:n]
		b.queue = b.queue[n:]
		if n == 0 {
			b.leading = false
		}
		b.mu.Unlock()
		if n == 0 {
			return
		}
		ins := make([]I, n)
		for i, r := range group {
			ins[i] = r.in
		}
		outs := b.run(ctx, ins)
		for i, r := range group {
			r.out = outs[i]
			close(r.done)
		}
	}
}

// Queued is how many requests wait for a group (for tests and metrics).
func (b *Batcher[I, O]) Queued() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}
