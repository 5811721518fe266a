package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/replay"
	"github.com/hookledger/hookledger/internal/store"
)

// simStore is what a simulated deployment needs of a driver.
type simStore interface {
	store.Store
	store.Pipeline
}

const (
	leaseFor   = 30 * time.Second
	retryDelay = 5 * time.Second
	source     = "shop"
	flowRev    = "orders"
	flowTruth  = "orders_truth"
	flowOpen   = "orders_open"
)

// epoch is where every run's fake clock starts, so that times, and hence
// everything derived from them, repeat from one run of a seed to the next.
var epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// delivery is one transport attempt of a webhook waiting "on the
// network".
type delivery struct {
	in store.DeliveryInput
}

// evInfo is what the world knows about an event id.
type evInfo struct {
	entity *entity
	rev    int
}

// zombie holds a lease it took and then "died" with: it neither applies nor
// releases, and later, after the lease has expired, tries to write with it.
type zombie struct {
	name  string
	lease *store.Lease
	item  *store.WorkItem
	tried bool
}

// replaySnap is what the ledger held when a replay was enqueued: no effect
// of a version already applied then may appear afterwards.
type replaySnap struct {
	at      int // op index, for messages
	applied map[string]bool
	keys    map[string]bool
}

// run is one seed's simulation against one store.
type run struct {
	ctx     context.Context
	w       *world
	r       *rand.Rand
	st      simStore
	clk     *clock.Fake
	truth   *truth
	cfg     *config.Config
	watch   *orderWatch
	engines []*flow.Engine
	workers []*deliver.Worker
	dest    *delivertest.Server

	published map[string]int // revisions published so far per entity
	pool      []*delivery    // delivered by nobody yet
	events    map[string]evInfo
	requests  int
	zombies   []*zombie
	replays   []replaySnap
	ops       int
	// stored counts the deliveries of each event id the inbox committed.
	stored map[string]int

	dl      deliveries
	hostile hostiles
	faults  storeFaults
	jmu     sync.Mutex
	jrand   *rand.Rand

	mu    sync.Mutex // guards trace and errs (parallel steps report)
	trace []string
	errs  []string
	stats stats
}

// stats count what a run exercised, so that a green run can be told apart
// from one whose schedules never reach the interesting cases.
type stats struct {
	seeds, events, deliveries, zombies, replays, jumps, refetch503 int
	settled                                                        map[string]int

	// The delivery side: destination answers by fault, answers replayed
	// from a saved key, lookups, hangs, claims (resumed ones, abandoned
	// ones whose calls an attempts row counts, lookups made after an
	// unknown outcome in the same claim), zombie settles refused, final
	// effect states, and episode keys inserted again over an existing row.
	faults                                          map[string]int
	replayed, lookups, hangs, claims, resumed, lost int
	unrowedLookups, dzombies, reinserted, notified  int
	effects                                         map[string]int
	storeFaults, storeFaultSeeds, reappliedVersions int
	storeFaultKinds                                 map[string]int
	// hostile counts the hostile events by field, value and what became
	// of them ("intent=nul:dead_lettered", "eventId=600:refused").
	hostile map[string]int
}

func (s *stats) add(o *stats) {
	s.seeds += o.seeds
	s.events += o.events
	s.deliveries += o.deliveries
	s.zombies += o.zombies
	s.replays += o.replays
	s.jumps += o.jumps
	s.refetch503 += o.refetch503
	s.replayed += o.replayed
	s.lookups += o.lookups
	s.hangs += o.hangs
	s.claims += o.claims
	s.resumed += o.resumed
	s.lost += o.lost
	s.unrowedLookups += o.unrowedLookups
	s.dzombies += o.dzombies
	s.reinserted += o.reinserted
	s.notified += o.notified
	s.storeFaults += o.storeFaults
	s.storeFaultSeeds += o.storeFaultSeeds
	s.reappliedVersions += o.reappliedVersions
	for _, m := range []struct {
		dst *map[string]int
		src map[string]int
	}{
		{&s.settled, o.settled}, {&s.faults, o.faults}, {&s.effects, o.effects}, {&s.storeFaultKinds, o.storeFaultKinds},
		{&s.hostile, o.hostile},
	} {
		if *m.dst == nil {
			*m.dst = map[string]int{}
		}
		for k, v := range m.src {
			(*m.dst)[k] += v
		}
	}
}

