package store

import (
	"context"
	"fmt"
	"time"
)

// A replay may select millions of events, so it is written in batches,
// each in a transaction of its own, and never held in memory whole:
// ReplayBegin records the replay (not planned yet), ReplayEnqueue enqueues
// the work of at most ReplayBatchMost events and adds it to the replay's
// items, and ReplayFinish marks it planned and audits it. What stays
// atomic is one batch: its work rows and the items count that includes
// them commit together, so at every moment the replay's items are exactly
// its work rows. Work is processed as soon as its batch commits; that is
// safe because a replay keeps every identity, so processing part of one
// is what a replay of a smaller selection would do. A replay interrupted
// between two batches (a crash, a store failure, Ctrl-C) stays unplanned:
// its started audit row has no "replay" row after it, its enqueued work is
// processed, and the rest of the selection is not enqueued; replaying the
// selection again enqueues all of it in a new pass, which creates no
// effect twice.

// ReplayBatchMost is the most events ReplayEnqueue takes in one batch.
const ReplayBatchMost = 5000

// Audit actions of a replay: actionReplay (effect_rules.go) once it is
// planned, with its items; actionReplayStarted when it begins.
const actionReplayStarted = "replay_started"

// ReplayTx is the statements of a replay.
type ReplayTx interface {
	// ReplayInsert records a replay (created at Now, its actor and
	// selection, no items yet, not planned) with the largest effect id
	// now as its effect floor, and returns its id.
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
	// ReplayItems adds to replay id's items the number of work rows of
	// pass id among the events pks (a batch's events, none of them in an
	// earlier batch), and returns the new total.
	ReplayItems(ctx context.Context, id int64, pks []int64) (int64, error)
	// ReplayPlanned marks replay id planned and returns its items.
	ReplayPlanned(ctx context.Context, id int64) (int64, error)
	// ReplayCounts reads replay id: whether it is planned, its items, its
	// work rows settled so far by disposition (those whose disposition is
	// set), and the effects its work created: those after its effect
	// floor whose source event, flow and entity are one of its work
	// rows'. It returns nil when no such replay exists.
	ReplayCounts(ctx context.Context, id int64) (*ReplayProgress, error)
}

// ReplayProgress is what a replay has come to, counted in the store.
type ReplayProgress struct {
	// Planned is false while the replay is being enqueued, and for good
	// when that was interrupted.
	Planned bool
	Items   int64
	// Settled counts the replay's settled work items by disposition.
	Settled        map[Disposition]int64
	EffectsCreated int64
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
// routes in one transaction (see Pipeline): ReplayBegin, ReplayEnqueue
// and ReplayFinish at once, for a selection small enough to hold (any
// number of decisions). The routes' statements are the router's, so the
// transaction is the processing path's (TxProcess).
func (r *Rules) ReplayCreate(ctx context.Context, p *ReplayCreateParams) (int64, error) {
	var id int64
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		var err error
		if id, err = replayBegin(ctx, tx, p); err != nil {
			return err
		}
		if _, err := replayEnqueue(ctx, tx, id, p); err != nil {
			return err
		}
		return replayFinish(ctx, tx, id, p)
	})
	if err != nil {
		return 0, fmt.Errorf("create replay: %w", err)
	}
	return id, nil
}

// ReplayBegin records a replay, not planned yet and with no work, and
// audits its start; p.Decisions is not read.
func (r *Rules) ReplayBegin(ctx context.Context, p *ReplayCreateParams) (int64, error) {
	var id int64
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		var err error
		id, err = replayBegin(ctx, tx, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("begin replay: %w", err)
	}
	return id, nil
}

// ReplayEnqueue enqueues one batch of replay id's work (p.Decisions, at
// most ReplayBatchMost events, none of them in an earlier batch) and
// adds it to the replay's items, in one transaction; it returns the
// replay's items so far.
func (r *Rules) ReplayEnqueue(ctx context.Context, id int64, p *ReplayCreateParams) (int64, error) {
	if len(p.Decisions) > ReplayBatchMost {
		return 0, fmt.Errorf("enqueue replay %d: %d events in one batch, at most %d", id, len(p.Decisions), ReplayBatchMost)
	}
	var n int64
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		var err error
		n, err = replayEnqueue(ctx, tx, id, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("enqueue replay %d: %w", id, err)
	}
	return n, nil
}

// ReplayFinish marks replay id planned and audits it with its items.
func (r *Rules) ReplayFinish(ctx context.Context, id int64, p *ReplayCreateParams) error {
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		return replayFinish(ctx, tx, id, p)
	})
	if err != nil {
		return fmt.Errorf("finish replay %d: %w", id, err)
	}
	return nil
}

// ReplayProgress counts what replay id has come to; nil when no such
// replay exists.
func (r *Rules) ReplayProgress(ctx context.Context, id int64) (*ReplayProgress, error) {
	var out *ReplayProgress
	err := r.db.InTx(ctx, TxRead, func(ctx context.Context, tx Tx) error {
		var err error
		out, err = tx.ReplayCounts(ctx, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("replay %d progress: %w", id, err)
	}
	return out, nil
}

func replayBegin(ctx context.Context, tx Tx, p *ReplayCreateParams) (int64, error) {
	id, err := tx.ReplayInsert(ctx, p)
	if err != nil {
		return 0, fmt.Errorf("insert replay: %w", err)
	}
	if err := tx.Audit(ctx, &AuditInsertParams{At: p.Now, Actor: p.Actor, Action: actionReplayStarted,
		Detail: fmt.Sprintf("replay %d: started for %s", id, p.Selection)}); err != nil {
		return 0, err
	}
	return id, nil
}

func replayEnqueue(ctx context.Context, tx Tx, id int64, p *ReplayCreateParams) (int64, error) {
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
		return 0, fmt.Errorf("enqueue: %w", err)
	}
	// The batch's work rows are exactly those enqueued now: its events
	// are in no earlier batch of this replay.
	n, err := tx.ReplayItems(ctx, id, pks)
	if err != nil {
		return 0, fmt.Errorf("count replay items: %w", err)
	}
	return n, nil
}

func replayFinish(ctx context.Context, tx Tx, id int64, p *ReplayCreateParams) error {
	n, err := tx.ReplayPlanned(ctx, id)
	if err != nil {
		return fmt.Errorf("mark replay planned: %w", err)
	}
	return tx.Audit(ctx, &AuditInsertParams{At: p.Now, Actor: p.Actor, Action: actionReplay,
		Detail: fmt.Sprintf("replay %d: %d work items for %s", id, n, p.Selection)})
}
