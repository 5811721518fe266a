package store

import "testing"

// TestAuditDetails pins the wording both drivers write: the audit trail
// is read by people and searched by text, so a change must be deliberate.
func TestAuditDetails(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{SettleAction(EffectRetryWait), "effect_retry_wait"},
		{redriveDetail("k1", 2, 3), "k1: dead -> submitting: re-drive 2 of 3"},
		{resumedDetail("k1", EffectSubmitting), "k1: submitting -> submitting: resumed, outcome of the previous call to be reconciled"},
		{deadlineDeadDetail("k1", EffectRetryWait, "deadline passed"), "k1: retry_wait -> dead [permanent]: deadline passed"},
		{mismatchDetail("k1", "amount differs"), "k1: done -> needs_reconciliation [unknown_outcome]: amount differs"},
		{unroutedDetail("", "customer.updated"), `unrouted: no flow subscribes to type "customer.updated"`},
		{unroutedDetail("accepted", "customer.updated"), `accepted -> unrouted: no flow subscribes to type "customer.updated"`},
		{RouteFailedDetail("orders", "o1", "no entity"), "flow orders entity o1: route failed: no entity"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
