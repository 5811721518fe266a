// Package replay re-runs processing for stored events: it selects accepted
// events by source, flow, entity and time range, keeps their identities, and
// records a new replay attempt whose work goes through the same revision
// guard and effect ledger, so effects already in the ledger are not created
// again. Replay reads only the durable record, never a reconstruction.
//
// Run enqueues the replay in batches, so that neither the selection nor
// its work is ever held in memory whole; the flow engine of a running
// server processes it. Watch follows that processing through the store's
// counts of the replay's work and reports the outcome of its work items:
// applied, duplicate, stale, superseded or dead-lettered, and the effects
// they created.
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

// Store is what replay reads and writes: a replay is written in batches
// (see store.ReplayEnqueue), never held whole.
type Store interface {
	Reader
	ReplayBegin(ctx context.Context, p *store.ReplayCreateParams) (int64, error)
	ReplayEnqueue(ctx context.Context, id int64, p *store.ReplayCreateParams) (int64, error)
	ReplayFinish(ctx context.Context, id int64, p *store.ReplayCreateParams) error
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

// Item is one work item of a replay: one event into one flow.
type Item struct {
	Source  string
	EventID string
	Flow    string
	Entity  string
}

// Result reports what was enqueued. It holds counts only: the work items
// are in the store, which Watch asks.
type Result struct {
	ReplayID  int64
	Events    int
	WorkItems int
	// Skipped counts the selected events left out: still pending their
	// first processing (it runs anyway), or whose route into the selected
	// flow cannot be computed (already dead-lettered with the reason).
	Skipped int
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
	// BatchEvents is the most events one transaction of the replay
	// enqueues (default and at most store.ReplayBatchMost; at least one
	// page, 500): pages of stored events are gathered up to it. Fewer, larger batches take the
	// store's write lock less often, which matters when another process
	// (a running server) writes to the same SQLite file.
	BatchEvents int
}

// ErrNothingSelected is returned when the selection matches no work.
var ErrNothingSelected = errors.New("replay: the selection matches no stored event of any flow")

// pageSize is how many events one EventList call reads: a replay holds
// one page of events and bodies at a time, and the decisions (routes
// only) of one batch (Options.BatchEvents), whatever the number of events
// it selects.
const pageSize = 500

// Run enqueues a replay of the selection; the flow engine processes it.
func Run(ctx context.Context, st Store, router Router, sel Selection, now time.Time) (*Result, error) {
	return RunWith(ctx, st, router, sel, now, Options{})
}

// RunWith is Run with options. It reads the selection a page at a time
// and enqueues the work in batches of at most opts.BatchEvents events,
// each in a transaction of its own (the replay is recorded before the
// first, and marked planned and audited after the last), so its memory
// does not grow with the selection. The flow engine may process a batch as soon as it is in:
// processing part of a replay is what a replay of a smaller selection
// would do. When it stops between two batches (ctx ends, the store
// fails) the work enqueued so far stays and is processed, the replay
// stays unplanned, and RunWith returns the Result so far (ReplayID set)
// with the error; with nothing enqueued yet it returns a nil Result.
func RunWith(ctx context.Context, st Store, router Router, sel Selection, now time.Time, opts Options) (*Result, error) {
	selJSON, err := json.Marshal(sel)
	if err != nil {
		return nil, fmt.Errorf("replay: encode selection: %w", err)
	}
	actor := sel.Actor
	if actor == "" {
		actor = "replay"
	}
	batch := opts.BatchEvents
	if batch <= 0 || batch > store.ReplayBatchMost {
		batch = store.ReplayBatchMost
	}
	p := &store.ReplayCreateParams{Now: now, Actor: actor, Selection: string(selJSON)}
	res := &Result{}
	var items int64
	// flush enqueues the decisions gathered so far as one batch.
	var pending []*store.RouteDecision
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		if res.ReplayID == 0 {
			id, err := st.ReplayBegin(ctx, p)
			if err != nil {
				return err
			}
			res.ReplayID = id
		}
		p.Decisions = pending
		n, err := st.ReplayEnqueue(ctx, res.ReplayID, p)
		if err != nil {
			return err
		}
		items, pending = n, pending[:0]
		return nil
	}
	_, err = scanWork(ctx, st, router, sel, opts, 0, &res.Events, &res.WorkItems, &res.Skipped,
		func(_ []Item, ds []*store.RouteDecision) error {
			// A page is at most pageSize events: gather pages while the
			// next one still fits.
			pending = append(pending, ds...)
			if len(pending)+pageSize > batch {
				return flush()
			}
			return nil
		})
	if err == nil {
		err = flush()
	}
	p.Decisions = nil
	switch {
	case err != nil && res.ReplayID != 0:
		return res, fmt.Errorf("replay %d: stopped after enqueuing %d work items; they are processed, the rest of the selection is not enqueued: %w",
			res.ReplayID, items, err)
	case err != nil:
		return nil, fmt.Errorf("replay: %w", err)
	case res.ReplayID == 0:
		return nil, ErrNothingSelected
	}
	if err := st.ReplayFinish(ctx, res.ReplayID, p); err != nil {
		return res, fmt.Errorf("replay: %w", err)
	}
	// The store's count: the same route twice is one work item.
	res.WorkItems = int(items)
	return res, nil
}

