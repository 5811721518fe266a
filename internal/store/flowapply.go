package store

import (
	"context"
	"errors"
	"fmt"
)

// FlowApply settles one work item in one transaction (RunFlowApply); any
// error rolls the whole of it back.
func (r *Rules) FlowApply(ctx context.Context, p *FlowApplyParams) (*FlowApplyResult, error) {
	if p.Lease == nil {
		return nil, errors.New("flow apply: no lease")
	}
	var res *FlowApplyResult
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		var err error
		res, err = runFlowApply(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("flow apply %s/%s work %d: %w", p.Lease.Flow, p.Lease.Entity, p.WorkID, err)
	}
	return res, nil
}

// FlowApplyBatch settles several work items of one leased entity in one
// transaction (RunFlowApplyBatch).
func (r *Rules) FlowApplyBatch(ctx context.Context, ps []*FlowApplyParams) ([]*FlowApplyResult, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	for _, p := range ps {
		if p.Lease == nil {
			return nil, errors.New("flow apply: no lease")
		}
	}
	var out []*FlowApplyResult
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		var err error
		out, err = runFlowApplyBatch(ctx, tx, ps)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("flow apply %s/%s: %w", ps[0].Lease.Flow, ps[0].Lease.Entity, err)
	}
	return out, nil
}

// FlowApplyGroup settles the submissions in one transaction
// (RunFlowApplyGroup): a group of entities shares one commit, and on
// PostgreSQL its statements. When the group fails as a whole (one
// submission's error, or the database's), each submission is settled
// alone, so that one cannot fail another.
func (r *Rules) FlowApplyGroup(ctx context.Context, subs [][]*FlowApplyParams) []FlowApplyOutcome {
	out, _ := r.FlowApplyGroupClaim(ctx, subs, nil)
	return out
}

// FlowApplyGroupClaim is FlowApplyGroup, claiming due effects in the
// transaction that settles the group, claims[i] as EffectClaim would:
// the delivery worker of this process would otherwise claim the effects
// just written in a transaction of its own, one commit more between an
// event and its call. claimed[i] is what claims[i] took; nothing when the
// group was settled submission by submission after it failed as a whole.
func (r *Rules) FlowApplyGroupClaim(ctx context.Context, subs [][]*FlowApplyParams, claims []*EffectClaimParams) (out []FlowApplyOutcome, claimed [][]*ClaimedEffect) {
	out = make([]FlowApplyOutcome, len(subs))
	alone := func() []FlowApplyOutcome {
		for i, ps := range subs {
			out[i].Results, out[i].Err = r.FlowApplyBatch(ctx, ps)
		}
		return out
	}
	// A lone submission is a group of one when there are effects to
	// claim; without, FlowApplyBatch settles it as precisely.
	if len(subs) == 0 || len(subs) < 2 && len(claims) == 0 {
		return alone(), nil
	}
	for _, ps := range subs {
		if len(ps) == 0 || ps[0].Lease == nil {
			return alone(), nil // FlowApplyBatch answers each precisely
		}
	}
	var got []FlowApplyOutcome
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		var err error
		got, claimed, err = r.applyGroupClaim(ctx, tx, subs, claims)
		return err
	})
	if err != nil {
		if len(subs) > 1 {
			r.groupsAlone.Add(1)
		}
		return alone(), nil
	}
	copy(out, got)
	return out, claimed
}

// applyGroupClaim settles the submissions in tx (runFlowApplyGroup), each
// submission's own error naming its entity, inserting their effects
// already claimed where the claims would take them, then runs the claims
// where something may be left (flowclaim.go): the body of
// FlowApplyGroupClaim's transaction, and of a routing transaction that
// settles what it leased (settleInRouting).
func (r *Rules) applyGroupClaim(ctx context.Context, tx Tx, subs [][]*FlowApplyParams, claims []*EffectClaimParams) ([]FlowApplyOutcome, [][]*ClaimedEffect, error) {
	ic := newInsertClaims(claims, &r.insertedClaimed)
	got, err := runFlowApplyGroup(ctx, tx, subs, ic)
	if err != nil {
		return nil, nil, err
	}
	for i, o := range got {
		if o.Err != nil {
			l := subs[i][0].Lease
			got[i].Results, got[i].Err = nil, fmt.Errorf("flow apply %s/%s: %w", l.Flow, l.Entity, o.Err)
		}
	}
	claimed, err := ic.claim(ctx, tx)
	if err != nil {
		return nil, nil, fmt.Errorf("claim effects: %w", err)
	}
	return got, claimed, nil
}
