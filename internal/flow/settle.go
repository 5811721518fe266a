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
//
// With a Handoff, the transaction also claims the effects it writes for
// this process's delivery worker (store.Pipeline.FlowApplyGroupClaim).
func newSettler(st store.Pipeline, h Handoff) *groupcommit.Batcher[[]*store.FlowApplyParams, store.FlowApplyOutcome] {
	settle := st.FlowApplyGroup
	if h != nil {
		settle = func(ctx context.Context, subs [][]*store.FlowApplyParams) []store.FlowApplyOutcome {
			effects := effectsByDestination(subs)
			if len(effects) == 0 {
				return st.FlowApplyGroup(ctx, subs)
			}
			claims := h.Reserve(effects)
			out, claimed := st.FlowApplyGroupClaim(ctx, subs, claims)
			h.Take(claims, claimed, effects)
			return out
		}
	}
	return groupcommit.New(settle, func(ps []*store.FlowApplyParams) int { return len(ps) }, maxGroupItems)
}

// Handoff is this process's delivery worker, as processing hands it the
// effects it writes (deliver.Worker).
type Handoff interface {
	// Reserve promises call slots for a group's effects (how many per
	// destination) and returns the claims to run with the group.
	Reserve(effects map[string]int) []*store.EffectClaimParams
	// Take starts the calls of what the claims took, gives back the
	// rest, and wakes the worker's own claim where effects may be left.
	Take(claims []*store.EffectClaimParams, claimed [][]*store.ClaimedEffect, effects map[string]int)
}

// effectsByDestination counts the effects a group would write, per
// destination.
func effectsByDestination(subs [][]*store.FlowApplyParams) map[string]int {
	var out map[string]int
	for _, ps := range subs {
		for _, p := range ps {
			for _, e := range p.Effects {
				if out == nil {
					out = map[string]int{}
				}
				out[e.Destination]++
			}
		}
	}
	return out
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
