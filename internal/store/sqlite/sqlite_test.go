package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storetest"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Exercise(t, storetest.Opener{
		Name: "sqlite (file)",
		Open: func(t *testing.T) store.Store {
			return open(t, filepath.Join(t.TempDir(), "sub", "hookledger.db"))
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return open(t, s.(*Store).path)
		},
	})
}

func TestPragmas(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	var mode string
	var sync int
	if err := s.writer.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := s.writer.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 {
		t.Fatalf("journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
	if n := s.writer.Stats().MaxOpenConnections; n != 1 {
		t.Fatalf("writer pool allows %d connections, want exactly 1", n)
	}
}

// Unique violations are recognised by SQLite's extended result code.
func TestUniqueViolationByCode(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "u.db"))
	_, err := s.writer.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (1, 'again', 0)`)
	if err == nil {
		t.Fatal("duplicate version inserted")
	}
	wrapped := wrapErr("insert", err)
	if !errors.Is(wrapped, store.ErrConflict) {
		t.Fatalf("unique violation not classified as conflict: %v", err)
	}
	_, err = s.writer.Exec(`INSERT INTO nosuchtable VALUES (1)`)
	if err == nil || errors.Is(wrapErr("insert", err), store.ErrConflict) {
		t.Fatalf("other errors must not be conflicts: %v", err)
	}
}

// Writes racing Close must each get an error, never wait forever for a
// shared transaction that will not run.
func TestWritesAfterCloseFail(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "c.db"))
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	const n = 200
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := s.EntityClaim(context.Background(), &store.EntityClaimParams{Owner: "w", Now: time.Unix(0, 0), LeaseFor: time.Minute, Limit: 1})
			errs <- err
		}()
	}
	// A generous bound that only a hang exceeds: this is not a timing test.
	deadline := time.After(time.Minute)
	for i := range n {
		select {
		case err := <-errs:
			if err == nil {
				t.Fatalf("write %d after Close succeeded", i)
			}
		case <-deadline:
			t.Fatalf("%d of %d writes after Close still waiting: they would never return", n-i, n)
		}
	}
}

// A shared write transaction has a deadline: a caller's statement that
// never returns (a lock held elsewhere, a dying disk) ends with an error
// at the deadline instead of holding the only writer, and every write
// queued behind it, forever; the writer serves the next batch afterwards.
func TestSharedWriteTransactionHasADeadline(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "d.db"))
	s.batchDeadline = 200 * time.Millisecond
	stuck := make(chan error, 1)
	go func() {
		stuck <- s.inTx(context.Background(), func(ctx context.Context, tx *wtx) error {
			if _, ok := ctx.Deadline(); !ok {
				return errors.New("the job's context has no deadline")
			}
			<-ctx.Done() // a statement that only the deadline ends
			return ctx.Err()
		})
	}()
	select {
	case err := <-stuck:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stuck job ended with %v, want its deadline", err)
		}
	case <-time.After(time.Minute): // only a hang reaches this bound
		t.Fatal("a stuck job held the shared transaction for a minute: no deadline")
	}
	s.batchDeadline = defaultBatchDeadline
	if err := s.ProbeWrite(context.Background(), time.Unix(0, 0)); err != nil {
		t.Fatalf("the writer after a deadline: %v", err)
	}
}
