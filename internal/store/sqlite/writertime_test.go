package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The writer's account grows with every shared write transaction, and the
// commit's share of it is part of the whole: a commit counted outside the
// busy time, or not at all, would make the exported rate lie about
// whether writes queue.
func TestWriterTimeCountsTransactionsAndCommits(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "writer.db"))
	busy0, commit0 := s.WriterTime()
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	write := func(n int) {
		t.Helper()
		err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
			for range n {
				if err := (txn{tx}).Audit(ctx, &store.AuditInsertParams{At: at, Actor: "test", Action: "note", Detail: "x"}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	write(1)
	busy1, commit1 := s.WriterTime()
	if commit1 <= commit0 || busy1 <= busy0 {
		t.Fatalf("after a write: busy %v -> %v, commit %v -> %v; want both to grow", busy0, busy1, commit0, commit1)
	}
	if commit1 > busy1 {
		t.Fatalf("commit %v is more than the busy time %v it is part of", commit1, busy1)
	}
	write(200)
	busy2, commit2 := s.WriterTime()
	if busy2 <= busy1 || commit2 <= commit1 || commit2 > busy2 {
		t.Fatalf("after a second write: busy %v -> %v, commit %v -> %v", busy1, busy2, commit1, commit2)
	}
	// The statements before the commit are counted too, not only the commit.
	if busy2-busy1 <= commit2-commit1 {
		t.Fatalf("the second transaction's busy time %v is not more than its commit %v", busy2-busy1, commit2-commit1)
	}
}
