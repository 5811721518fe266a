package publish

import (
	"net/http"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Deliveries in flight together that each fail for good each decide to
// disable the endpoint from the snapshot they read, which still shows it
// enabled: it is disabled once, and its owner told once.
func TestConcurrentFailuresDisableOnce(t *testing.T) { eachStore(t, testConcurrentFailuresDisableOnce) }

func testConcurrentFailuresDisableOnce(t *testing.T, storeURL string) {
	e := newEnv(t, storeURL, "{}")
	e.create("partner", "https://partner.example/hooks")
	seen := e.s.endpoint("partner") // what both deliveries read
	e.s.delivered(e.ctx, "partner", http.StatusGone, true)
	e.clk.Advance(time.Second)
	e.s.disable(e.ctx, seen, "it answered 410 Gone at "+e.clk.Now().Format(time.RFC3339))
	if n := len(e.notifications()); n != 1 {
		t.Fatalf("%d notifications, want 1: %+v", n, e.notifications())
	}
	if v := e.counter(e.s.m.disabled); v != 1 {
		t.Fatalf("hookledger_endpoints_disabled_total = %v, want 1", v)
	}
	rows, err := e.st.AuditList(e.ctx, &store.AuditListParams{Action: store.ActionEndpointDisabled, Limit: 10})
	if err != nil || len(rows) != 1 {
		t.Fatalf("endpoint_disabled audit rows %d (%v), want 1", len(rows), err)
	}
	if ep := e.stored("partner"); ep.Enabled || !ep.DisabledAt.Equal(t0) {
		t.Fatalf("partner enabled %v, disabled at %v; want disabled at the first 410 (%v)", ep.Enabled, ep.DisabledAt, t0)
	}
}
