package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/expr"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
)

// openVersion is the version orders_open gives an order open or not: the
// hash of that one field, as the processor computes it.
func openVersion(open bool) string {
	canon, _ := expr.Canonical([]any{open})
	sum := sha256.Sum256(canon)
	return "h" + hex.EncodeToString(sum[:])[:16]
}

// checkOpenFlow checks the flow whose version is whether the order is
// open: the applied versions alternate between the two (a refetch that
// finds the same answer is a duplicate of the applied one), each applied
// version has its effect (one row: a version applied again finds its
// episode key in the ledger), and the projection holds the final answer.
func (r *run) checkOpenFlow(e *entity, ss []settlement, byKey map[string]*store.Effect) {
	versions := map[string]bool{openVersion(true): true, openVersion(false): true}
	cur := ""
	seen := map[string]bool{}
	for _, s := range ss {
		switch s.disposition {
		case store.DispositionApplied:
			if !versions[s.version] {
				r.failf("%s/%s: applied version %s, which is neither open nor closed", flowOpen, e.id, s.version)
			}
			if s.version == cur {
				r.failf("%s/%s: version %s applied over itself (audit %d)", flowOpen, e.id, s.version, s.auditID)
			}
			if seen[s.version] {
				r.stats.reappliedVersions++
			}
			seen[s.version], cur = true, s.version
			if byKey[flow.EpisodeKey(flowOpen, e.id, s.version, "open_changed")] == nil {
				r.failf("%s/%s: version %s applied without its effect open_changed", flowOpen, e.id, s.version)
			}
		case store.DispositionDuplicate:
			if want := "version " + cur + " already applied"; s.reason != want {
				r.failf("%s/%s: event %s settled duplicate (%s) while %s is applied", flowOpen, e.id, s.eventID, s.reason, cur)
			}
		default:
			r.failf("%s/%s: event %s settled %s: %s", flowOpen, e.id, s.eventID, s.disposition, s.reason)
		}
	}
	open := isOpen(e.states[len(e.states)-1])
	if cur != openVersion(open) {
		r.failf("%s/%s: last applied version %s, want %s (open %v)", flowOpen, e.id, cur, openVersion(open), open)
	}
	p, err := r.st.ProjectionGet(r.ctx, &store.ProjectionGetParams{Flow: flowOpen, Entity: e.id})
	if err != nil || p == nil {
		r.failf("%s/%s: projection: %v, %v", flowOpen, e.id, p, err)
		return
	}
	if want := fmt.Sprint(open); p.Version != openVersion(open) || string(p.State) != want {
		r.failf("%s/%s: projection %s %s, want %s %s", flowOpen, e.id, p.Version, p.State, openVersion(open), want)
	}
}

