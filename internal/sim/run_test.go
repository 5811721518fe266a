package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
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
)

// epoch is where every run's fake clock starts, so that times, and hence
// everything derived from them, repeat from one run of a seed to the next.
var epoch = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)

// delivery is one transport attempt waiting "on the network".
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
	engines []*flow.Engine

	published map[string]int // revisions published so far per entity
	pool      []*delivery    // delivered by nobody yet
	events    map[string]evInfo
	requests  int
	zombies   []*zombie
	replays   []replaySnap
	ops       int

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
}

func (s *stats) add(o *stats) {
	s.seeds += o.seeds
	s.events += o.events
	s.deliveries += o.deliveries
	s.zombies += o.zombies
	s.replays += o.replays
	s.jumps += o.jumps
	s.refetch503 += o.refetch503
	if s.settled == nil {
		s.settled = map[string]int{}
	}
	for k, v := range o.settled {
		s.settled[k] += v
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

func newRun(ctx context.Context, seed uint64, st simStore, api *apiServer, apiURL string, hc *http.Client) (*run, error) {
	rng := newRand(seed)
	w := genWorld(seed, rng)
	cfg, err := config.Parse("sim.yaml", []byte(simConfig(apiURL)), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, fmt.Errorf("simulation config: %w", err)
	}
	r := &run{
		ctx: ctx, w: w, r: rng, st: st, clk: clock.NewFake(epoch), truth: newTruth(w), cfg: cfg,
		published: map[string]int{}, events: map[string]evInfo{},
	}
	api.set(r.truth)
	// Every engine, zombie and replay goes through the order watch.
	r.st = newOrderWatch(st, r)
	for i := range w.engines {
		r.engines = append(r.engines, flow.New(cfg, r.st, flow.Options{
			Workers: w.workers[i], LeaseFor: leaseFor, RetryDelay: retryDelay,
			Owner: fmt.Sprintf("engine-%c", 'a'+i), Clock: r.clk, HTTPClient: hc,
		}))
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
		switch n := r.r.IntN(100); {
		// Replays are rare because each one may redo the whole world.
		case n < 22 && len(left) > 0:
			r.publish(left[r.r.IntN(len(left))])
		case n < 56 && len(r.pool) > 0:
			r.deliver()
		case n < 72:
			r.step(r.r.IntN(len(r.engines)))
		case n < 78:
			r.parallel()
		case n < 88:
			d := time.Duration(1+r.r.IntN(8)) * time.Second
			r.clk.Advance(d)
			r.logf("tick %s", d)
		case n < 92:
			r.expire()
		case n < 94:
			r.replay(false)
		default:
			r.abandon()
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
		r.failf("op %d: inbox commit %v: %v", r.ops, names, err)
		return
	}
	for i, sr := range res {
		if sr.Err != nil {
			r.failf("op %d: inbox commit %v: submission %d: %v", r.ops, names, i, sr.Err)
		}
	}
	r.logf("deliver batch=%v %v", batch, names)
}

func (r *run) step(i int) {
	n, err := r.engines[i].Step(r.ctx)
	r.logf("step engine %d: %d settled", i, n)
	if err != nil {
		r.failf("op %d: engine %d step: %v", r.ops, i, err)
	}
}

// parallel steps every engine at once on goroutines; sometimes the clock
// jumps past the lease meanwhile, so an engine may lose its lease in the
// middle of an entity and another take it over.
func (r *run) parallel() {
	rounds := make([]int, len(r.engines))
	for i := range rounds {
		rounds[i] = 1 + r.r.IntN(2)
	}
	jump := r.r.IntN(4) == 0
	var wg sync.WaitGroup
	for i, e := range r.engines {
		wg.Go(func() {
			for range rounds[i] {
				if _, err := e.Step(r.ctx); err != nil {
					r.failf("op %d: engine %d parallel step: %v", r.ops, i, err)
				}
			}
		})
	}
	if jump {
		r.stats.jumps++
		wg.Go(func() { r.clk.Advance(leaseFor + time.Second) })
	}
	wg.Wait()
	r.logf("parallel steps %v jump=%v", rounds, jump)
}

// expire lets every lease taken so far run out, then lets the zombies
// whose lease is over try to write.
func (r *run) expire() {
	r.clk.Advance(leaseFor + time.Second)
	r.logf("expire leases")
	r.zombiesTry()
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
		r.failf("op %d: zombie claim: %v", r.ops, err)
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
		z.tried = true
		r.stats.zombies++
		res, err := r.st.FlowApply(r.ctx, &store.FlowApplyParams{
			Lease: z.lease, Now: now, WorkID: z.item.ID, EventPK: z.item.Event.PK, Actor: z.name,
			Version: zombieVersion, VersionSort: "99999999999999999999999", Ordered: true, State: []byte(`"ZOMBIE"`),
			Effects: []*store.EffectInsert{{
				EpisodeKey: flow.EpisodeKey(z.lease.Flow, z.lease.Entity, zombieVersion, "zombie_effect"),
				Effect:     "zombie_effect", Destination: "nowhere", Request: []byte(`{}`),
			}},
		})
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
		r.failf("op %d: replay %+v: %v", r.ops, sel, err)
		return
	}
	r.replays = append(r.replays, snap)
	r.stats.replays++
	r.logf("replay flow=%q entity=%q: %+v", sel.Flow, sel.Entity, res)
}

// finish wakes the remaining zombies, drains every engine (advancing the
// clock so that deferred and abandoned entities become due), and
// sometimes replays everything once more.
func (r *run) finish() {
	r.ops++
	r.clk.Advance(leaseFor + time.Second)
	r.zombiesTry()
	r.drain()
	if r.r.IntN(4) == 0 {
		r.ops++
		r.replay(true)
		r.drain()
	}
}

func (r *run) drain() {
	for range 40 {
		for i, e := range r.engines {
			// An error is a violation, but draining goes on: the engine
			// deferred the entity, and what the failure leaves behind is
			// for the other invariants to judge.
			if err := e.Drain(r.ctx); err != nil {
				r.failf("drain: engine %d: %v", i, err)
			}
		}
		n, err := r.st.WorkCount(r.ctx)
		if err != nil {
			r.failf("drain: work count: %v", err)
			return
		}
		if n == 0 {
			r.logf("drained")
			return
		}
		r.clk.Advance(max(leaseFor, retryDelay) + time.Second)
		r.logf("drain: %d pending, advancing past leases and retry delays", n)
	}
	r.failf("drain: work still pending after 40 rounds of draining")
}
