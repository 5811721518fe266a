package flow

import (
	"context"
	"sync"

	"github.com/hookledger/hookledger/internal/store"
)

// maxGroupItems bounds the work items one group settles: a group is one
// transaction, and its locks are held until the commit.
const maxGroupItems = 400

// settler is the processing side's group commit. Each entity's goroutine
// prepares a page and hands it in; whoever finds no group being settled
// settles every page handed in meanwhile as one group
// (store.Pipeline.FlowApplyGroup), and again while more arrive. Nothing
// waits to gather a group: under load pages pile up while the previous
// group commits, and a lone page goes at once. On PostgreSQL a group
// shares its statements and its commit, which is where the database
// spends its time when many entities each have a little work; every page
// still gets its own answer, exactly as FlowApplyBatch would give it.
type settler struct {
	st store.Pipeline

	mu      sync.Mutex
	queue   []*settleReq
	leading bool
}

type settleReq struct {
	ps   []*store.FlowApplyParams
	out  store.FlowApplyOutcome
	done chan struct{}
}

// apply settles ps, the page of one leased entity, in the next group.
func (s *settler) apply(ctx context.Context, ps []*store.FlowApplyParams) ([]*store.FlowApplyResult, error) {
	r := &settleReq{ps: ps, done: make(chan struct{})}
	s.mu.Lock()
	s.queue = append(s.queue, r)
	lead := !s.leading
	s.leading = true
	s.mu.Unlock()
	if lead {
		s.lead(ctx)
	}
	<-r.done
	return r.out.Results, r.out.Err
}

// lead settles groups until none is waiting. The leader's own page is in
// the first group; it goes on leading while pages keep arriving, which
// costs its entity the time of those groups and saves a hand-over.
func (s *settler) lead(ctx context.Context) {
	for {
		s.mu.Lock()
		n, items := 0, 0
		for n < len(s.queue) && (n == 0 || items+len(s.queue[n].ps) <= maxGroupItems) {
			items += len(s.queue[n].ps)
			n++
		}
		group := s.queue[:n:n]
		s.queue = s.queue[n:]
		if n == 0 {
			s.leading = false
		}
		s.mu.Unlock()
		if n == 0 {
			return
		}
		subs := make([][]*store.FlowApplyParams, n)
		for i, r := range group {
			subs[i] = r.ps
		}
		outs := s.st.FlowApplyGroup(ctx, subs)
		for i, r := range group {
			r.out = outs[i]
			close(r.done)
		}
	}
}
