package sim

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/store"
)

const (
	// destTimeout is every destination's call timeout: a hang advances
	// the fake clock by it before the destination cuts the call.
	destTimeout = 10 * time.Second
	// deliverLease is the delivery workers' lease; it must exceed
	// destTimeout by more than a quarter of itself (the worker keeps that
	// for the settle).
	deliverLease = time.Minute
	// destWindow is how long the destination keeps idempotency keys: at
	// least the window every destination is configured with, so that the
	// worker's resends within its window are always deduplicated.
	destWindow = 10 * time.Minute
	// maxRedrives is the longest redrive list of the configuration.
	maxRedrives = 2
)

// faultMix is how the destination answers calls it has no saved answer
// for: mostly success, and every fault the worker must survive.
var faultMix = []delivertest.Weighted{
	{Fault: delivertest.Success, Weight: 60},
	{Fault: delivertest.Fail500, Weight: 5},
	{Fault: delivertest.Fail500Saved, Weight: 2},
	{Fault: delivertest.Fail429Seconds, Weight: 2},
	{Fault: delivertest.Fail429Millis, Weight: 2},
	{Fault: delivertest.Fail429Date, Weight: 2},
	{Fault: delivertest.TimeoutBeforeWork, Weight: 3},
	{Fault: delivertest.TimeoutAfterWork, Weight: 4},
	{Fault: delivertest.ResetBeforeWork, Weight: 3},
	{Fault: delivertest.ResetAfterWork, Weight: 4},
	{Fault: delivertest.HiddenFailure, Weight: 2},
	{Fault: delivertest.BatchPartial, Weight: 2},
	{Fault: delivertest.Fail400, Weight: 2},
}

// claimRec is one claim of an effect, by a delivery worker (seen through
// its tap) or by a delivery zombie, with the calls made under it and what
// became of it.
type claimRec struct {
	worker   string
	key      string
	effectID int64
	token    string
	until    time.Time
	resumed  bool // a previous call's outcome was unknown
	posts    int  // calls made under this claim
	lookups  int  // lookups made under this claim
	// committed is set when its settle or release returned nil, at ended
	// on the run's clock; row is the attempts row that settle wrote, if
	// any.
	committed bool
	ended     time.Time
	settled   bool
	row       *store.Attempt
	// lost is set when an abandoned-call row stands for it: its outcome
	// never reached the ledger.
	lost bool
}

// ledgerTap is one delivery worker's view of the ledger and the network:
// it records every claim the worker takes, every call it makes under each
// claim (by episode key, which the worker holds one claim of at a time),
// and how each claim ended, so that the checks can compare the calls with
// the attempts rows.
type ledgerTap struct {
	r    *run
	name string
	st   deliver.Store
	base http.RoundTripper
}

func (t *ledgerTap) EffectClaimGroup(ctx context.Context, ps []*store.EffectClaimParams) ([][]*store.ClaimedEffect, error) {
	got, err := t.st.EffectClaimGroup(ctx, ps)
	for _, cs := range got {
		t.r.recordClaims(t.name, cs)
	}
	return got, err
}

func (t *ledgerTap) EffectSettle(ctx context.Context, p *store.EffectSettleParams) error {
	err := t.st.EffectSettle(ctx, p)
	t.r.concludeClaim(p.Token, err, true, p.Attempt)
	return err
}

func (t *ledgerTap) EffectSettleGroup(ctx context.Context, ps []*store.EffectSettleParams) []error {
	errs := t.st.EffectSettleGroup(ctx, ps)
	for i, p := range ps {
		t.r.concludeClaim(p.Token, errs[i], true, p.Attempt)
	}
	return errs
}

func (t *ledgerTap) EffectRelease(ctx context.Context, p *store.EffectReleaseParams) error {
	err := t.st.EffectRelease(ctx, p)
	t.r.concludeClaim(p.Token, err, false, nil)
	return err
}

func (t *ledgerTap) EffectNewer(ctx context.Context, id int64) (string, error) {
	return t.st.EffectNewer(ctx, id)
}

// RoundTrip counts the call against the worker's open claim of its
// episode key, then makes it.
func (t *ledgerTap) RoundTrip(req *http.Request) (*http.Response, error) {
	key := req.Header.Get("Idempotency-Key")
	if key == "" {
		key = req.Header.Get("X-Episode-Key")
	}
	lookup := false
	if k, ok := strings.CutPrefix(req.URL.Path, "/effects/"); ok && req.Method == http.MethodGet {
		key, lookup = k, true
	}
	t.r.recordCall(t.name, key, lookup)
	return t.base.RoundTrip(req)
}

// deliveries is what the delivery side of a run records while it goes.
type deliveries struct {
	mu     sync.Mutex
	claims []*claimRec
	token  map[string]*claimRec
	open   map[string]*claimRec // worker\x00key: the claim its calls count against
	// notified is the states each episode key was reported to a person in.
	notified map[string][]store.EffectState
	hangs    int
	zombies  []*dzombie
}

func (r *run) recordClaims(worker string, cs []*store.ClaimedEffect) {
	d := &r.dl
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range cs {
		rec := &claimRec{worker: worker, key: c.EpisodeKey, effectID: c.ID, token: c.Token, until: c.Until, resumed: c.Resumed}
		d.claims = append(d.claims, rec)
		d.token[c.Token] = rec
		d.open[worker+"\x00"+c.EpisodeKey] = rec
	}
}

