package store

import (
	"context"
	"time"
)

// EntityHistory is the read behind the console's entity page.
type EntityHistory interface {
	// EntityHistory returns the work items of one entity of one flow in
	// business order (order key, then work id), whatever became of them:
	// applied, stale, duplicate, superseded, dead-lettered, resolved or
	// still pending, replays included, each with its event. It returns at
	// most Limit items (ClampLimit), the first in business order.
	EntityHistory(ctx context.Context, p *EntityHistoryParams) ([]*EntityHistoryItem, error)
}

// EntityHistoryParams names the entity whose history is read.
type EntityHistoryParams struct {
	Flow, Entity string
	Limit        int
}

// EntityHistoryItem is one work item of an entity's history.
type EntityHistoryItem struct {
	WorkID   int64
	OrderKey string
	// ReplayID is 0 for the first pass, else the replay that queued it.
	ReplayID int64
	// Disposition and Reason are the work item's, this flow's decision;
	// Disposition is "" while the item is pending.
	Disposition Disposition
	Reason      string
	// VersionSort is the sort key of the version the item applied ("" for
	// an item that applied nothing).
	VersionSort string
	// DoneAt is when the item settled; zero while pending.
	DoneAt time.Time

	EventPK    int64
	Source     string
	EventID    string
	Type       string
	OccurredAt time.Time // zero when the sender gave none
	ReceivedAt time.Time
}
