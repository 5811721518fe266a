package deliver

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// The poll claims only when no claim has just found every due effect
// there was room for: before any claim it asks for one, right after a
// claim that found everything it does not.
func TestPollClaimsOnlyWhenNoClaimJustLooked(t *testing.T) {
	ctx := context.Background()
	cfg, err := config.Parse("d.yaml", []byte("destinations:\n  - name: crm\n    base_url: https://crm.example\n"),
		func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w, err := New(cfg, st, Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The time looks are stamped in stands still: every look is fresh.
	w.loop = loop.New("delivery", w.fill, loop.Options{OnPoll: w.pollWants,
		Monotonic: func() time.Duration { return time.Second }})
	w.pollWants()
	if !w.claimWanted.Swap(false) {
		t.Fatal("a poll before any claim did not ask to claim")
	}
	if _, more, err := w.claim(ctx); err != nil || more {
		t.Fatalf("claim on an empty ledger: more %v, %v", more, err)
	}
	w.pollWants()
	if w.claimWanted.Load() {
		t.Error("a poll right after a claim that found every due effect asked to claim again")
	}
}
