package sim

import (
	"context"
	"sync"

	"github.com/hookledger/hookledger/internal/store"
)

// orderWatch wraps the store every engine, zombie and replay of a run uses
// and checks business order while it happens (OR01): when an entity's work
// is listed, its pending events are known, and each one applied must be the
// first in business order of those still pending. An engine that took
// them in arrival order would still never apply an old revision over a
// newer one (the revision guard settles the old one stale), so checking
// only what ends up applied cannot tell; but the stale event's effects
// (the confirmation mail of r2 when r3 arrived first) would never happen
// although the event was waiting when r3 was applied. That is the
// violation recorded here.
type orderWatch struct {
	simStore
	r *run

	mu      sync.Mutex
	listed  map[string][]*store.WorkItem // flow\x00entity: the latest listing
	settled map[int64]bool               // work ids settled by a successful apply
	// existing counts effects an apply asked for whose episode key the
	// ledger already held (kept once, not inserted again).
	existing int
}

func newOrderWatch(st simStore, r *run) *orderWatch {
	return &orderWatch{simStore: st, r: r, listed: map[string][]*store.WorkItem{}, settled: map[int64]bool{}}
}

func (o *orderWatch) WorkListPending(ctx context.Context, p *store.WorkListPendingParams) ([]*store.WorkItem, error) {
	items, err := o.simStore.WorkListPending(ctx, p)
	if err == nil {
		o.mu.Lock()
		o.listed[p.Flow+"\x00"+p.Entity] = items
		o.mu.Unlock()
	}
	return items, err
}

func (o *orderWatch) WorkListPendingGroup(ctx context.Context, ps []*store.WorkListPendingParams) ([][]*store.WorkItem, error) {
	out, err := o.simStore.WorkListPendingGroup(ctx, ps)
	if err == nil {
		o.mu.Lock()
		for i, p := range ps {
			o.listed[p.Flow+"\x00"+p.Entity] = out[i]
		}
		o.mu.Unlock()
	}
	return out, err
}

func (o *orderWatch) FlowApply(ctx context.Context, p *store.FlowApplyParams) (*store.FlowApplyResult, error) {
	res, err := o.simStore.FlowApply(ctx, p)
	if err != nil {
		// A fenced or failed apply settled nothing; its caller reports it.
		return res, err
	}
	o.record(p, res)
	return res, err
}

// FlowApplyBatch and FlowApplyGroup are watched item by item, in the
// order each page settles its items.
func (o *orderWatch) FlowApplyBatch(ctx context.Context, ps []*store.FlowApplyParams) ([]*store.FlowApplyResult, error) {
	out, err := o.simStore.FlowApplyBatch(ctx, ps)
	if err == nil {
		for i, p := range ps {
			o.record(p, out[i])
		}
	}
	return out, err
}

func (o *orderWatch) FlowApplyGroup(ctx context.Context, subs [][]*store.FlowApplyParams) []store.FlowApplyOutcome {
	outs := o.simStore.FlowApplyGroup(ctx, subs)
	for si, ps := range subs {
		if outs[si].Err != nil {
			continue
		}
		for i, p := range ps {
			o.record(p, outs[si].Results[i])
		}
	}
	return outs
}

// record checks one settled item against the entity's latest listing.
func (o *orderWatch) record(p *store.FlowApplyParams, res *store.FlowApplyResult) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.existing += res.EffectsExisting
	key := p.Lease.Flow + "\x00" + p.Lease.Entity
	var this *store.WorkItem
	for _, it := range o.listed[key] {
		if it.ID == p.WorkID {
			this = it
		}
	}
	if this != nil {
		for _, it := range o.listed[key] {
			if it.ID != this.ID && !o.settled[it.ID] && it.OrderKey < this.OrderKey {
				o.r.failf("%s/%s: event %s applied (%s) while event %s, earlier in business order, was already waiting: business order broken (OR01)",
					p.Lease.Flow, p.Lease.Entity, this.Event.EventID, res.Disposition, it.Event.EventID)
			}
		}
	}
	o.settled[p.WorkID] = true
}
