package publish

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/sqlite"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// The refresh loop drops expired Idempotency-Keys once a minute, not at
// every re-read.
func TestExpiredKeysPrunedOncePerMinute(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("p.yaml", []byte("publish:\n  idempotency_window: 10s\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	clk := clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	s := New(cfg, st, Options{Clock: clk})
	publishKey := func(key string) {
		t.Helper()
		m, fp, err := DecodeMessage([]byte(`{"type":"a.b","data":{"k":"` + key + `"}}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Publish(ctx, key, fp, m, "test"); err != nil {
			t.Fatal(err)
		}
	}
	// The window is 10 s here (see the config above).
	publishKey("k1")
	clk.Advance(11 * time.Second)
	if _, err := s.step(ctx); err != nil { // prunes k1
		t.Fatal(err)
	}
	publishKey("k2")
	clk.Advance(11 * time.Second) // k2 expired, but a minute has not passed
	if _, err := s.step(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := st.IdempotencyPrune(ctx, clk.Now(), 500); err != nil || n != 1 {
		t.Fatalf("expired keys left by the loop: %d, %v; want 1 (k2: k1 went at the first step, k2 waits for the minute)", n, err)
	}
}

// Re-reading unchanged endpoints keeps the worker's version, on both
// stores (their times come back from each driver alike), and any change,
// even within one tick of the clock, makes a new one.
func TestRefreshVersion(t *testing.T) {
	// PostgreSQL last: without it that part skips, after SQLite ran.
	for _, open := range []func() string{
		func() string { return "sqlite:" + filepath.Join(t.TempDir(), "v.db") },
		func() string { return pgtest.NewDatabase(t) },
	} {
		url := open()
		ctx := context.Background()
		st, err := storeopen.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if _, err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Parse("p.yaml", []byte("{}"), func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatal(err)
		}
		s := New(cfg, st, Options{Clock: clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))})
		id, u := "e1", "https://e1.example/hooks"
		if _, err := s.Create(ctx, &EndpointInput{ID: &id, URL: &u}, "test"); err != nil {
			t.Fatal(err)
		}
		v1, _ := s.RuntimeDestinations()
		for range 3 {
			if err := s.Refresh(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if v, _ := s.RuntimeDestinations(); v != v1 {
			t.Fatalf("%s: version %d after re-reading nothing new, want %d", url[:6], v, v1)
		}
		u2 := "https://e1.example/other"
		if _, err := s.Update(ctx, id, &EndpointInput{URL: &u2}, "test"); err != nil { // same tick: the clock stands still
			t.Fatal(err)
		}
		v2, ds := s.RuntimeDestinations()
		if v2 == v1 || len(ds) != 1 || ds[0].BaseURL != u2 {
			t.Fatalf("%s: after a change in the same tick: version %d (was %d), destinations %+v", url[:6], v2, v1, ds)
		}
	}
}
