package flow

import (
	"context"

	"github.com/hookledger/hookledger/internal/groupcommit"
	"github.com/hookledger/hookledger/internal/store"
)

// Limits of one group: a settle group is one transaction, whose locks are
// held until the commit; a list group is one query.
const (
	maxGroupItems = 400
	maxListGroup  = 64
)

// newSettler groups the pages of concurrent entities into shared
// transactions (store.Pipeline.FlowApplyGroup). On PostgreSQL a group
// shares its statements and its commit, which is where the database
// spends its time when many entities each have a little work; every page
// still gets exactly the answer FlowApplyBatch would give it.
func newSettler(st store.Pipeline) *groupcommit.Batcher[[]*store.FlowApplyParams, store.FlowApplyOutcome] {
	return groupcommit.New(st.FlowApplyGroup, func(ps []*store.FlowApplyParams) int { return len(ps) }, maxGroupItems)
}

// listOutcome is one entity's listing.
type listOutcome struct {
	items []*store.WorkItem
	err   error
}

// newLister groups concurrent entities' listings of pending work into one
// query (store.Pipeline.WorkListPendingGroup).
func newLister(st store.Pipeline) *groupcommit.Batcher[*store.WorkListPendingParams, listOutcome] {
	return groupcommit.New(
		func(ctx context.Context, ps []*store.WorkListPendingParams) []listOutcome {
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
		func(*store.WorkListPendingParams) int { return 1 }, maxListGroup)
}
