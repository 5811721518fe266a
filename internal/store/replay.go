package store

import (
	"context"
	"fmt"
	"time"
)

// ReplayTx is the statements of ReplayCreate.
type ReplayTx interface {
	// ReplayInsert records a replay (created at Now, its actor and
	// selection, no items yet) and returns its id.
	ReplayInsert(ctx context.Context, p *ReplayCreateParams) (int64, error)
	// WorkEnqueue creates, for each item, the work row of its route for
	// pass ReplayID, created at Now, unless the event has one for the
	// flow and pass, and the route's entity unless it exists. For each
	// pending row it creates, the entity counts one more pending item,
	// joins the back of the claim order when it had nothing pending
	// (not_before raised to Now: claims are first come, first served, so
	// an entity whose key sorts late is not starved by newer ones; a
	// retry's later not_before is kept), and advances its newest routed
	// order key, stamping behind_since when that makes an entity that was
	// caught up fall behind (revision_lag). A failed route (Failed set)
	// gets its row already settled as dead_lettered with the reason, and,
	// when the row is new, advances the newest key likewise and is
	// audited (dead_lettered, by Actor, RouteFailedDetail). Pending, when
	// set, gets each event that got a pending row (an answer, see Tx).
	WorkEnqueue(ctx context.Context, p *EnqueueParams) error
	// ReplayItems sets replay id's items to the number of work rows of
	// pass id among the events pks, and returns it.
	ReplayItems(ctx context.Context, id int64, pks []int64) (int64, error)
}

// EnqueueParams enqueues the work of routes for one pass.
type EnqueueParams struct {
	Now      time.Time
	ReplayID int64
	Actor    string
	Items    []EnqueueItem
	Pending  map[int64]bool
}

// EnqueueItem is one route of one event.
type EnqueueItem struct {
	EventPK int64
	// Source and EventID name the event in a failed route's audit row.
	Source, EventID string
	Route           Route
}

// ReplayCreate records a replay and enqueues a new pass of work for its
// routes in one transaction (see Pipeline). The routes' statements are
// the router's, so the transaction is the processing path's (TxProcess).
func (r *Rules) ReplayCreate(ctx context.Context, p *ReplayCreateParams) (int64, error) {
	var id int64
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		var err error
		if id, err = tx.ReplayInsert(ctx, p); err != nil {
			return fmt.Errorf("insert replay: %w", err)
		}
		q := &EnqueueParams{Now: p.Now, ReplayID: id, Actor: p.Actor}
		var pks []int64
		for _, d := range p.Decisions {
			for _, rt := range d.Routes {
				// A failed route is not replayed: it would fail again.
				if rt.Failed == "" {
					q.Items = append(q.Items, EnqueueItem{EventPK: d.EventPK, Route: rt})
					pks = append(pks, d.EventPK)
				}
			}
		}
		if err := tx.WorkEnqueue(ctx, q); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
		// The pass's work rows are exactly those enqueued now: the
		// replay id is new.
		n, err := tx.ReplayItems(ctx, id, pks)
		if err != nil {
			return fmt.Errorf("count replay items: %w", err)
		}
		return tx.Audit(ctx, &AuditInsertParams{At: p.Now, Actor: p.Actor, Action: actionReplay,
			Detail: fmt.Sprintf("replay %d: %d work items for %s", id, n, p.Selection)})
	})
	if err != nil {
		return 0, fmt.Errorf("create replay: %w", err)
	}
	return id, nil
}
