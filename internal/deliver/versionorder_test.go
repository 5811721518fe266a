package deliver_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// An older version whose call was in flight when a newer version was
// applied (applying supersedes only the effects waiting for a call) must
// never reach the destination after the newer one: when its call fails
// and it comes due again, it is superseded at its claim, not retried.
// Before, it was called again after the newer version had been.
func TestOlderVersionInFlightIsNotRetriedAfterANewerOne(t *testing.T) {
	for _, how := range []string{"retry", "resumed"} {
		t.Run(how, func(t *testing.T) {
			x := newWorld(t, setup{})
			r1 := x.order("o1", 1)
			// A worker claims r1: its call is in flight.
			claims, err := x.st.EffectClaim(x.ctx, &store.EffectClaimParams{Owner: "other", Now: x.clk.Now(), LeaseFor: time.Minute, Limit: 10})
			if err != nil || len(claims) != 1 || claims[0].ID != r1.ID {
				t.Fatalf("claim: %v %+v", err, claims)
			}
			r2 := x.order("o1", 2) // applied while r1 is submitting
			if got := x.get(r1.ID); got.State != store.EffectSubmitting {
				t.Fatalf("r1 is %s after r2 was applied, want still submitting", got.State)
			}
			switch how {
			case "retry":
				// The call failed and was settled to wait for a retry.
				if err := x.st.EffectSettle(x.ctx, &store.EffectSettleParams{EffectID: r1.ID, Token: claims[0].Token, Now: x.clk.Now(),
					Actor: "other", State: store.EffectRetryWait, AddAttempt: true, Class: store.ClassTransient, Reason: "HTTP 503",
					NextAttemptAt: x.clk.Now(), Attempt: &store.Attempt{StartedAt: x.clk.Now(), Status: 503, Class: store.ClassTransient}}); err != nil {
					t.Fatal(err)
				}
			case "resumed":
				// The worker died during the call: its lease runs out.
				x.clk.Advance(2 * time.Minute)
			}
			x.drain()
			x.wantState(x.get(r2.ID), store.EffectDone)
			got := x.get(r1.ID)
			x.wantState(got, store.EffectSuperseded)
			if !strings.Contains(got.Reason, "superseded by "+r2.EpisodeKey) {
				t.Fatalf("r1's reason %q does not name r2", got.Reason)
			}
			if n := x.dest.Calls(r1.EpisodeKey); n != 0 {
				t.Fatalf("r1 was called %d times after r2 was applied", n)
			}
		})
	}
}
