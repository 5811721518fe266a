// Package replay re-runs processing for stored events: it selects accepted
// events by source, flow, entity and time range, keeps their identities, and
// records a new replay attempt whose work goes through the same revision
// guard and effect ledger, so effects already in the ledger are not created
// again. Replay reads only the durable record, never a reconstruction.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Store is what replay reads and writes.
type Store interface {
	EventList(ctx context.Context, p *store.EventListParams) (*store.EventListResult, error)
	DeliveryList(ctx context.Context, p *store.DeliveryListParams) ([]*store.Delivery, error)
	ReplayCreate(ctx context.Context, p *store.ReplayCreateParams) (int64, error)
}

// Router computes an event's routes (the flow engine).
type Router interface {
	Routes(ev *store.RoutableEvent) []store.Route
}

// Selection chooses what to replay. Empty fields do not filter; From and To
// bound the receipt time (From inclusive, To exclusive).
type Selection struct {
	Source string    `json:"source,omitempty"`
	Flow   string    `json:"flow,omitempty"`
	Entity string    `json:"entity,omitempty"`
	From   time.Time `json:"from,omitzero"`
	To     time.Time `json:"to,omitzero"`
	Actor  string    `json:"-"`
}

// Result reports what was enqueued.
type Result struct {
	ReplayID  int64
	Events    int
	WorkItems int
}

// ErrNothingSelected is returned when the selection matches no work.
var ErrNothingSelected = errors.New("replay: the selection matches no stored event of any flow")

// Run enqueues a replay of the selection; the flow engine processes it.
func Run(ctx context.Context, st Store, router Router, sel Selection, now time.Time) (*Result, error) {
	res := &Result{}
	var decisions []*store.RouteDecision
	after := int64(0)
	for {
		page, err := st.EventList(ctx, &store.EventListParams{Source: sel.Source, AfterPK: after, Limit: 500})
		if err != nil {
			return nil, fmt.Errorf("replay: list events: %w", err)
		}
		for _, e := range page.Events {
			if (!sel.From.IsZero() && e.ReceivedAt.Before(sel.From)) || (!sel.To.IsZero() && !e.ReceivedAt.Before(sel.To)) {
				continue
			}
			if e.Disposition == store.DispositionAccepted || e.Disposition == store.DispositionUnrouted {
				// Pending events are processed anyway; unrouted ones have
				// no flow to replay into.
				continue
			}
			ds, err := st.DeliveryList(ctx, &store.DeliveryListParams{Source: e.Source, EventID: e.EventID, Limit: 1})
			if err != nil {
				return nil, fmt.Errorf("replay: read delivery of %s/%s: %w", e.Source, e.EventID, err)
			}
			if len(ds) == 0 {
				continue
			}
			d := ds[0]
			ev := &store.RoutableEvent{
				PK: e.PK, Source: e.Source, EventID: e.EventID, Type: e.Type, Entity: e.Entity,
				Account: e.Account, OccurredAt: e.OccurredAt, ReceivedAt: e.ReceivedAt,
				CausationID: d.CausationID, Hop: d.Hop, Body: d.Body,
			}
			var routes []store.Route
			for _, r := range router.Routes(ev) {
				if r.Failed != "" || (sel.Flow != "" && r.Flow != sel.Flow) || (sel.Entity != "" && r.Entity != sel.Entity) {
					continue
				}
				routes = append(routes, r)
			}
			if len(routes) == 0 {
				continue
			}
			decisions = append(decisions, &store.RouteDecision{EventPK: e.PK, Routes: routes})
			res.Events++
			res.WorkItems += len(routes)
		}
		if page.NextAfterPK == 0 {
			break
		}
		after = page.NextAfterPK
	}
	if len(decisions) == 0 {
		return nil, ErrNothingSelected
	}
	selJSON, err := json.Marshal(sel)
	if err != nil {
		return nil, fmt.Errorf("replay: encode selection: %w", err)
	}
	actor := sel.Actor
	if actor == "" {
		actor = "replay"
	}
	id, err := st.ReplayCreate(ctx, &store.ReplayCreateParams{Now: now, Actor: actor, Selection: string(selJSON), Decisions: decisions})
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	res.ReplayID = id
	return res, nil
}
