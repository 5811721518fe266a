package flow

import (
	"context"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/loop"
)

// The poll asks only for what no routing take or claim has just looked
// for: before any look it asks for both, right after a take that found
// every routable event it does not ask to route, and right after a claim
// that found every ready entity it does not ask to claim.
func TestPollAsksOnlyForWhatWasNotJustLookedFor(t *testing.T) {
	st, _ := openSQLite(t)
	ctx := context.Background()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	e := New(&config.Config{}, st, Options{})
	// The time looks are stamped in stands still: every look is fresh.
	e.loop = loop.New("processing", e.fill, loop.Options{OnPoll: e.pollWants,
		Monotonic: func() time.Duration { return time.Second }})
	e.pollWants()
	if !e.routeWanted.Load() || !e.claimWanted.Load() {
		t.Fatal("a poll before any look did not ask to route and to claim")
	}
	if _, err := e.fill(ctx); err != nil { // routes on its goroutine, claims here
		t.Fatal(err)
	}
	e.running.Wait()
	e.routeWanted.Store(false)
	e.claimWanted.Store(false)
	e.pollWants()
	if e.routeWanted.Load() {
		t.Error("a poll right after a routing take that found everything asked to route again")
	}
	if e.claimWanted.Load() {
		t.Error("a poll right after a claim that found every ready entity asked to claim again")
	}
}
