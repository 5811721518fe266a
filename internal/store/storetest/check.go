package storetest

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// healthy is a store in which every invariant holds, with a near miss of
// each: events pending in both visible ways, and done effects with each
// kind of evidence.
type healthy struct {
	*outc
	waiting             int64 // accepted, not routed yet
	routedPending       int64 // accepted, routed, its work item pending
	success, recon      *store.Effect
	stored, lookup      *store.Effect
	approved            *store.Effect
	successEntity       string
	waitingID, routedID string
}

const reconciledReason = "reconciled: the destination already holds the effect"

func newHealthy(t *testing.T, o Opener) *healthy {
	f := &healthy{outc: newOutc(t, o)}
	es := f.seed("crm", "crm", "crm", "crm", "crm")
	f.success, f.recon, f.stored, f.lookup, f.approved = es[0], es[1], es[2], es[3], es[4]
	f.successEntity = f.success.Entity
	at := t0.Add(time.Minute)
	// A call answered 2xx.
	f.settle(f.claimOne(f.success.ID, at), at, store.EffectDone, time.Time{}, func(p *store.EffectSettleParams) {
		p.Attempt = &store.Attempt{StartedAt: at, Status: 201}
	})
	// A call whose answer was lost, settled in the same claim by a lookup
	// that found the effect: only the call's row is recorded.
	f.settle(f.claimOne(f.recon.ID, at), at, store.EffectDone, time.Time{}, func(p *store.EffectSettleParams) {
		p.Attempt = &store.Attempt{StartedAt: at, Class: store.ClassUnknown, Error: "no answer after the request was sent"}
		p.Reason = reconciledReason
	})
	// A reconciliation decided from stored evidence: no attempt at all.
	f.settle(f.claimOne(f.stored.ID, at), at, store.EffectDone, time.Time{}, func(p *store.EffectSettleParams) {
		p.AddAttempt, p.Reason = false, reconciledReason
	})
	// A resumed claim settled by its lookup's row.
	f.settle(f.claimOne(f.lookup.ID, at), at, store.EffectDone, time.Time{}, func(p *store.EffectSettleParams) {
		p.Attempt, p.Reason = &store.Attempt{StartedAt: at, Status: 200, Reconcile: true}, reconciledReason
	})
	f.waitingID, f.routedID = "waiting_1", "routed_1"
	f.waiting = f.event(f.waitingID)
	f.routedPending = f.event(f.routedID)
	f.route(at, to(f.routedPending, rt("out", "routed_entity", "1")))
	unrouted := f.event("unrouted_1")
	f.route(at, to(unrouted))
	return f
}

func (f *healthy) check(limit int) *store.InvariantCheckResult {
	f.t.Helper()
	r, err := f.s.InvariantCheck(f.ctx, &store.InvariantCheckParams{Limit: limit})
	if err != nil {
		f.t.Fatalf("InvariantCheck: %v", err)
	}
	if got := slices.Sorted(maps.Keys(r.Counts)); !slices.Equal(got, slices.Sorted(slices.Values(store.Invariants()))) {
		f.t.Fatalf("counts cover %v, want every invariant", got)
	}
	return r
}

// only asserts that the check finds exactly one violation, of inv, on
// subject, with a detail that contains each of details.
func (f *healthy) only(inv, subject string, details ...string) {
	f.t.Helper()
	r := f.check(0)
	for name, n := range r.Counts {
		want := int64(0)
		if name == inv {
			want = 1
		}
		if n != want {
			f.t.Errorf("count of %s = %d, want %d", name, n, want)
		}
	}
	if len(r.Findings) != 1 {
		f.t.Fatalf("findings = %s, want one of %s", findings(r), inv)
	}
	g := r.Findings[0]
	if g.Invariant != inv || g.Subject != subject {
		f.t.Fatalf("finding = %s, want %s on %q", findings(r), inv, subject)
	}
	for _, d := range details {
		if !strings.Contains(g.Detail, d) {
			f.t.Errorf("detail %q does not say %q", g.Detail, d)
		}
	}
}

func findings(r *store.InvariantCheckResult) string {
	var b strings.Builder
	for _, g := range r.Findings {
		fmt.Fprintf(&b, "\n  %s %s: %s", g.Invariant, g.Subject, g.Detail)
	}
	return b.String()
}

// Every legitimate state, near misses included, passes the check.
func testInvariantCheckClean(t *testing.T, o Opener) {
	f := newHealthy(t, o)
	r := f.check(0)
	if len(r.Findings) != 0 {
		t.Fatalf("a healthy store has findings:%s", findings(r))
	}
	for name, n := range r.Counts {
		if n != 0 {
			t.Errorf("count of %s = %d on a healthy store", name, n)
		}
	}
}

