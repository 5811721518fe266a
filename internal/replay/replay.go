// Package replay re-runs processing for stored events: it selects accepted
// events by source, flow, entity and time range, keeps their identities, and
// records a new replay attempt whose work goes through the same revision
// guard and effect ledger, so effects already in the ledger are not created
// again. Replay reads only the durable record, never a reconstruction.
//
// Run enqueues the replay; the flow engine of a running server processes
// it. Watch follows that processing through the audit trail and reports
// the outcome of each work item: applied, duplicate, stale, superseded or
// dead-lettered, and the effects it created.
package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Reader is what selecting a replay's work reads: the stored events and
// their bodies.
type Reader interface {
	EventList(ctx context.Context, p *store.EventListParams) (*store.EventListResult, error)
	DeliveryList(ctx context.Context, p *store.DeliveryListParams) ([]*store.Delivery, error)
}

// Store is what replay reads and writes.
type Store interface {
	Reader
	ReplayCreate(ctx context.Context, p *store.ReplayCreateParams) (int64, error)
}

// Router computes an event's routes (the flow engine).
type Router interface {
	Routes(ev *store.RoutableEvent) []store.Route
}

// Selection chooses what to replay. Empty fields do not filter; From and To
// bound the receipt time (From inclusive, To exclusive).
type Selection struct {
	Source string `json:"source,omitempty"`
	// EventID selects one event (of Source): the event page's replay of a
	// dead letter.
	EventID string    `json:"event_id,omitempty"`
	Flow    string    `json:"flow,omitempty"`
	Entity  string    `json:"entity,omitempty"`
	From    time.Time `json:"from,omitzero"`
	To      time.Time `json:"to,omitzero"`
	Actor   string    `json:"-"`
}

// Item is one work item a replay enqueued: one event into one flow.
type Item struct {
	Source  string
	EventID string
	Flow    string
	Entity  string
}

// Result reports what was enqueued.
type Result struct {
	ReplayID  int64
	Events    int
	WorkItems int
	// Skipped counts the selected events left out: still pending their
	// first processing (it runs anyway), or whose route into the selected
	// flow cannot be computed (already dead-lettered with the reason).
	Skipped int
	// Items are the enqueued work items, for Watch.
	Items []Item
}

// Progress is reported while Run reads the stored events.
type Progress struct {
	Scanned   int // events read so far
	Events    int // events selected for replay so far
	WorkItems int
	Skipped   int
}

// Options tune RunWith.
type Options struct {
	// Progress, when set, is called after each page of stored events.
	Progress func(Progress)
}

// ErrNothingSelected is returned when the selection matches no work.
var ErrNothingSelected = errors.New("replay: the selection matches no stored event of any flow")

// pageSize is how many events one EventList call reads.
const pageSize = 500

// Run enqueues a replay of the selection; the flow engine processes it.
func Run(ctx context.Context, st Store, router Router, sel Selection, now time.Time) (*Result, error) {
	return RunWith(ctx, st, router, sel, now, Options{})
}

// RunWith is Run with progress reporting.
func RunWith(ctx context.Context, st Store, router Router, sel Selection, now time.Time, opts Options) (*Result, error) {
	res, decisions, _, err := selectWork(ctx, st, router, sel, opts, 0)
	if err != nil {
		return nil, err
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

// selectWork reads the stored events the selection names and computes
// their routes into the selected flow and entity: the work a replay
// enqueues (Run) or would enqueue (Plan). The receipt time bounds are read
// by the store; the flow and entity are the routes' as the router computes
// them now, so a repaired configuration is what decides. With maxScan > 0
// it stops after the page that reads the maxScan-th event and reports
// that it stopped (more events may match).
func selectWork(ctx context.Context, st Reader, router Router, sel Selection, opts Options, maxScan int) (*Result, []*store.RouteDecision, bool, error) {
	res := &Result{}
	var decisions []*store.RouteDecision
	scanned := 0
	after := int64(0)
	for {
		page, err := st.EventList(ctx, &store.EventListParams{Source: sel.Source, EventID: sel.EventID,
			ReceivedFrom: sel.From, ReceivedTo: sel.To, AfterPK: after, Limit: pageSize})
		if err != nil {
			return nil, nil, false, fmt.Errorf("replay: list events: %w", err)
		}
		for _, e := range page.Events {
			scanned++
			if (!sel.From.IsZero() && e.ReceivedAt.Before(sel.From)) || (!sel.To.IsZero() && !e.ReceivedAt.Before(sel.To)) {
				continue
			}
			if e.Disposition == store.DispositionUnrouted {
				// No flow subscribed to it when it came: nothing to
				// replay into.
				continue
			}
			ds, err := st.DeliveryList(ctx, &store.DeliveryListParams{Source: e.Source, EventID: e.EventID, Limit: 1})
			if err != nil {
				return nil, nil, false, fmt.Errorf("replay: read delivery of %s/%s: %w", e.Source, e.EventID, err)
			}
			if len(ds) == 0 {
				continue
			}
			d := ds[0]
			ev := &store.RoutableEvent{
				PK: e.PK, Source: e.Source, EventID: e.EventID, Type: e.Type, Entity: e.Entity,
				Account: e.Account, OccurredAt: e.OccurredAt, ReceivedAt: e.ReceivedAt,
				CausationID: d.CausationID, Hop: d.Hop, Body: d.Body, ContentType: d.Headers["Content-Type"],
			}
			var routes []store.Route
			failed := false
			for _, r := range router.Routes(ev) {
				if (sel.Flow != "" && r.Flow != sel.Flow) || (sel.Entity != "" && r.Entity != sel.Entity) {
					continue
				}
				if r.Failed != "" {
					failed = true
					continue
				}
				routes = append(routes, r)
			}
			switch {
			case e.Disposition == store.DispositionAccepted && (len(routes) > 0 || failed):
				// Pending events are processed anyway.
				res.Skipped++
				continue
			case len(routes) == 0:
				if failed {
					res.Skipped++
				}
				continue
			}
			decisions = append(decisions, &store.RouteDecision{EventPK: e.PK, Routes: routes})
			res.Events++
			res.WorkItems += len(routes)
			for _, r := range routes {
				res.Items = append(res.Items, Item{Source: e.Source, EventID: e.EventID, Flow: r.Flow, Entity: r.Entity})
			}
		}
		if opts.Progress != nil {
			opts.Progress(Progress{Scanned: scanned, Events: res.Events, WorkItems: res.WorkItems, Skipped: res.Skipped})
		}
		if page.NextAfterPK == 0 {
			break
		}
		if maxScan > 0 && scanned >= maxScan {
			return res, decisions, true, nil
		}
		after = page.NextAfterPK
	}
	return res, decisions, false, nil
}
