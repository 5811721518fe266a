package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestInboxGroupFastPath: a valid group with retries inside it
// commits on the fast path, not by the savepoint fallback that gives the
// same answers (so the conformance cases cannot tell them apart); a group
// with a refused submission falls back once.
func TestInboxGroupFastPath(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	var subs []*store.Submission
	for i := range 40 {
		// Every fourth submission repeats the one before it.
		id := i - i%4/3
		subs = append(subs, &store.Submission{Deliveries: []*store.DeliveryInput{{
			RequestID: fmt.Sprintf("r%d", i), Source: "shop", EventID: fmt.Sprintf("e%d", id), Type: "order.updated",
			Entity: "o1", ReceivedAt: at, Headers: map[string]string{"X": "y"}, Body: []byte(`{"n":1}`)}}})
	}
	if _, err := h.InboxCommit(ctx, &store.InboxCommitParams{Submissions: subs}); err != nil {
		t.Fatal(err)
	}
	if n := h.inboxCareful.Load(); n != 0 {
		t.Fatalf("a valid group was written submission by submission (%d fallbacks)", n)
	}
	subs[5].Deliveries[0].EventID = "" // refused by the events' check
	subs[5].Deliveries[0].RequestID = "bad"
	res, err := h.InboxCommit(ctx, &store.InboxCommitParams{Submissions: subs})
	if err != nil {
		t.Fatal(err)
	}
	if res[5].Err == nil || res[4].Err != nil || !res[4].Items[0].Duplicate {
		t.Fatalf("refused submission: %v; its neighbour: %+v", res[5].Err, res[4])
	}
	if n := h.inboxCareful.Load(); n != 1 {
		t.Fatalf("%d fallbacks, want 1 for the group with a refused submission", n)
	}
}

// TestBodyCompression: webhook bodies are compressed with LZ4 where the
// server has it (0013_body_compression), as every packaged PostgreSQL 14
// or later does.
func TestBodyCompression(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	var method string
	if err := h.pool.QueryRow(context.Background(), `SELECT attcompression::text FROM pg_attribute
		WHERE attrelid = 'deliveries'::regclass AND attname = 'body'`).Scan(&method); err != nil {
		t.Fatal(err)
	}
	if method != "l" {
		t.Fatalf("deliveries.body compression %q, want l (lz4)", method)
	}
}