func testInvariantEventPending(t *testing.T, o Opener) {
	f := newHealthy(t, o)
	// Routed, and its one work item settled without settling the event:
	// nothing will ever settle it. (The event still waiting to be routed
	// is pending, however the driver keeps it waiting.)
	f.tamper(GuardNone, `UPDATE work SET done_at = ? WHERE event_pk = ?`, t0.Add(2*time.Minute), f.routedPending)
	f.only(store.InvariantEventPending, "event crm/"+f.routedID, "accepted", "none of its 1 work items is pending")
}

func testInvariantEpisodeKeyOnce(t *testing.T, o Opener) {
	f := newHealthy(t, o)
	f.tamper(GuardEpisodeKey, `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state,
		request, source_event_pk, causation_id, hop, created_at, updated_at)
		SELECT episode_key, flow, entity, version, version_sort, effect, destination, 'superseded',
		request, source_event_pk, causation_id, hop, created_at, updated_at FROM effects WHERE id = ?`, f.success.ID)
	f.only(store.InvariantEpisodeKeyOnce, "episode key "+f.success.EpisodeKey, "held by 2 effects", fmt.Sprintf("ids %d, ", f.success.ID))
}

// A tombstone beside a live effect of the same key: the effect was made
// again after it was pruned.
func testInvariantEpisodeKeyTombstone(t *testing.T, o Opener) {
	f := newHealthy(t, o)
	f.tamper(GuardNone, `INSERT INTO effect_tombstones (episode_key, flow, entity, effect, destination, state, request, created_at, deleted_at)
		SELECT episode_key, flow, entity, effect, destination, 'done', request, created_at, updated_at FROM effects WHERE id = ?`, f.success.ID)
	f.only(store.InvariantEpisodeKeyOnce, "episode key "+f.success.EpisodeKey, fmt.Sprintf("held by effect %d and by the tombstone", f.success.ID))
}

func testInvariantDoneEvidence(t *testing.T, o Opener) {
	f := newHealthy(t, o)
	f.tamper(GuardNone, `UPDATE effects SET state = 'done' WHERE id = ?`, f.approved.ID)
	f.only(store.InvariantDoneEvidence, fmt.Sprintf("effect %d", f.approved.ID), f.approved.EpisodeKey, "none of its 0 attempts rows succeeded")
}

func testInvariantProjectionVersion(t *testing.T, o Opener) {
	f := newHealthy(t, o)
	// The newest applied work item says another version than the
	// projection holds.
	f.tamper(GuardNone, `UPDATE work SET version_sort = '0000000009' WHERE flow = 'out' AND entity = ? AND disposition = 'applied'`,
		f.successEntity)
	f.only(store.InvariantProjectionVersion, "entity out/"+f.successEntity, `sort "0000000001"`, `applied sort "0000000009"`)
}

// A newer version applied to the entity by another event's work item
// than the projection's: its own event's item matches it, so only the
// newer one contradicts it.
func testInvariantProjectionNewer(t *testing.T, o Opener) {
	f := newHealthy(t, o)
	at := t0.Add(2 * time.Minute)
	f.tamper(GuardNone, `INSERT INTO work (flow, entity, event_pk, replay_id, order_key, created_at, done_at, disposition, version_sort)
		VALUES ('out', ?, ?, 0, 'z', ?, ?, 'applied', '0000000009')`, f.successEntity, f.waiting, at, at)
	f.only(store.InvariantProjectionVersion, "entity out/"+f.successEntity, `sort "0000000001"`,
		`a newer version was applied to it: applied sort "0000000009"`)
}

func testInvariantEffectEvent(t *testing.T, o Opener) {
	f := newHealthy(t, o)
	f.tamper(GuardEffectEvent, `UPDATE effects SET source_event_pk = ? WHERE id = ?`, int64(1<<40), f.approved.ID)
	f.only(store.InvariantEffectEvent, fmt.Sprintf("effect %d", f.approved.ID), fmt.Sprintf("pk %d) does not exist", int64(1<<40)))
}

func testInvariantEffectState(t *testing.T, o Opener) {
	f := newHealthy(t, o)
	f.tamper(GuardEffectState, `UPDATE effects SET state = 'lost' WHERE id = ?`, f.approved.ID)
	f.only(store.InvariantEffectState, fmt.Sprintf("effect %d", f.approved.ID), `state "lost"`)
}

// Limit caps the findings, never the count.
func testInvariantCheckLimit(t *testing.T, o Opener) {
	f := newHealthy(t, o)
	for _, e := range []*store.Effect{f.approved, f.success, f.recon} {
		f.tamper(GuardEffectState, `UPDATE effects SET state = 'lost' WHERE id = ?`, e.ID)
	}
	r := f.check(2)
	if r.Counts[store.InvariantEffectState] != 3 || len(r.Findings) != 2 {
		t.Fatalf("count %d with %d findings, want 3 with 2:%s", r.Counts[store.InvariantEffectState], len(r.Findings), findings(r))
	}
	if r.Findings[0].Subject != fmt.Sprintf("effect %d", f.success.ID) || r.Findings[1].Subject != fmt.Sprintf("effect %d", f.recon.ID) {
		t.Fatalf("findings not in id order:%s", findings(r))
	}
}
