package sim

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
)

// settlement is one work item settled, as its audit row tells it.
type settlement struct {
	auditID     int64
	eventID     string
	flow        string
	entity      string
	disposition store.Disposition
	version     string // for applied
	reason      string
}

// settlements reads every work_settled audit row in commit order. Per
// entity, audit ids follow commit order on both drivers: the lease
// serialises an entity's transactions.
func (r *run) settlements() ([]settlement, error) {
	var out []settlement
	after := int64(0)
	for {
		rows, err := r.st.AuditList(r.ctx, &store.AuditListParams{Action: "work_settled", Source: source, AfterID: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("audit list: %w", err)
		}
		if len(rows) == 0 {
			return out, nil
		}
		for _, a := range rows {
			after = a.ID
			s, err := parseSettled(a)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
	}
}

// parseSettled reads "flow F entity E: applied V" or
// "flow F entity E: DISPOSITION: reason".
func parseSettled(a *store.AuditEntry) (settlement, error) {
	s := settlement{auditID: a.ID, eventID: a.EventID}
	rest, ok := strings.CutPrefix(a.Detail, "flow ")
	if ok {
		s.flow, rest, ok = strings.Cut(rest, " entity ")
	}
	if ok {
		s.entity, rest, ok = strings.Cut(rest, ": ")
	}
	if !ok {
		return s, fmt.Errorf("audit %d: unexpected work_settled detail %q", a.ID, a.Detail)
	}
	if v, applied := strings.CutPrefix(rest, "applied "); applied {
		s.disposition, s.version = store.DispositionApplied, v
		return s, nil
	}
	d, reason, _ := strings.Cut(rest, ": ")
	s.disposition, s.reason = store.Disposition(d), reason
	return s, nil
}

func versionKey(flowName, entity, version string) string {
	return flowName + "\x00" + entity + "\x00" + version
}

// appliedVersions is every (flow, entity, version) ever applied.
func (r *run) appliedVersions() (map[string]bool, error) {
	ss, err := r.settlements()
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for _, s := range ss {
		if s.disposition == store.DispositionApplied {
			out[versionKey(s.flow, s.entity, s.version)] = true
		}
	}
	return out, nil
}

func (r *run) effects() ([]*store.Effect, error) {
	var out []*store.Effect
	after := int64(0)
	for {
		page, err := r.st.EffectList(r.ctx, &store.EffectListParams{AfterID: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("effect list: %w", err)
		}
		if len(page) == 0 {
			return out, nil
		}
		out = append(out, page...)
		after = page[len(page)-1].ID
	}
}

func (r *run) storedEvents() ([]*store.Event, error) {
	var out []*store.Event
	after := int64(0)
	for {
		page, err := r.st.EventList(r.ctx, &store.EventListParams{Source: source, AfterPK: after, Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("event list: %w", err)
		}
		out = append(out, page.Events...)
		if page.NextAfterPK == 0 {
			return out, nil
		}
		after = page.NextAfterPK
	}
}

// truthObject is the refetched state the truth flow projects.
type truthObject struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Seq    int    `json:"seq"`
}

// check verifies the invariants once the run is drained.
func (r *run) check() {
	n, err := r.st.WorkCount(r.ctx)
	drained := err == nil && n == 0
	if !drained {
		r.failf("after drain: WorkCount = %d, %v; want 0", n, err)
	}

	// Every event the network delivered is stored once and settled.
	evs, err := r.storedEvents()
	if err != nil {
		r.failf("%v", err)
		return
	}
	seen := map[string]bool{}
	for _, ev := range evs {
		if r.hostile.byID[ev.EventID] != nil {
			continue // checkHostile
		}
		info, ok := r.events[ev.EventID]
		if !ok {
			r.failf("event %s: stored but never sent", ev.EventID)
			continue
		}
		if seen[ev.EventID] {
			r.failf("event %s: stored twice", ev.EventID)
		}
		seen[ev.EventID] = true
		switch ev.Disposition {
		case store.DispositionApplied, store.DispositionDuplicate:
		case store.DispositionStale:
			if info.rev == len(info.entity.states) {
				r.failf("event %s (newest revision r%d of %s): disposition stale, want applied or duplicate", ev.EventID, info.rev, info.entity.id)
			}
		default:
			r.failf("event %s (r%d of %s): disposition %s, want applied, duplicate or stale", ev.EventID, info.rev, info.entity.id, ev.Disposition)
		}
	}
	for id := range r.events {
		if !seen[id] {
			r.failf("event %s: delivered but not stored", id)
		}
	}

	ss, err := r.settlements()
	if err != nil {
		r.failf("%v", err)
		return
	}
	effects, err := r.effects()
	if err != nil {
		r.failf("%v", err)
		return
	}
	applied := map[string]bool{}
	for _, s := range ss {
		if s.disposition == store.DispositionApplied {
			applied[versionKey(s.flow, s.entity, s.version)] = true
		}
	}
	byKey := map[string]*store.Effect{}
	for _, e := range effects {
		if byKey[e.EpisodeKey] != nil {
			r.failf("effect %s: more than one row", e.EpisodeKey)
		}
		byKey[e.EpisodeKey] = e
		if e.EpisodeKey != flow.EpisodeKey(e.Flow, e.Entity, e.Version, e.Effect) {
			r.failf("effect %d: episode key %s does not name flow %s entity %s version %s effect %s",
				e.ID, e.EpisodeKey, e.Flow, e.Entity, e.Version, e.Effect)
		}
		if !applied[versionKey(e.Flow, e.Entity, e.Version)] {
			r.failf("effect %s: version %s of %s/%s was never applied", e.EpisodeKey, e.Version, e.Flow, e.Entity)
		}
	}
	for _, snap := range r.replays {
		for _, e := range effects {
			if snap.applied[versionKey(e.Flow, e.Entity, e.Version)] && !snap.keys[e.EpisodeKey] {
				r.failf("effect %s: created after the replay at op %d although version %s was already applied", e.EpisodeKey, snap.at, e.Version)
			}
		}
	}

	r.stats.seeds, r.stats.events = 1, len(r.events)
	r.stats.settled = map[string]int{}
	for _, s := range ss {
		r.stats.settled[s.flow+"/"+string(s.disposition)]++
	}
	for _, e := range r.w.entities {
		r.stats.refetch503 += e.fail503 - r.truth.fails[e.id]
	}
	bySettled := map[string][]settlement{}
	flowsOf := map[string]map[string]bool{}
	for _, s := range ss {
		k := s.flow + "\x00" + s.entity
		bySettled[k] = append(bySettled[k], s)
		if flowsOf[s.eventID] == nil {
			flowsOf[s.eventID] = map[string]bool{}
		}
		flowsOf[s.eventID][s.flow] = true
	}
	for id := range r.events {
		for _, f := range r.flows() {
			if !flowsOf[id][f] {
				r.failf("event %s: never settled in flow %s", id, f)
			}
		}
	}
	for _, e := range r.w.entities {
		r.checkRevisionFlow(e, bySettled[flowRev+"\x00"+e.id], byKey)
		r.checkTruthFlow(e, bySettled[flowTruth+"\x00"+e.id], byKey)
		if r.w.open {
			r.checkOpenFlow(e, bySettled[flowOpen+"\x00"+e.id], byKey)
		}
	}
	attempts := map[int64][]*store.Attempt{}
	for _, e := range effects {
		if len(r.workers) == 0 {
			break // nothing called: no attempts to read
		}
		if attempts[e.ID], err = r.st.AttemptList(r.ctx, e.ID); err != nil {
			r.failf("%v", err)
			return
		}
	}
	r.checkWhole(drained, evs, ss, effects, attempts)
	r.checkDelivery(effects, attempts)
	if len(r.workers) > 0 {
		r.checkVersionOrder(r.dest.Requests(), ss, byKey)
	}
	r.checkInvariants()
	r.checkHostile()

	r.watch.mu.Lock()
	r.stats.reinserted = r.watch.existing
	r.watch.mu.Unlock()
	r.faults.mu.Lock()
	r.stats.storeFaults, r.stats.storeFaultKinds = r.faults.injected, r.faults.kinds
	if r.faults.injected > 0 {
		r.stats.storeFaultSeeds = 1
	}
	r.faults.mu.Unlock()
}

// checkInvariants runs the store's own offline check (hookledger check)
// on the drained store: whatever the schedule did, it must find nothing.
func (r *run) checkInvariants() {
	res, err := r.st.InvariantCheck(r.ctx, &store.InvariantCheckParams{Limit: 10})
	if err != nil {
		r.failf("InvariantCheck: %v", err)
		return
	}
	for _, name := range store.Invariants() {
		if n := res.Counts[name]; n > 0 {
			r.failf("hookledger check: invariant %s violated %d times", name, n)
		}
	}
	for _, f := range res.Findings {
		r.failf("hookledger check: %s: %s: %s", f.Invariant, f.Subject, f.Detail)
	}
}

// checkRevisionFlow follows one entity's settlements in commit order: a
// revision is applied only over an older one, a duplicate repeats the
// applied revision, a stale event is older than it; and the projection
// and effects match the newest revision.
func (r *run) checkRevisionFlow(e *entity, ss []settlement, byKey map[string]*store.Effect) {
	cur := 0
	for _, s := range ss {
		info, ok := r.events[s.eventID]
		if !ok || info.entity != e {
			r.failf("%s/%s: settled event %s that is not one of its events", flowRev, e.id, s.eventID)
			continue
		}
		switch s.disposition {
		case store.DispositionApplied:
			if info.rev <= cur {
				r.failf("%s/%s: event %s (r%d) applied after r%d (audit %d)", flowRev, e.id, s.eventID, info.rev, cur, s.auditID)
			}
			if want := fmt.Sprintf("r%d", info.rev); s.version != want {
				r.failf("%s/%s: event %s applied as version %s, want %s", flowRev, e.id, s.eventID, s.version, want)
			}
			cur = info.rev
			for _, name := range revisionEffects(e.states[info.rev-1]) {
				if key := flow.EpisodeKey(flowRev, e.id, s.version, name); byKey[key] == nil {
					r.failf("%s/%s: r%d (%s) applied without its effect %s", flowRev, e.id, info.rev, e.states[info.rev-1], key)
				}
			}
		case store.DispositionDuplicate:
			if info.rev != cur {
				r.failf("%s/%s: event %s (r%d) settled duplicate while r%d is applied", flowRev, e.id, s.eventID, info.rev, cur)
			}
		case store.DispositionStale:
			if info.rev >= cur {
				r.failf("%s/%s: event %s (r%d) settled stale while r%d is applied", flowRev, e.id, s.eventID, info.rev, cur)
			}
		default:
			r.failf("%s/%s: event %s (r%d) settled %s: %s", flowRev, e.id, s.eventID, info.rev, s.disposition, s.reason)
		}
	}
	newest := len(e.states)
	if cur != newest {
		r.failf("%s/%s: newest applied revision r%d, want r%d", flowRev, e.id, cur, newest)
	}
	p, err := r.st.ProjectionGet(r.ctx, &store.ProjectionGetParams{Flow: flowRev, Entity: e.id})
	if err != nil || p == nil {
		r.failf("%s/%s: projection: %v, %v", flowRev, e.id, p, err)
		return
	}
	wantState, _ := json.Marshal(e.states[newest-1])
	if p.Version != fmt.Sprintf("r%d", newest) || string(p.State) != string(wantState) {
		r.failf("%s/%s: projection %s %s, want r%d %s", flowRev, e.id, p.Version, p.State, newest, wantState)
	}
	// Effects of the other names must not exist for a state whose when is
	// false (e.g. notify_created for a CONFIRMED revision).
	for rev := 1; rev <= newest; rev++ {
		want := revisionEffects(e.states[rev-1])
		for _, name := range []string{"notify_created", "notify_cancelled", "upsert_order"} {
			key := flow.EpisodeKey(flowRev, e.id, fmt.Sprintf("r%d", rev), name)
			if byKey[key] != nil && !slices.Contains(want, name) {
				r.failf("%s: exists although r%d is %s", key, rev, e.states[rev-1])
			}
		}
	}
}

// checkTruthFlow checks the refetch flow of one entity: each applied
// version is a newer truth than the one before, its effects match its
// state, and the projection holds the final truth.
func (r *run) checkTruthFlow(e *entity, ss []settlement, byKey map[string]*store.Effect) {
	seq := 0
	for _, s := range ss {
		switch s.disposition {
		case store.DispositionApplied:
			sync := byKey[flow.EpisodeKey(flowTruth, e.id, s.version, "sync_warehouse")]
			if sync == nil {
				r.failf("%s/%s: version %s applied without its effect sync_warehouse", flowTruth, e.id, s.version)
				continue
			}
			var req flow.Request
			var obj truthObject
			if err := json.Unmarshal(sync.Request, &req); err != nil {
				r.failf("%s: request: %v", sync.EpisodeKey, err)
				continue
			}
			if err := json.Unmarshal(req.Body, &obj); err != nil {
				r.failf("%s: request body: %v", sync.EpisodeKey, err)
				continue
			}
			if obj.Seq <= seq {
				r.failf("%s/%s: truth seq %d applied (event %s, audit %d) after seq %d", flowTruth, e.id, obj.Seq, s.eventID, s.auditID, seq)
			}
			if obj.Seq < 1 || obj.Seq > len(e.states) || obj.Status != e.states[obj.Seq-1] {
				r.failf("%s/%s: applied truth %+v that the source never had", flowTruth, e.id, obj)
			}
			seq = obj.Seq
			want := truthEffects(obj.Status)
			for _, name := range []string{"sync_warehouse", "ship"} {
				has := byKey[flow.EpisodeKey(flowTruth, e.id, s.version, name)] != nil
				if has != slices.Contains(want, name) {
					r.failf("%s/%s: version %s (%s): effect %s present = %v", flowTruth, e.id, s.version, obj.Status, name, has)
				}
			}
		case store.DispositionDuplicate:
		default:
			r.failf("%s/%s: event %s settled %s: %s", flowTruth, e.id, s.eventID, s.disposition, s.reason)
		}
	}
	newest := len(e.states)
	if seq != newest {
		r.failf("%s/%s: newest applied truth seq %d, want %d", flowTruth, e.id, seq, newest)
	}
	p, err := r.st.ProjectionGet(r.ctx, &store.ProjectionGetParams{Flow: flowTruth, Entity: e.id})
	if err != nil || p == nil {
		r.failf("%s/%s: projection: %v, %v", flowTruth, e.id, p, err)
		return
	}
	var obj truthObject
	if err := json.Unmarshal(p.State, &obj); err != nil || obj.Seq != newest || obj.Status != e.states[newest-1] || obj.ID != e.id {
		r.failf("%s/%s: projection %s %s (%v), want the final truth seq %d %s", flowTruth, e.id, p.Version, p.State, err, newest, e.states[newest-1])
	}
}

// flows names the run's flows.
func (r *run) flows() []string {
	if r.w.open {
		return []string{flowRev, flowTruth, flowOpen}
	}
	return []string{flowRev, flowTruth}
}