func (r *run) logf(format string, args ...any) {
	r.mu.Lock()
	r.trace = append(r.trace, fmt.Sprintf("%04d %s ", r.ops, r.clk.Now().Sub(epoch))+fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func (r *run) failf(format string, args ...any) {
	r.mu.Lock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.mu.Unlock()
}

func newRun(ctx context.Context, seed uint64, st simStore, sl *slot) (*run, error) {
	rng := newRand(seed)
	w := genWorld(seed, rng)
	cfg, err := sl.config(w.open)
	if err != nil {
		return nil, err
	}
	r := &run{
		ctx: ctx, w: w, r: rng, st: st, clk: clock.NewFake(epoch), truth: newTruth(w), cfg: cfg,
		published: map[string]int{}, events: map[string]evInfo{}, stored: map[string]int{}, dest: sl.dest,
		jrand: newRand(seed ^ 0x6a09e667f3bcc908), hostile: newHostiles(seed),
	}
	r.dl.token, r.dl.open, r.dl.notified = map[string]*claimRec{}, map[string]*claimRec{}, map[string][]store.EffectState{}
	frand := newRand(seed ^ 0xbb67ae8584caa73b)
	r.faults = storeFaults{every: w.faultEvery, on: true, draw: frand.IntN, kinds: map[string]int{}}
	if sl.faults != nil {
		sl.faults.set(r.faults.fault)
	} else {
		r.faults.every = 0 // this backend cannot inject store faults
	}
	sl.api.set(r.truth)
	sl.dest.Reset(delivertest.Options{Seed: seed, Mix: faultMix, IdempotencyHeader: "Idempotency-Key", KeyHeader: "X-Episode-Key",
		Window: destWindow, Now: r.clk.Now, Hang: r.hang})
	// Every engine, zombie and replay goes through the order watch.
	r.watch = newOrderWatch(st, r)
	r.st = r.watch
	for i := range w.engines {
		r.engines = append(r.engines, flow.New(cfg, r.st, flow.Options{
			Workers: w.workers[i], LeaseFor: leaseFor, RetryDelay: retryDelay,
			Owner: fmt.Sprintf("engine-%c", 'a'+i), Clock: r.clk, HTTPClient: sl.hc,
		}))
	}
	if err := r.newWorkers(sl.dc); err != nil {
		return nil, err
	}
	return r, nil
}

// execute runs the schedule, drains and checks; it returns the violations.
func (r *run) execute() []string {
	r.schedule()
	r.finish()
	r.check()
	return r.errs
}

// unpublished reports whether some entity still has revisions to publish.
func (r *run) unpublished() []*entity {
	var out []*entity
	for _, e := range r.w.entities {
		if r.published[e.id] < len(e.states) {
			out = append(out, e)
		}
	}
	return out
}

// schedule interleaves the source publishing revisions, the network
// delivering (and redelivering) webhooks in any order, engines stepping,
// time passing, replays and dying workers, until every revision has been
// published and every delivery made.
func (r *run) schedule() {
	for {
		left := r.unpublished()
		if len(left) == 0 && len(r.pool) == 0 {
			return
		}
		r.ops++
		r.maybeHostile()
		switch n := r.r.IntN(100); {
		// Replays are rare because each one may redo the whole world.
		case n < 22 && len(left) > 0:
			r.publish(left[r.r.IntN(len(left))])
		case n < 52 && len(r.pool) > 0:
			r.deliver()
		case n < 68:
			r.step(r.r.IntN(len(r.engines)))
		case n < 74:
			if len(r.workers) > 0 {
				r.dstep(r.r.IntN(len(r.workers)))
			}
		case n < 79:
			r.parallel()
		case n < 89:
			d := time.Duration(1+r.r.IntN(8)) * time.Second
			r.clk.Advance(d)
			r.logf("tick %s", d)
		case n < 92:
			r.expire()
		case n < 94:
			r.replay(false)
		case n < 98:
			r.abandon()
		default:
			if len(r.workers) > 0 {
				r.dabandon()
			}
		}
	}
}

// publish advances the source's truth of e by one revision, then sends its
// webhook: one event, sometimes a second event id for the same revision,
// each delivered once or more (the same delivery again, or the same event
// under a new delivery).
func (r *run) publish(e *entity) {
	rev := r.published[e.id] + 1
	r.published[e.id] = rev
	r.truth.publish(e, rev)
	ids := []string{fmt.Sprintf("evt-%s-r%d", e.id, rev)}
	if r.r.IntN(5) == 0 {
		ids = append(ids, fmt.Sprintf("evt-%s-r%d-again", e.id, rev))
	}
	for _, id := range ids {
		r.events[id] = evInfo{entity: e, rev: rev}
		body := eventBody(id, e, rev)
		copies := 1
		if r.r.IntN(3) == 0 {
			copies += 1 + r.r.IntN(2)
		}
		r.requests++
		req := fmt.Sprintf("req-%d", r.requests)
		for c := range copies {
			if c > 0 && r.r.IntN(2) == 0 {
				r.requests++
				req = fmt.Sprintf("req-%d", r.requests)
			}
			r.pool = append(r.pool, &delivery{in: store.DeliveryInput{
				RequestID: req, Source: source, EventID: id, Type: "order." + strings.ToLower(e.states[rev-1]),
				Entity: e.id, Body: body,
			}})
		}
	}
	r.logf("publish %s r%d %s: %v", e.id, rev, e.states[rev-1], ids)
}

// deliver commits a few random in-flight deliveries (reordering them), as
// one batch or as separate requests in one group commit.
func (r *run) deliver() {
	k := min(1+r.r.IntN(3), len(r.pool))
	var picked []*delivery
	for range k {
		i := r.r.IntN(len(r.pool))
		picked = append(picked, r.pool[i])
		r.pool[i] = r.pool[len(r.pool)-1]
		r.pool = r.pool[:len(r.pool)-1]
	}
	batch := r.r.IntN(3) == 0
	p := &store.InboxCommitParams{}
	var names []string
	for i, d := range picked {
		in := d.in
		in.ReceivedAt = r.clk.Now()
		if batch {
			if len(p.Submissions) == 0 {
				p.Submissions = append(p.Submissions, &store.Submission{})
			}
			in.BatchIndex = i
			p.Submissions[0].Deliveries = append(p.Submissions[0].Deliveries, &in)
		} else {
			p.Submissions = append(p.Submissions, &store.Submission{Deliveries: []*store.DeliveryInput{&in}})
		}
		names = append(names, in.EventID+"@"+in.RequestID)
	}
	r.stats.deliveries += len(picked)
	res, err := r.st.InboxCommit(r.ctx, p)
	if err != nil {
		if !onlyInjected(err) {
			r.failf("op %d: inbox commit %v: %v", r.ops, names, err)
		}
		// The receiver answers 5xx and the sender delivers again later.
		r.pool = append(r.pool, picked...)
		r.logf("deliver batch=%v %v: failed, redelivered later: %v", batch, names, err)
		return
	}
	var failed []string
	for i, sr := range res {
		subs := p.Submissions[i].Deliveries
		if sr.Err != nil {
			if !onlyInjected(sr.Err) {
				r.failf("op %d: inbox commit %v: submission %d: %v", r.ops, names, i, sr.Err)
			}
			for _, in := range subs {
				failed = append(failed, in.EventID+"@"+in.RequestID)
			}
			if batch {
				r.pool = append(r.pool, picked...)
			} else {
				r.pool = append(r.pool, picked[i])
			}
			continue
		}
		for _, in := range subs {
			r.stored[in.EventID]++
		}
	}
	r.logf("deliver batch=%v %v (failed, redelivered later: %v)", batch, names, failed)
}

func (r *run) step(i int) {
	n, err := r.engines[i].Step(r.ctx)
	r.logf("step engine %d: %d settled", i, n)
	if err != nil && !onlyInjected(err) {
		r.failf("op %d: engine %d step: %v", r.ops, i, err)
	}
}

// parallel steps every engine, and often every delivery worker, at once
// on goroutines; sometimes the clock jumps past the leases meanwhile, so
// an engine may lose its lease in the middle of an entity, or a worker in
// the middle of a call, and another take it over.
func (r *run) parallel() {
	rounds := make([]int, len(r.engines))
	for i := range rounds {
		rounds[i] = 1 + r.r.IntN(2)
	}
	delivering := r.r.IntN(2) == 0
	jump := r.r.IntN(4) == 0
	var wg sync.WaitGroup
	for i, e := range r.engines {
		wg.Go(func() {
			for range rounds[i] {
				if _, err := e.Step(r.ctx); err != nil && !onlyInjected(err) {
					r.failf("op %d: engine %d parallel step: %v", r.ops, i, err)
				}
			}
		})
	}
	if delivering {
		for i, w := range r.workers {
			wg.Go(func() {
				if _, err := w.Step(r.ctx); err != nil && !onlyInjected(err) {
					r.failf("op %d: delivery worker %d parallel step: %v", r.ops, i, err)
				}
			})
		}
	}
	if jump {
		r.stats.jumps++
		wg.Go(func() { r.clk.Advance(max(leaseFor, deliverLease) + time.Second) })
	}
	wg.Wait()
	r.logf("parallel steps %v delivering=%v jump=%v", rounds, delivering, jump)
}

// expire lets every lease taken so far run out, then lets the zombies
// whose lease is over try to write.
func (r *run) expire() {
	r.clk.Advance(max(leaseFor, deliverLease) + time.Second)
	r.logf("expire leases")
	r.zombiesTry()
	r.dzombiesTry()
}

// abandon claims an entity as a worker that then dies: it never applies and
// never releases. Until the lease runs out nobody else may process it.
func (r *run) abandon() {
	if len(r.zombies) >= 4 {
		return
	}
	name := fmt.Sprintf("zombie-%d", len(r.zombies)+1)
	ls, err := r.st.EntityClaim(r.ctx, &store.EntityClaimParams{Owner: name, Now: r.clk.Now(), LeaseFor: leaseFor, Limit: 1})
	if err != nil {
		if !onlyInjected(err) {
			r.failf("op %d: zombie claim: %v", r.ops, err)
		}
		return
	}
	if len(ls) == 0 {
		return
	}
	l := ls[0]
	items, err := r.st.WorkListPending(r.ctx, &store.WorkListPendingParams{Flow: l.Flow, Entity: l.Entity, Limit: 1})
	if err != nil {
		r.failf("op %d: zombie work list: %v", r.ops, err)
		return
	}
	if len(items) == 0 {
		r.failf("op %d: %s claimed %s/%s, which has no pending work", r.ops, name, l.Flow, l.Entity)
		return
	}
	r.zombies = append(r.zombies, &zombie{name: name, lease: l, item: items[0]})
	r.logf("%s claims %s/%s (work %d) and dies", name, l.Flow, l.Entity, items[0].ID)
}

// zombieVersion is a version no event carries: if it ever shows up in the
// projection or the ledger, a zombie wrote.
const zombieVersion = "r999999"

// zombiesTry makes every zombie whose lease has run out try to apply its
// work item with a forged newer version. Fencing must refuse it whole.
func (r *run) zombiesTry() {
	now := r.clk.Now()
	for _, z := range r.zombies {
		if z.tried || now.Before(z.lease.Until) {
			continue
		}
		res, err := r.st.FlowApply(r.ctx, &store.FlowApplyParams{
			Lease: z.lease, Now: now, WorkID: z.item.ID, EventPK: z.item.Event.PK, Actor: z.name,
			Version: zombieVersion, VersionSort: "99999999999999999999999", Ordered: true, State: []byte(`"ZOMBIE"`),
			Effects: []*store.EffectInsert{{
				EpisodeKey: flow.EpisodeKey(z.lease.Flow, z.lease.Entity, zombieVersion, "zombie_effect"),
				Effect:     "zombie_effect", Destination: "nowhere", Request: []byte(`{}`),
			}},
		})
		if err != nil && onlyInjected(err) {
			continue // failed before fencing could say anything: try again later
		}
		z.tried = true
		r.stats.zombies++
		r.logf("%s wakes up and applies work %d: %v", z.name, z.item.ID, err)
		if !errors.Is(err, store.ErrLeaseLost) {
			r.failf("op %d: %s applied with an expired lease on %s/%s: got (%+v, %v), want ErrLeaseLost",
				r.ops, z.name, z.lease.Flow, z.lease.Entity, res, err)
		}
	}
}

// replay re-runs a random selection of stored events (or all of them),
// after noting what the ledger holds.
func (r *run) replay(everything bool) {
	snap := replaySnap{at: r.ops}
	var err error
	// Applied versions first, then the keys: an apply committing between
	// the two reads only makes the check more permissive, never wrong.
	if snap.applied, err = r.appliedVersions(); err != nil {
		r.failf("op %d: replay snapshot: %v", r.ops, err)
		return
	}
	effects, err := r.effects()
	if err != nil {
		r.failf("op %d: replay snapshot: %v", r.ops, err)
		return
	}
	snap.keys = map[string]bool{}
	for _, e := range effects {
		snap.keys[e.EpisodeKey] = true
	}
	// Mostly one entity: a replay of everything redoes the whole world,
	// which the final replay already does now and then.
	sel := replay.Selection{Source: source, Actor: "sim"}
	if !everything {
		switch n := r.r.IntN(10); {
		case n < 4:
			sel.Entity = r.w.entities[r.r.IntN(len(r.w.entities))].id
		case n < 7:
			sel.Flow = []string{flowRev, flowTruth}[r.r.IntN(2)]
			sel.Entity = r.w.entities[r.r.IntN(len(r.w.entities))].id
		case n < 9:
			sel.Flow = []string{flowRev, flowTruth}[r.r.IntN(2)]
		}
	}
	res, err := replay.Run(r.ctx, r.st, r.engines[0], sel, r.clk.Now())
	if err != nil && !errors.Is(err, replay.ErrNothingSelected) {
		if !onlyInjected(err) {
			r.failf("op %d: replay %+v: %v", r.ops, sel, err)
		}
		r.logf("replay flow=%q entity=%q: %v", sel.Flow, sel.Entity, err)
		return
	}
	r.replays = append(r.replays, snap)
	r.stats.replays++
	r.logf("replay flow=%q entity=%q: %+v", sel.Flow, sel.Entity, res)
}

// finish stops injecting store faults, wakes the remaining zombies, drains
// every engine and delivery worker (advancing the clock so that deferred
// and abandoned entities, retries and re-drives become due), and sometimes
// replays everything once more.
func (r *run) finish() {
	r.ops++
	r.faults.enable(false)
	r.flushHostile()
	r.clk.Advance(max(leaseFor, deliverLease) + time.Second)
	r.zombiesTry()
	r.dzombiesTry()
	r.drain()
	if r.r.IntN(4) == 0 {
		r.ops++
		r.replay(true)
		r.drain()
	}
}

// drainPoll is how late the drain claims an effect due: a worker polls
// now and then, and the effects due meanwhile share its claims.
const drainPoll = 5 * time.Second

// drain runs engines and delivery workers until no work is pending and
// every effect has reached a state nothing will move it from by itself,
// advancing the clock only when nothing is due.
func (r *run) drain() {
	// A failure that repeats every round is reported once.
	seen := map[string]bool{}
	failOnce := func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !seen[msg] {
			seen[msg] = true
			r.failf("%s", msg)
		}
	}
	for round := range 300 {
		n, err := r.st.WorkCount(r.ctx)
		if err != nil {
			r.failf("drain: work count: %v", err)
			return
		}
		if n > 0 {
			for i, e := range r.engines {
				// An error is a violation, but draining goes on: the engine
				// deferred the entity, and what the failure leaves behind is
				// for the other invariants to judge.
				if err := e.Drain(r.ctx); err != nil {
					failOnce("drain: engine %d: %v", i, err)
				}
			}
			if n, err = r.st.WorkCount(r.ctx); err != nil {
				r.failf("drain: work count: %v", err)
				return
			}
		}
		var due time.Time
		var waiting int
		if len(r.workers) > 0 {
			if due, waiting, err = r.nextDue(); err != nil {
				r.failf("drain: %v", err)
				return
			}
		}
		if waiting > 0 && !due.After(r.clk.Now()) {
			// One worker steps, in turn, then the drain looks again: a
			// step that finds nothing due would cost a claim per
			// destination.
			i := round % len(r.workers)
			if _, err := r.workers[i].Step(r.ctx); err != nil {
				failOnce("drain: delivery worker %d: %v", i, err)
			}
			continue
		}
		if n == 0 && waiting == 0 {
			r.logf("drained")
			return
		}
		// Past the leases and retry delays of the processor; or to the
		// next effect due, when that comes first.
		step := max(leaseFor, retryDelay) + time.Second
		if n == 0 {
			step = deliverLease + time.Second
		}
		if waiting > 0 {
			// A little past it, as a worker polling now and then would
			// find it, with whatever else fell due meanwhile.
			step = min(step, due.Sub(r.clk.Now())+drainPoll)
		}
		r.clk.Advance(step)
		r.logf("drain: %d work items pending, %d effects waiting; advancing %s", n, waiting, step)
	}
	r.failf("drain: work or effects still pending after 300 rounds of draining")
}

// nextDue is when the next effect that is neither final nor waiting for a
// person becomes due, and how many such effects there are.
func (r *run) nextDue() (time.Time, int, error) {
	effects, err := r.effects()
	if err != nil {
		return time.Time{}, 0, err
	}
	var next time.Time
	waiting := 0
	for _, e := range effects {
		at, ok := dueAt(e)
		if !ok {
			continue
		}
		waiting++
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next, waiting, nil
}

// dueAt is when something will move the effect again by itself: its next
// attempt, or the end of its claim's lease; false when nothing will.
func dueAt(e *store.Effect) (time.Time, bool) {
	switch e.State {
	case store.EffectApproved, store.EffectRetryWait:
		return e.NextAttemptAt, true
	case store.EffectSubmitting:
		return e.UpdatedAt.Add(deliverLease), true
	case store.EffectNeedsReconciliation, store.EffectDead:
		return e.NextAttemptAt, !e.NextAttemptAt.IsZero()
	}
	return time.Time{}, false
}