// scanWork reads the stored events the selection names, a page at a
// time, and computes their routes into the selected flow and entity: the
// work a replay enqueues (Run) or would enqueue (Plan). It calls page
// with each page's work items and their decisions (each page's own: the
// slices are not kept), and counts the selected events, work items and
// skipped events into the counters. The receipt time bounds are read by
// the store; the flow and entity are the routes' as the router computes
// them now, so a repaired configuration is what decides. With maxScan > 0
// it stops after the page that reads the maxScan-th event and reports
// that it stopped (more events may match).
func scanWork(ctx context.Context, st Reader, router Router, sel Selection, opts Options, maxScan int,
	events, workItems, skipped *int, page func([]Item, []*store.RouteDecision) error) (bool, error) {
	scanned := 0
	after := int64(0)
	for {
		list, err := st.EventList(ctx, &store.EventListParams{Source: sel.Source, EventID: sel.EventID,
			ReceivedFrom: sel.From, ReceivedTo: sel.To, AfterPK: after, Limit: pageSize})
		if err != nil {
			return false, fmt.Errorf("list events: %w", err)
		}
		var items []Item
		var decisions []*store.RouteDecision
		for _, e := range list.Events {
			scanned++
			routes, skip, err := routesOf(ctx, st, router, sel, e)
			if err != nil {
				return false, err
			}
			if skip {
				*skipped++
			}
			if len(routes) == 0 {
				continue
			}
			decisions = append(decisions, &store.RouteDecision{EventPK: e.PK, Routes: routes})
			*events++
			*workItems += len(routes)
			for _, r := range routes {
				items = append(items, Item{Source: e.Source, EventID: e.EventID, Flow: r.Flow, Entity: r.Entity})
			}
		}
		if err := page(items, decisions); err != nil {
			return false, err
		}
		if opts.Progress != nil {
			opts.Progress(Progress{Scanned: scanned, Events: *events, WorkItems: *workItems, Skipped: *skipped})
		}
		if list.NextAfterPK == 0 {
			return false, nil
		}
		if maxScan > 0 && scanned >= maxScan {
			return true, nil
		}
		after = list.NextAfterPK
	}
}

// routesOf computes the routes of one listed event that a replay of sel
// takes: none for an event outside the time bounds, unrouted or without a
// stored delivery. skip says the event is selected but left out: still
// pending its first processing (it runs anyway), or a route into the
// selection failed and none is left.
func routesOf(ctx context.Context, st Reader, router Router, sel Selection, e *store.Event) ([]store.Route, bool, error) {
	if (!sel.From.IsZero() && e.ReceivedAt.Before(sel.From)) || (!sel.To.IsZero() && !e.ReceivedAt.Before(sel.To)) {
		return nil, false, nil
	}
	if e.Disposition == store.DispositionUnrouted {
		// No flow subscribed to it when it came: nothing to replay into.
		return nil, false, nil
	}
	ds, err := st.DeliveryList(ctx, &store.DeliveryListParams{Source: e.Source, EventID: e.EventID, Limit: 1})
	if err != nil {
		return nil, false, fmt.Errorf("read delivery of %s/%s: %w", e.Source, e.EventID, err)
	}
	if len(ds) == 0 {
		return nil, false, nil
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
		return nil, true, nil
	case len(routes) == 0:
		return nil, failed, nil
	}
	return routes, false, nil
}
