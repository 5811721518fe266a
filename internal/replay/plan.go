package replay

import (
	"context"
	"fmt"

	"github.com/hookledger/hookledger/internal/store"
)

// PlanStore is what Plan reads: the events, their bodies and the effect
// ledger. It writes nothing.
type PlanStore interface {
	Reader
	EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error)
}

// PlanOptions tune Plan.
type PlanOptions struct {
	// MaxEntities bounds the ledger lookups (one per flow entity the work
	// touches; default 2000). Work items past it are counted as Unchecked.
	MaxEntities int
	// Samples is how many work items the plan lists (default 50).
	Samples int
	// MaxScan bounds the stored events read (0: no bound). A plan that
	// reaches it says so (Truncated): more events may match, and a replay
	// of the same selection would do more than the plan counts.
	MaxScan int
	// Progress, when set, is called after each page of stored events.
	Progress func(Progress)
}

// Plan is a replay's dry run: the work it would enqueue and what the
// ledger already holds of it. A replay keeps every identity, so the
// effects a selected event caused before come back with the same episode
// keys and are not created again; only work whose event has no effect in
// the ledger yet may create one, and whether it does is the flow's
// decision when it processes it (a stale or duplicate event creates none).
type Plan struct {
	Events    int `json:"events"`
	WorkItems int `json:"work_items"`
	// Skipped counts selected events left out (see Result.Skipped).
	Skipped int `json:"skipped"`
	// Entities counts the flow entities the work touches.
	Entities int `json:"entities"`
	// InLedger counts the effects the selected events caused that are in
	// the ledger: the replay will not create them again. ByState splits
	// them by their state now.
	InLedger int                       `json:"in_ledger"`
	ByState  map[store.EffectState]int `json:"in_ledger_by_state"`
	// MayCreate counts the work items whose event has no effect in the
	// ledger for that flow and entity: processing them may create effects.
	MayCreate int `json:"may_create"`
	// Unchecked counts the work items past MaxEntities, whose ledger was
	// not read.
	Unchecked int `json:"unchecked"`
	// Samples are the first work items with what the ledger holds of each.
	Samples []PlanItem `json:"samples"`
	// Truncated says the plan stopped reading events at MaxScan: the
	// counts cover the events read so far only.
	Truncated bool `json:"truncated"`
}

// PlanItem is one work item of a plan.
type PlanItem struct {
	Item
	// InLedger counts the effects its event caused in this flow and
	// entity; -1 when the ledger was not read (Unchecked).
	InLedger int
}

type entityKey struct{ flow, entity string }

type eventKey struct{ source, eventID string }

// MakePlan computes the plan of a replay of sel without enqueuing
// anything: the same selection as Run, a page at a time, with one ledger
// read per flow entity. It returns ErrNothingSelected as Run would.
func MakePlan(ctx context.Context, st PlanStore, router Router, sel Selection, opts PlanOptions) (*Plan, error) {
	if opts.MaxEntities <= 0 {
		opts.MaxEntities = 2000
	}
	if opts.Samples <= 0 {
		opts.Samples = 50
	}
	p := &Plan{ByState: map[store.EffectState]int{}}
	// caused[entity][source/event id] lists the states of the effects an
	// event caused in that flow entity; seen counts the entities past
	// MaxEntities.
	caused := map[entityKey]map[eventKey][]store.EffectState{}
	seen := map[entityKey]bool{}
	truncated, err := scanWork(ctx, st, router, sel, Options{Progress: opts.Progress}, opts.MaxScan, &p.Events, &p.WorkItems, &p.Skipped,
		func(items []Item, _ []*store.RouteDecision) error {
			for _, it := range items {
				if err := p.count(ctx, st, it, caused, seen, opts); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("replay plan: %w", err)
	}
	if p.WorkItems == 0 && !truncated {
		return nil, ErrNothingSelected
	}
	p.Truncated = truncated
	p.Entities = len(caused) + len(seen)
	return p, nil
}

// count adds one work item to the plan, reading its entity's ledger the
// first time, up to MaxEntities entities.
func (p *Plan) count(ctx context.Context, st PlanStore, it Item, caused map[entityKey]map[eventKey][]store.EffectState,
	seen map[entityKey]bool, opts PlanOptions) error {
	k := entityKey{it.Flow, it.Entity}
	byEvent, read := caused[k]
	if !read {
		if len(caused) >= opts.MaxEntities {
			seen[k] = true
			p.Unchecked++
			p.sample(it, -1, opts.Samples)
			return nil
		}
		var err error
		if byEvent, err = ledgerOf(ctx, st, k); err != nil {
			return err
		}
		caused[k] = byEvent
	}
	states := byEvent[eventKey{it.Source, it.EventID}]
	if len(states) == 0 {
		p.MayCreate++
	}
	for _, s := range states {
		p.InLedger++
		p.ByState[s]++
	}
	p.sample(it, len(states), opts.Samples)
	return nil
}

func (p *Plan) sample(it Item, inLedger, most int) {
	if len(p.Samples) < most {
		p.Samples = append(p.Samples, PlanItem{Item: it, InLedger: inLedger})
	}
}

// ledgerOf reads one flow entity's effects, by the event that caused them.
func ledgerOf(ctx context.Context, st PlanStore, k entityKey) (map[eventKey][]store.EffectState, error) {
	out := map[eventKey][]store.EffectState{}
	after := int64(0)
	for {
		// States and causes only: the requests stay in the store.
		list, err := st.EffectList(ctx, &store.EffectListParams{Flow: k.flow, Entity: k.entity, AfterID: after, Limit: 1000,
			WithoutRequest: true})
		if err != nil {
			return nil, fmt.Errorf("effects of %s %s: %w", k.flow, k.entity, err)
		}
		for _, e := range list {
			ek := eventKey{e.Source, e.SourceEventID}
			out[ek] = append(out[ek], e.State)
			after = e.ID
		}
		if len(list) < 1000 {
			return out, nil
		}
	}
}