func (r *run) concludeClaim(token string, err error, settle bool, att *store.Attempt) {
	d := &r.dl
	d.mu.Lock()
	defer d.mu.Unlock()
	rec := d.token[token]
	if rec == nil {
		r.failf("a settle or release with token %s that no claim returned", token)
		return
	}
	delete(d.open, rec.worker+"\x00"+rec.key)
	if err == nil {
		rec.committed, rec.settled, rec.ended = true, settle, r.clk.Now()
		if att != nil {
			a := *att
			rec.row = &a
		}
	}
}

func (r *run) recordCall(worker, key string, lookup bool) {
	d := &r.dl
	d.mu.Lock()
	defer d.mu.Unlock()
	rec := d.open[worker+"\x00"+key]
	if rec == nil {
		r.failf("%s called the destination for %s (lookup %v) outside any claim of it", worker, key, lookup)
		return
	}
	if lookup {
		rec.lookups++
	} else {
		rec.posts++
	}
}

// hang is the destination's Hang: the call takes the destination's whole
// timeout on the fake clock, which may run leases out meanwhile.
func (r *run) hang(*http.Request) {
	r.clk.Advance(destTimeout)
	r.dl.mu.Lock()
	r.dl.hangs++
	r.dl.mu.Unlock()
}

// notifier records what the workers tell a person.
type notifier struct{ r *run }

func (n notifier) Notify(_ context.Context, m deliver.Notification) error {
	d := &n.r.dl
	d.mu.Lock()
	d.notified[m.EpisodeKey] = append(d.notified[m.EpisodeKey], m.State)
	d.mu.Unlock()
	return nil
}

// dzombie is a delivery worker that claimed an effect and died before
// calling: after its lease it tries to settle the effect as done anyway.
type dzombie struct {
	name  string
	c     *store.ClaimedEffect
	tried bool
}

// newWorkers builds the run's delivery workers, each behind its tap.
func (r *run) newWorkers(hc *http.Client) error {
	for i, n := range r.w.dworkers {
		name := fmt.Sprintf("deliver-%c", 'a'+i)
		tap := &ledgerTap{r: r, name: name, st: r.st, base: hc.Transport}
		w, err := deliver.New(r.cfg, tap, deliver.Options{
			Workers: n, LeaseFor: deliverLease, Owner: name, Clock: r.clk, Rand: r.jitter,
			HTTPClient: &http.Client{Transport: tap}, Notifier: notifier{r},
		})
		if err != nil {
			return fmt.Errorf("delivery worker: %w", err)
		}
		r.workers = append(r.workers, w)
	}
	return nil
}

// jitter is the workers' backoff draw, from the run's own stream.
func (r *run) jitter() float64 {
	r.jmu.Lock()
	defer r.jmu.Unlock()
	return r.jrand.Float64()
}

// dstep runs one delivery worker's step: it claims what is due and calls.
func (r *run) dstep(i int) {
	n, err := r.workers[i].Step(r.ctx)
	r.logf("deliver step %d: %d claimed", i, n)
	if err != nil && !onlyInjected(err) {
		r.failf("op %d: delivery worker %d step: %v", r.ops, i, err)
	}
}

// dabandon claims one due effect as a delivery worker that then dies
// before calling: the claim after its lease must count its call as
// abandoned and reconcile, and its own settle must be refused.
func (r *run) dabandon() {
	if len(r.dl.zombies) >= 3 {
		return
	}
	name := fmt.Sprintf("deliver-zombie-%d", len(r.dl.zombies)+1)
	cs, err := r.st.EffectClaim(r.ctx, &store.EffectClaimParams{Owner: name, Now: r.clk.Now(), LeaseFor: deliverLease, Limit: 1, MaxRedrives: maxRedrives})
	if err != nil {
		if !onlyInjected(err) {
			r.failf("op %d: delivery zombie claim: %v", r.ops, err)
		}
		return
	}
	if len(cs) == 0 {
		return
	}
	r.recordClaims(name, cs)
	r.dl.mu.Lock()
	r.dl.zombies = append(r.dl.zombies, &dzombie{name: name, c: cs[0]})
	r.dl.mu.Unlock()
	r.logf("%s claims effect %s and dies", name, cs[0].EpisodeKey)
}

// dzombiesTry makes every delivery zombie whose lease has run out settle
// its effect as done: fencing must refuse it.
func (r *run) dzombiesTry() {
	now := r.clk.Now()
	for _, z := range r.dl.zombies {
		if z.tried || now.Before(z.c.Until) {
			continue
		}
		err := r.st.EffectSettle(r.ctx, &store.EffectSettleParams{EffectID: z.c.ID, Token: z.c.Token, Now: now, Actor: z.name,
			State: store.EffectDone, Reason: "a zombie says so"})
		if onlyInjected(err) && err != nil {
			continue // the write failed before fencing could say anything: try again later
		}
		z.tried = true
		r.stats.dzombies++
		r.logf("%s wakes up and settles %s: %v", z.name, z.c.EpisodeKey, err)
		if !errors.Is(err, store.ErrLeaseLost) {
			r.failf("op %d: %s settled %s with an expired lease: %v, want ErrLeaseLost", r.ops, z.name, z.c.EpisodeKey, err)
		}
	}
}