// audits reads every audit row of the source, in id order.
func (r *run) audits() ([]*store.AuditEntry, error) {
	var out []*store.AuditEntry
	after := int64(0)
	for {
		rows, err := r.st.AuditList(r.ctx, &store.AuditListParams{Source: source, AfterID: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("audit list: %w", err)
		}
		if len(rows) == 0 {
			return out, nil
		}
		out = append(out, rows...)
		after = rows[len(rows)-1].ID
	}
}

// checkWhole looks for what a write that failed halfway would leave
// behind; every write that failed (the injected store faults among them)
// must have rolled back whole. The invariants of check cover the rest:
// a work item settled without its audit row leaves its event unsettled in
// that flow; a version applied without its effects, or effects without
// their applied version, are both reported; a projection ahead of the
// settlements does not hold the newest version.
//
//   - every event holds exactly the deliveries the inbox acknowledged: its
//     deliveries count, its delivery rows and the submissions that
//     succeeded agree (a failed submission left nothing);
//   - every projection is the last applied settlement of its entity
//     (version and event), and counts no pending work once none is;
//   - every effect has exactly one effect_approved audit row and every such
//     row an effect; every settle with a call has its audit row ("after
//     attempt N") and every attempts row its settle or resumed claim; and
//     the effect's state is the one its last audit row moved it to.
func (r *run) checkWhole(drained bool, evs []*store.Event, ss []settlement, effects []*store.Effect, attempts map[int64][]*store.Attempt) {
	rows := map[string]int{}
	after := int64(0)
	for {
		page, err := r.st.DeliveryList(r.ctx, &store.DeliveryListParams{Source: source, AfterID: after, Limit: 1000})
		if err != nil {
			r.failf("delivery list: %v", err)
			return
		}
		if len(page) == 0 {
			break
		}
		for _, d := range page {
			rows[d.EventID]++
		}
		after = page[len(page)-1].ID
	}
	pk := map[string]int64{}
	for _, ev := range evs {
		pk[ev.EventID] = ev.PK
		if ev.Deliveries != r.stored[ev.EventID] || rows[ev.EventID] != r.stored[ev.EventID] {
			r.failf("event %s: deliveries count %d, %d delivery rows, %d deliveries acknowledged: a failed inbox commit left part of itself",
				ev.EventID, ev.Deliveries, rows[ev.EventID], r.stored[ev.EventID])
		}
	}

	last := map[string]settlement{}
	for _, s := range ss {
		if s.disposition == store.DispositionApplied {
			last[s.flow+"\x00"+s.entity] = s
		}
	}
	for _, e := range r.w.entities {
		for _, f := range r.flows() {
			p, err := r.st.ProjectionGet(r.ctx, &store.ProjectionGetParams{Flow: f, Entity: e.id})
			if err != nil || p == nil {
				continue // reported by the flow's own checks
			}
			s := last[f+"\x00"+e.id]
			if p.Version != s.version || p.AppliedEventPK != pk[s.eventID] {
				r.failf("%s/%s: projection version %s of event %d, but the last applied settlement is %s of event %d (%s): half-applied",
					f, e.id, p.Version, p.AppliedEventPK, s.version, pk[s.eventID], s.eventID)
			}
			if p.Pending != 0 && drained {
				r.failf("%s/%s: the projection counts %d work items pending, but none is: half-applied", f, e.id, p.Pending)
			}
		}
	}

	audits, err := r.audits()
	if err != nil {
		r.failf("%v", err)
		return
	}
	type trail struct {
		approved, withAttempt, resumedFromSubmitting int
		state                                        store.EffectState
	}
	trails := map[string]*trail{}
	at := func(key string) *trail {
		if trails[key] == nil {
			trails[key] = &trail{}
		}
		return trails[key]
	}
	for _, a := range audits {
		action, ok := strings.CutPrefix(a.Action, "effect_")
		if !ok {
			continue
		}
		key, detail, _ := strings.Cut(a.Detail, ": ")
		switch action {
		case "approved":
			at(a.Detail).approved++
			at(a.Detail).state = store.EffectApproved
		case "superseded":
			// Superseded while waiting, by a newer version's apply
			// ("<key> (version … superseded by …)"), or at its claim,
			// a settle, when its call had been in flight then.
			if !strings.HasPrefix(detail, "submitting -> ") {
				key, _, _ = strings.Cut(a.Detail, " (")
			}
			at(key).state = store.EffectSuperseded
		case "resumed", "redrive":
			if strings.HasPrefix(detail, "submitting -> ") {
				at(key).resumedFromSubmitting++
			}
			at(key).state = store.EffectSubmitting
		case "retry":
			at(key).state = store.EffectApproved
		case "resolved":
			at(key).state = store.EffectResolved
		case "assigned":
		default: // a settle: effect_<state>
			if strings.Contains(detail, " after attempt ") {
				at(key).withAttempt++
			}
			at(key).state = store.EffectState(action)
		}
	}
	byKey := map[string]bool{}
	for _, e := range effects {
		byKey[e.EpisodeKey] = true
		t := at(e.EpisodeKey)
		if t.approved != 1 {
			r.failf("effect %s: %d effect_approved audit rows, want 1", e.EpisodeKey, t.approved)
		}
		if t.state != e.State {
			r.failf("effect %s: state %s, but its last audit row moved it to %s: half-applied", e.EpisodeKey, e.State, t.state)
		}
		atts := attempts[e.ID]
		abandoned := 0
		for _, a := range atts {
			if strings.HasPrefix(a.Error, store.AbandonedCall) {
				abandoned++
			}
		}
		if len(atts)-abandoned != t.withAttempt || abandoned != t.resumedFromSubmitting {
			r.failf("effect %s: %d attempts rows (%d for abandoned calls), but %d settles with an attempt and %d claims of an abandoned call in the audit trail: half-applied",
				e.EpisodeKey, len(atts), abandoned, t.withAttempt, t.resumedFromSubmitting)
		}
	}
	for key, t := range trails {
		if !byKey[key] && t.approved > 0 {
			r.failf("effect %s: approved in the audit trail but not in the ledger", key)
		}
	}
}

// checkDelivery checks the delivery side once everything is drained:
//
//   - the destination did each episode key's work at most once, only for
//     keys the ledger has, exactly once for a done effect, and never for a
//     dead one but by a batch that reported a failed record;
//   - every effect ended done or superseded, or waits for a person in the
//     exception queue (dead or needs_reconciliation, nothing scheduled)
//     with its class and reason, and was notified in that state;
//   - one call per claim: no claim made more than one call, and none that
//     resumed an unknown outcome made any (it reconciles, by lookup or by
//     deciding, never by resending blindly);
//   - attempts equal calls, per episode key (see claimCalls).
func (r *run) checkDelivery(effects []*store.Effect, attempts map[int64][]*store.Attempt) {
	posts, lookups := map[string]int{}, map[string]int{}
	r.stats.faults = map[string]int{}
	for _, q := range r.dest.Requests() {
		if q.Method == http.MethodGet {
			lookups[q.Key]++
			r.stats.lookups++
			continue
		}
		posts[q.Key]++
		if q.Replayed {
			r.stats.replayed++
		} else {
			r.stats.faults[q.Fault.String()]++
		}
	}
	executed := r.dest.ExecutedKeys()
	byKey := map[string]*store.Effect{}
	for _, e := range effects {
		byKey[e.EpisodeKey] = e
	}
	for k := range posts {
		if byKey[k] == nil {
			r.failf("the destination was called for %s, which the ledger does not have", k)
		}
	}
	for k, n := range executed {
		if byKey[k] == nil {
			r.failf("the destination did the work of %s (%d times), which the ledger does not have", k, n)
		}
	}

	r.dl.mu.Lock()
	claims := map[int64][]*claimRec{}
	for _, c := range r.dl.claims {
		claims[c.effectID] = append(claims[c.effectID], c)
		r.stats.claims++
		if c.resumed {
			r.stats.resumed++
		}
	}
	notified := r.dl.notified
	r.stats.hangs = r.dl.hangs
	r.dl.mu.Unlock()

	r.stats.effects = map[string]int{}
	for _, e := range effects {
		k := e.EpisodeKey
		r.stats.effects[string(e.State)]++
		if len(r.workers) == 0 {
			if e.State != store.EffectApproved && e.State != store.EffectSuperseded {
				r.failf("effect %s: state %s with no deliverer running", k, e.State)
			}
			continue
		}
		if n := executed[k]; n > 1 {
			r.failf("effect %s: the destination did its work %d times", k, n)
		}
		switch e.State {
		case store.EffectDone:
			if executed[k] != 1 {
				r.failf("effect %s: done, but the destination did its work %d times", k, executed[k])
			}
		case store.EffectSuperseded:
		case store.EffectDead, store.EffectNeedsReconciliation:
			if e.ErrorClass == store.ClassNone || e.Reason == "" {
				r.failf("effect %s: %s without a class and a reason", k, e.State)
			}
			if !e.NextAttemptAt.IsZero() {
				r.failf("effect %s: %s, still scheduled at %s after the drain", k, e.State, e.NextAttemptAt)
			}
			if !slices.Contains(notified[k], e.State) {
				r.failf("effect %s: ended %s, but no person was told (notified %v)", k, e.State, notified[k])
			}
			if e.State == store.EffectDead && executed[k] > 0 && e.ErrorClass != store.ClassHiddenFailure {
				r.failf("effect %s: dead [%s] %s, but the destination did its work", k, e.ErrorClass, e.Reason)
			}
		default:
			r.failf("effect %s: ended %s (%s), neither final nor waiting for a person", k, e.State, e.Reason)
		}
		r.claimCalls(e, attempts[e.ID], claims[e.ID], posts[k], lookups[k])
	}
	for _, states := range notified {
		r.stats.notified += len(states)
	}
}

// claimCalls checks one effect's claims against the calls the destination
// received and the attempts rows the ledger holds. Each attempts row is one
// of three kinds: a call (the POST of a claim whose settle committed), a
// lookup (Reconcile: the lookup of a resumed claim whose settle committed),
// or an abandoned call (recorded by the claim that found the effect still
// submitting after a lease ran out; its end is that lease's end, which
// names the lost claim). With calls and lookups counted by the destination
// per episode key, the equation checked is
//
//	calls   = call rows   + calls of the lost claims
//	lookups = lookup rows + lookups of the lost claims
//	          + lookups made right after an unknown outcome in the same claim
//	abandoned-call rows = lost claims (each counted once)
//
// so the attempts rows account for every call the destination may have
// seen, and a lost claim made at most one call. The last term is a lookup
// whose evidence the ledger does not keep: the settle after it records
// the unknown call alone.
func (r *run) claimCalls(e *store.Effect, atts []*store.Attempt, cs []*claimRec, posts, lookups int) {
	k := e.EpisodeKey
	callRows, lookupRows := 0, 0
	for _, a := range atts {
		switch {
		case strings.HasPrefix(a.Error, store.AbandonedCall):
			end := a.StartedAt.Add(a.Duration).UnixMicro()
			var lost *claimRec
			for _, c := range cs {
				if !c.lost && c.until.UnixMicro() == end {
					lost = c
					break
				}
			}
			if lost == nil {
				r.failf("effect %s: attempts row %d counts an abandoned call whose lease ended at %s, which no claim held",
					k, a.Number, a.StartedAt.Add(a.Duration))
				continue
			}
			lost.lost = true
		case a.Reconcile:
			lookupRows++
		default:
			callRows++
		}
	}
	wantCalls, wantLookups, tapPosts, tapLookups := 0, 0, 0, 0
	wantCallRows, wantLookupRows := 0, 0
	for _, c := range cs {
		tapPosts += c.posts
		tapLookups += c.lookups
		if c.posts > 1 {
			r.failf("effect %s: %s made %d calls under one claim", k, c.worker, c.posts)
		}
		if c.resumed && c.posts > 0 {
			r.failf("effect %s: %s resumed an unknown outcome and called again without reconciling", k, c.worker)
		}
		switch {
		case c.lost:
			r.stats.lost++
			if c.committed && c.settled {
				r.failf("effect %s: %s's settle committed, yet an abandoned call is counted for its claim", k, c.worker)
			}
			wantCalls += c.posts
			wantLookups += c.lookups
		case !c.committed:
			r.failf("effect %s: the outcome of %s's claim never reached the ledger, and no attempts row counts its call", k, c.worker)
		case !c.settled || c.row == nil:
			// Released, or settled from stored evidence: no call.
			if c.posts+c.lookups > 0 {
				r.failf("effect %s: %s made %d calls and %d lookups, but its claim ended without an attempts row", k, c.worker, c.posts, c.lookups)
			}
		case c.row.Reconcile:
			wantLookupRows++
			wantLookups++
			if c.posts != 0 || c.lookups != 1 {
				r.failf("effect %s: %s recorded a lookup, but made %d calls and %d lookups", k, c.worker, c.posts, c.lookups)
			}
		default:
			wantCallRows++
			wantCalls++
			wantLookups += c.lookups
			r.stats.unrowedLookups += c.lookups
			if c.posts != 1 || c.lookups > 1 {
				r.failf("effect %s: %s recorded a call, but made %d calls and %d lookups", k, c.worker, c.posts, c.lookups)
			}
		}
	}
	if tapPosts != posts || tapLookups != lookups {
		r.failf("effect %s: the destination got %d calls and %d lookups, the workers made %d and %d: a call made below the worker",
			k, posts, lookups, tapPosts, tapLookups)
	}
	if callRows != wantCallRows || lookupRows != wantLookupRows || posts != wantCalls || lookups != wantLookups {
		r.failf("effect %s: %d calls and %d lookups at the destination, %d call rows and %d lookup rows; the settles that committed wrote %d and %d, and the claims account for %d calls and %d lookups",
			k, posts, lookups, callRows, lookupRows, wantCallRows, wantLookupRows, wantCalls, wantLookups)
	}
}

// checkVersionOrder checks the order in which the versions of one entity
// reach a destination: for every flow, entity and effect name, once a
// version's call has reached the destination, no call of an older version
// follows (an older state would overwrite a newer one there). A version is
// as new as its first application: business order for the ordered flows
// (their applies follow it, as check verifies), and for a flow whose
// versions come back (orders_open) the order they first appeared in.
//
// Applying a version supersedes the older effects waiting for a call; an
// older effect whose call was in flight then holds the newer one back
// (one call of a business effect in flight at a time: the claim's
// store.NoOlderInFlightSQL) and is superseded when it is claimed again (a
// retry, a resumed or re-driven call), never sent after the newer one
// (deliver.Worker's newerVersion).
func (r *run) checkVersionOrder(reqs []delivertest.Request, ss []settlement, byKey map[string]*store.Effect) {
	rank := map[string]int{}
	for i, s := range ss {
		k := versionKey(s.flow, s.entity, s.version)
		if _, ok := rank[k]; !ok && s.disposition == store.DispositionApplied {
			rank[k] = i
		}
	}
	type called struct {
		e    *store.Effect
		rank int
	}
	newest := map[string]called{} // flow\x00entity\x00effect: the newest version called
	for i, q := range reqs {
		if q.Method != http.MethodPost {
			continue
		}
		e := byKey[q.Key]
		if e == nil {
			continue // reported by checkDelivery
		}
		k := e.Flow + "\x00" + e.Entity + "\x00" + e.Effect
		rk, ok := rank[versionKey(e.Flow, e.Entity, e.Version)]
		if !ok {
			continue // an effect of a version never applied: reported by check
		}
		n, seen := newest[k]
		switch {
		case !seen || rk >= n.rank:
			newest[k] = called{e, rk}
		default:
			r.failf("%s/%s: effect %s of version %s reached the destination (request %d) after version %s's: an older version after a newer one",
				e.Flow, e.Entity, e.Effect, e.Version, i, n.e.Version)
		}
	}
}
