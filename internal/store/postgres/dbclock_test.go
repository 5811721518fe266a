package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

func TestDatabaseNow(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, pgtest.ServerURL(t), 2)
	if err != nil {
		t.Fatal(err)
	}
	first, err := s.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first.Location() != time.UTC {
		t.Errorf("DatabaseNow in %v, want UTC", first.Location())
	}
	// The test server runs on this host, so its clock agrees with ours.
	if d := time.Since(first); d > 5*time.Second || d < -5*time.Second {
		t.Errorf("database time %v is %v away from this host's", first, d)
	}
	// clock_timestamp() moves on between readings (now() would not inside
	// one transaction, and a pooled connection may reuse one).
	second, err := s.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !second.After(first) {
		t.Errorf("second reading %v not after the first %v", second, first)
	}
	s.Close()
	if _, err := s.DatabaseNow(ctx); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("reading a closed store: %v, want store.ErrUnavailable", err)
	}
}
