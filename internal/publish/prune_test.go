package publish

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store/sqlite"
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
