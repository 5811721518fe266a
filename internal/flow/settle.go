package flow

import (
	"context"
	"sync"

	"github.com/hookledger/hookledger/internal/store"
)

// Limits of one group: a settle group is one transaction, whose locks are
// held until the commit; a list group is one query.
const (
	maxGroupItems = 400
	maxListGroup  = 64
)

// batcher is a group commit without waiting. Each caller hands in its
// request; a caller that finds no group running starts a goroutine that
// runs every request handed in meanwhile as one group, and again while
// more arrive, then ends. Under load requests pile up while the previous
// group runs, and a lone request goes at once. Each caller gets its own
// answer and goes on as soon as its group is done: no caller's goroutine
// is kept running other callers' groups (with 4 workers, one of them
// leading would have cost a quarter of the processing).
type batcher[I, O any] struct {
	run   func(context.Context, []I) []O
	size  func(I) int // a request's share of limit
	limit int

	mu      sync.Mutex
	queue   []*batchReq[I, O]
	leading bool
}

type batchReq[I, O any] struct {
	in   I
	out  O
	done chan struct{}
}

// do runs in in the next group and returns its answer.
func (b *batcher[I, O]) do(ctx context.Context, in I) O {
	r := &batchReq[I, O]{in: in, done: make(chan struct{})}
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
func (b *batcher[I, O]) lead(ctx context.Context) {
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

// newSettler groups the pages of concurrent entities into shared
// transactions (store.Pipeline.FlowApplyGroup). On PostgreSQL a group
// shares its statements and its commit, which is where the database
// spends its time when many entities each have a little work; every page
// still gets exactly the answer FlowApplyBatch would give it.
func newSettler(st store.Pipeline) *batcher[[]*store.FlowApplyParams, store.FlowApplyOutcome] {
	return &batcher[[]*store.FlowApplyParams, store.FlowApplyOutcome]{
		run:   st.FlowApplyGroup,
		size:  func(ps []*store.FlowApplyParams) int { return len(ps) },
		limit: maxGroupItems,
	}
}

// listOutcome is one entity's listing.
type listOutcome struct {
	items []*store.WorkItem
	err   error
}

// newLister groups concurrent entities' listings of pending work into one
// query (store.Pipeline.WorkListPendingGroup).
func newLister(st store.Pipeline) *batcher[*store.WorkListPendingParams, listOutcome] {
	return &batcher[*store.WorkListPendingParams, listOutcome]{
		run: func(ctx context.Context, ps []*store.WorkListPendingParams) []listOutcome {
			out := make([]listOutcome, len(ps))
			items, err := st.WorkListPendingGroup(ctx, ps)
			for i := range out {
				if err != nil {
					out[i].err = err
				} else {
					out[i].items = items[i]
				}
			}
			return out
		},
		size:  func(*store.WorkListPendingParams) int { return 1 },
		limit: maxListGroup,
	}
}
