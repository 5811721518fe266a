package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// Two processes on one database prune one at a time: while another
// transaction holds the pruning lock a batch reports Busy and deletes
// nothing, and once it is released the batch runs.
func TestRetentionPruneOneProcessAtATime(t *testing.T) {
	url := pgtest.NewDatabase(t)
	a, b := open(t, url), open(t, url)
	ctx := context.Background()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	res, err := a.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r1", Source: "crm", EventID: "e1", Type: "t", Entity: "x", ReceivedAt: at,
		Headers: map[string]string{}, Body: []byte(`{}`)}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("InboxCommit: %v %v", err, res)
	}
	if err := a.EventRoute(ctx, &store.EventRouteParams{Now: at, Decisions: []*store.RouteDecision{{EventPK: res[0].Items[0].EventPK}}}); err != nil {
		t.Fatalf("EventRoute: %v", err)
	}
	p := &store.RetentionPruneParams{Now: at.AddDate(0, 2, 0), DefaultCutoff: at.AddDate(0, 1, 0)}

	tx, err := a.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var locked bool
	if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, pruneLockKey).Scan(&locked); err != nil || !locked {
		t.Fatalf("take the lock: %v %v", locked, err)
	}
	r, err := b.RetentionPrune(ctx, p)
	if err != nil || !r.Busy || r.Deleted() != 0 {
		t.Fatalf("prune beside a held lock = %+v, %v; want busy, nothing deleted", r, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r, err = b.RetentionPrune(ctx, p)
	if err != nil || r.Busy || r.Events != 1 || r.Deliveries != 1 {
		t.Fatalf("prune after release = %+v, %v; want the event and its delivery deleted", r, err)
	}
}
