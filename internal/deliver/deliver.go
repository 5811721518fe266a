// Package deliver carries out the effects in the ledger against real,
// unreliable destinations: it claims an effect before calling (IP05), makes
// exactly one call per attempt with no retries below it (RT01), classifies
// the answer by status and body (RT03), waits with full-jitter backoff or
// the destination's Retry-After (RT04, RT05), never retries a permanent
// error (RT06), settles unknown outcomes by lookup or by an idempotent
// resend inside the key's window and otherwise hands them to a person
// (IP04, IP07), and leaves the evidence of every call in the attempts table.
package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/time/rate"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/expr"
	"github.com/hookledger/hookledger/internal/groupcommit"
	"github.com/hookledger/hookledger/internal/health"
	"github.com/hookledger/hookledger/internal/logging"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// maxSettleGroup bounds the settles written in one transaction: its locks
// are held until the commit.
const maxSettleGroup = 64

// Store is the part of the ledger the worker uses.
type Store interface {
	EffectClaimGroup(ctx context.Context, ps []*store.EffectClaimParams) ([][]*store.ClaimedEffect, error)
	EffectSettle(ctx context.Context, p *store.EffectSettleParams) error
	EffectSettleGroup(ctx context.Context, ps []*store.EffectSettleParams) []error
	EffectRelease(ctx context.Context, p *store.EffectReleaseParams) error
	EffectNewer(ctx context.Context, id int64) (string, error)
}

// Options tune the worker; zero values take defaults.
type Options struct {
	// Workers bounds concurrent calls (default config.DefaultWorkers).
	Workers int
	// LeaseFor must exceed the longest destination timeout: an effect
	// still submitting after it is presumed abandoned (default 2 min).
	LeaseFor time.Duration
	// PollInterval is how often an idle worker looks for due effects.
	PollInterval time.Duration
	Owner        string
	Logger       *slog.Logger
	Clock        clock.Clock
	// Actions adds destination kinds beyond "http".
	Actions map[string]Action
	// HTTPClient is used by the http action, lookups and the notification
	// webhook (default: a client with keep-alives). Redirects are never
	// followed, whatever its CheckRedirect says: a 3xx is an answer. Its
	// transport (an *http.Transport) is cloned with a dial that refuses
	// non-public addresses for every destination without
	// allow_private_networks (outbound.Guard); another RoundTripper is the
	// embedding program's own network and is used as given.
	HTTPClient *http.Client
	// Resolver resolves destination host names for that check (default
	// net.DefaultResolver).
	Resolver outbound.Resolver
	// Rand draws jitter in [0, 1) (default math/rand/v2); tests fix it.
	Rand func() float64
	// Notifier is told when an effect needs a person (default: the
	// configured webhook, or nothing).
	Notifier Notifier
	// Metrics records calls and state changes (nil: none).
	Metrics *Metrics
	// Health hears whether delivery and notification rounds make
	// progress (nil: nobody).
	Health *health.Board
	// Runtime supplies destinations made while running (one per
	// publishing endpoint), beside the configured ones.
	Runtime DestinationSource
	// Tracing records a span per attempt and propagates its context to
	// the destination (nil: tracing.Off).
	Tracing *tracing.Provider
}

// DestinationSource supplies the destinations made at run time. Each one
// is an immutable snapshot: a change comes as a new *Destination and a new
// version.
type DestinationSource interface {
	RuntimeDestinations() (version uint64, dests []*config.Destination)
}

// inFlightLimiter is what a DestinationSource may also be: it sets, from
// moment to moment, how many calls each of its destinations may have in
// flight (an adaptive limit, such as publishing keeps per endpoint),
// never more than the destination's MaxInFlight. 0 means no opinion:
// MaxInFlight applies.
type inFlightLimiter interface {
	InFlightLimit(destination string) int
}

// Worker delivers due effects. In the background it keeps up to Workers
// calls in flight, claiming more as each one ends (never waiting for a
// whole batch), and no destination holds more than its max_in_flight of
// them: one slow or dead destination cannot stall the others.
type Worker struct {
	cfg *config.Config
	st  Store
	// settler sends the settles of calls that end together to the store
	// as one group (Store.EffectSettleGroup).
	settler *groupcommit.Batcher[*store.EffectSettleParams, error]
	opts    Options
	log     *slog.Logger
	clk     clock.Clock
	dests   map[string]*config.Destination
	names   []string
	limits  map[string]*rate.Limiter
	actions map[string]Action
	notify  Notifier
	redrive int
	caps    map[string]int // per destination: calls in flight at most

	mu       sync.Mutex
	static   int            // the configured destinations lead names
	runtime  uint64         // the version of the run-time ones in names
	inflight map[string]int // per destination
	// due holds the destinations where effects may be waiting to be
	// claimed, as far as this worker knows: a claim there took all the
	// room it was given, or effects were written there without a slot. A
	// publish hands nothing over there (ReserveFresh), so that it does
	// not hold slots for effects that would wait behind the backlog.
	due   map[string]bool
	total int
	next  int // where the next round of claims starts, for fairness
	calls sync.WaitGroup
	// runCtx is the context of calls handed over by processing (Take),
	// set by Start and canceled by Stop, as the loop's is for its own;
	// stopped refuses handoffs once Stop waits for the calls.
	runCtx    context.Context
	cancelRun context.CancelFunc
	stopped   bool

	// claimWanted says the loop's next round should claim: set by a wake
	// (effects written), the poll, a claim that used all the room it was
	// given or found none; taken by the round that claims (see fill).
	claimWanted atomic.Bool
	// claimLook is the last claim that found every due effect there was
	// room for: a poll soon after it does not claim again.
	claimLook loop.Look

	// errs keeps a failing store or destination from filling the log.
	errs  *logging.Repeats
	loop  *loop.Loop
	notes *notifyQueue

	tracer  trace.Tracer
	prop    propagation.TextMapPropagator
	traceOn bool
}

// Wake makes an idle background loop look for due effects now (the
// processor calls it after creating effects).
func (w *Worker) Wake() {
	w.claimWanted.Store(true)
	w.loop.Wake()
}

// pollWants asks the poll's round to claim unless a claim that found
// all there was ran just before: at a steady load the wakes claim all
// the time, and the poll's own claim found nothing.
func (w *Worker) pollWants() {
	if !w.loop.Fresh(&w.claimLook) {
		w.claimWanted.Store(true)
	}
}

// New builds a worker for the configured destinations.
func New(cfg *config.Config, st Store, opts Options) (*Worker, error) {
	if opts.Workers <= 0 {
		opts.Workers = config.DefaultWorkers
	}
	if opts.LeaseFor <= 0 {
		opts.LeaseFor = 2 * time.Minute
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 200 * time.Millisecond
	}
	if opts.Owner == "" {
		opts.Owner = fmt.Sprintf("deliver-%08x", rand.Uint32())
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Rand == nil {
		opts.Rand = rand.Float64
	}
	if opts.Tracing == nil {
		opts.Tracing = tracing.Off()
	}
	if opts.HTTPClient == nil {
		opts.HTTPClient = outbound.Client(opts.Workers)
	}
	w := &Worker{
		cfg: cfg, st: st, opts: opts, log: opts.Logger, clk: opts.Clock,
		settler: groupcommit.New(st.EffectSettleGroup, func(*store.EffectSettleParams) int { return 1 }, maxSettleGroup),
		dests:   map[string]*config.Destination{}, limits: map[string]*rate.Limiter{},
		actions:  map[string]Action{"http": &HTTPAction{Client: opts.HTTPClient, Resolver: opts.Resolver}},
		notify:   opts.Notifier,
		caps:     map[string]int{},
		inflight: map[string]int{},
		due:      map[string]bool{},
		errs:     logging.NewRepeats(opts.Logger, opts.Clock, "delivery calls", 0),
		tracer:   opts.Tracing.Tracer(),
		prop:     opts.Tracing.Propagator(),
		traceOn:  opts.Tracing.Enabled(),
	}
	// The poll is how effects coming due (retries, reconciliations) and
	// effects another process wrote are found: it asks for a claim.
	w.loop = loop.New("delivery", w.fill, loop.Options{PollInterval: opts.PollInterval, Logger: opts.Logger, Clock: opts.Clock,
		OnPoll: w.pollWants, Stage: opts.Health.Stage("delivery")})
	for k, a := range opts.Actions {
		w.actions[k] = a
	}
	if w.notify == nil {
		w.notify = newWebhookNotifier(cfg.Notifications, opts.HTTPClient)
	}
	for i := range cfg.Destinations {
		d := &cfg.Destinations[i]
		if _, ok := w.actions[d.Kind]; !ok {
			return nil, fmt.Errorf("destination %s: no action registered for kind %q", d.Name, d.Kind)
		}
		w.dests[d.Name] = d
		w.names = append(w.names, d.Name)
		if d.RateLimit.PerSecond > 0 {
			burst := d.RateLimit.Burst
			if burst <= 0 {
				burst = max(1, int(d.RateLimit.PerSecond))
			}
			w.limits[d.Name] = rate.NewLimiter(rate.Limit(d.RateLimit.PerSecond), burst)
		}
		w.redrive = max(w.redrive, len(d.Retry.Redrive))
		w.caps[d.Name] = d.MaxInFlight
		if w.caps[d.Name] <= 0 {
			w.caps[d.Name] = config.DefaultMaxInFlight(opts.Workers, len(cfg.Destinations))
		}
	}
	w.static = len(w.names)
	if w.notify != nil {
		w.notes = newNotifyQueue(w.notify, opts.Logger, opts.Clock, opts.Health.Stage("notifications"))
	}
	return w, nil
}

// refreshLocked takes the run-time destinations in when their version
// changed (w.mu held). A destination that went away stays known while a
// call to it is in flight, so that call still settles.
func (w *Worker) refreshLocked() {
	if w.opts.Runtime == nil {
		return
	}
	v, ds := w.opts.Runtime.RuntimeDestinations()
	if v == w.runtime {
		return
	}
	w.runtime = v
	names := slices.Clone(w.names[:w.static])
	seen := map[string]bool{}
	for _, d := range ds {
		if _, ok := w.actions[d.Kind]; !ok || seen[d.Name] || (w.dests[d.Name] != nil && slices.Contains(names, d.Name)) {
			continue // no action for it, or a configured name
		}
		seen[d.Name] = true
		old := w.dests[d.Name]
		w.dests[d.Name] = d
		names = append(names, d.Name)
		w.caps[d.Name] = max(d.MaxInFlight, 1)
		if d.RateLimit.PerSecond <= 0 {
			delete(w.limits, d.Name)
		} else if old == nil || old.RateLimit != d.RateLimit || w.limits[d.Name] == nil {
			w.limits[d.Name] = rate.NewLimiter(rate.Limit(d.RateLimit.PerSecond), max(d.RateLimit.Burst, 1, int(d.RateLimit.PerSecond)))
		}
	}
	for _, n := range w.names[w.static:] {
		if !seen[n] && w.inflight[n] == 0 {
			delete(w.dests, n)
			delete(w.caps, n)
			delete(w.limits, n)
		}
	}
	// A configured destination without max_in_flight had its cap sized
	// for the configured peers; alone it took every slot, which would
	// leave the endpoints none in a round. Sized again for all of them.
	for i := range w.cfg.Destinations {
		if d := &w.cfg.Destinations[i]; d.MaxInFlight <= 0 {
			w.caps[d.Name] = config.DefaultMaxInFlight(w.opts.Workers, len(names))
		}
	}
	w.names = names
	if w.next >= len(names) {
		w.next = 0
	}
}

// dest returns the destination named, configured or made at run time.
// It takes in a run-time change first: the change may have been made
// after this round's claim read the destinations and before the effect
// was claimed (an endpoint's url changed, then a message published), and
// that effect must go to the destination as it is now, not as it was.
func (w *Worker) dest(name string) (*config.Destination, *rate.Limiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refreshLocked()
	return w.dests[name], w.limits[name]
}

// Start delivers in the background until Stop (or until ctx ends). A
// second call returns loop.ErrStarted.
func (w *Worker) Start(ctx context.Context) error {
	if w.notes != nil {
		if err := w.notes.start(ctx); err != nil {
			return err
		}
	}
	w.claimWanted.Store(true)
	if err := w.loop.Start(ctx); err != nil {
		return err
	}
	w.mu.Lock()
	w.runCtx, w.cancelRun = context.WithCancel(ctx)
	w.mu.Unlock()
	return nil
}

// Stop ends the background loop: no more claims, and the calls in flight
// are canceled (an effect whose call was cut short stays submitting and is
// reconciled after its lease, never resent blindly). It waits for them,
// then for queued notifications, within ctx. Safe to call twice.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	w.stopped = true
	if w.cancelRun != nil {
		w.cancelRun()
	}
	w.mu.Unlock()
	err := w.loop.Stop(ctx)
	done := make(chan struct{})
	go func() { w.calls.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		err = errors.Join(err, fmt.Errorf("stop delivery: calls still in flight: %w", ctx.Err()))
	}
	if w.notes != nil {
		err = errors.Join(err, w.notes.stop(ctx))
	}
	return err
}

// fill is the background loop's step: it claims as many due effects as
// there are free slots, each destination at most up to its own cap, and
// starts a call for each. A call that ends frees its slot and, when a
// claim waits for one, wakes the loop, so the next effect is claimed at
// once.
//
// It asks for another round at once only when another claim may find
// more (see claim). A claim shorter than its room took every effect due
// at its destination, and what becomes due later wakes the loop
// (processing writing effects) or is found by the poll. Going round again
// after every claim cost one empty claim per effect at light load
// (docs/benchmarks-history.md, "Empty claims at light load").
//
// A round claims only when asked to (claimWanted), and a call that ends
// asks only when a claim waited for its slot: a call ending makes no
// effect due, and claiming after each one cost an empty claim per effect
// at a light load (BENCHMARKS.md, "What a lone webhook asks of the
// database").
func (w *Worker) fill(ctx context.Context) (more bool, err error) {
	if !w.claimWanted.Swap(false) {
		return false, loop.ErrIdle
	}
	claims, more, err := w.claim(ctx)
	w.calls.Add(len(claims))
	for _, c := range claims {
		go w.call(ctx, c)
	}
	if more {
		w.claimWanted.Store(true)
	}
	return more, err
}

// claim takes due effects for the free slots. Destinations are visited
// from a rotating start, each asked for no more than its free room, so a
// destination with a deep backlog cannot take the slots another needs;
// the asks go to the store together, in one transaction
// (store.Ledger.EffectClaimGroup), where a transaction each cost
// PostgreSQL a commit per destination, all writing into the same pages
// at once. more is true
// when another round at once may find more: some destination's claim took
// all the room it was given, or the free slots ran out before every
// destination was asked and this round found something (as the loop did
// before it learnt to stop; the round after starts one destination on).
func (w *Worker) claim(ctx context.Context) (claimed []*store.ClaimedEffect, more bool, err error) {
	type ask struct {
		dest string
		room int
	}
	began := w.loop.Began()
	w.mu.Lock()
	w.refreshLocked()
	if len(w.names) == 0 {
		w.mu.Unlock()
		return nil, false, nil
	}
	free := w.opts.Workers - w.total
	var asks []ask
	partial := false
	for i := range w.names {
		if free <= 0 {
			partial = true
			break
		}
		d := w.names[(w.next+i)%len(w.names)]
		room := min(w.capLocked(d)-w.inflight[d], free)
		if room <= 0 {
			// At its max_in_flight: the next of its calls to end claims.
			w.claimWanted.Store(true)
			continue
		}
		asks = append(asks, ask{d, room})
		free -= room
		// Counted now, so a concurrent round cannot promise the same slots.
		w.inflight[d] += room
		w.total += room
	}
	w.next = (w.next + 1) % len(w.names)
	if partial {
		// The slots ran out: the next call to end claims.
		w.claimWanted.Store(true)
	}
	w.mu.Unlock()
	if len(asks) == 0 {
		return nil, false, nil
	}
	now := w.clk.Now()
	ps := make([]*store.EffectClaimParams, len(asks))
	for i, a := range asks {
		ps[i] = &store.EffectClaimParams{Owner: w.opts.Owner, Now: now, LeaseFor: w.opts.LeaseFor, Limit: a.room,
			Destinations: []string{a.dest}, MaxRedrives: w.redrive}
	}
	results, err := w.st.EffectClaimGroup(ctx, ps)
	if err != nil {
		// Nothing was claimed: every slot promised comes back.
		results = make([][]*store.ClaimedEffect, len(asks))
	}
	var out []*store.ClaimedEffect
	w.mu.Lock()
	for i, a := range asks {
		// Give back the slots promised to this destination and not used.
		unused := a.room - len(results[i])
		w.inflight[a.dest] -= unused
		w.total -= unused
		more = more || unused == 0
		w.due[a.dest] = unused == 0 || err != nil
		out = append(out, results[i]...)
	}
	w.mu.Unlock()
	more = more || partial && len(out) > 0
	w.opts.Metrics.claimed(len(out))
	if err != nil {
		return out, more, err
	}
	if !more && !partial {
		// Every destination with room was asked and gave less than the
		// room: all that was due is taken (a destination at its
		// max_in_flight claims when one of its calls ends).
		w.loop.Looked(&w.claimLook, began)
	}
	return out, more, nil
}

// capLocked is how many calls destination d may have in flight now: its
// max_in_flight, or less when the run-time source limits it (w.mu held).
func (w *Worker) capLocked(d string) int {
	n := w.caps[d]
	if l, ok := w.opts.Runtime.(inFlightLimiter); ok {
		if adaptive := l.InFlightLimit(d); adaptive > 0 {
			n = min(n, adaptive)
		}
	}
	return n
}

// call makes one claimed effect's call in its slot (counted in w.calls
// by the caller), frees the slot, and wakes the loop when a claim waits
// for one.
func (w *Worker) call(ctx context.Context, c *store.ClaimedEffect) {
	defer w.calls.Done()
	sl := &slot{w: w, c: c, wake: true}
	w.run(ctx, c, sl)
	sl.free()
}

// release frees a call's slot.
func (w *Worker) release(c *store.ClaimedEffect) {
	w.mu.Lock()
	w.inflight[c.Destination]--
	w.total--
	w.mu.Unlock()
}

// slot is a claimed effect's place among its destination's calls in
// flight and the worker's. It is freed once: as soon as a successful call
// has its answer, or else when the effect's handling ends. A slot bounds
// calls at the receiver (max_in_flight, delivery.workers); the settle that
// records the answer waits for the one writer's commit, which took most of
// a slot's time when the ledger was busy, and the receiver has nothing to
// do with it.
type slot struct {
	w    *Worker
	c    *store.ClaimedEffect
	wake bool // wake the loop when a claim waits for a slot
	once sync.Once
}

func (s *slot) free() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		s.w.release(s.c)
		if s.wake && s.w.claimWanted.Load() {
			s.w.loop.Wake()
		}
	})
}

// run handles one claimed effect; a panic in code the user supplied has
// already been turned into the effect's outcome by handle, and anything
// else that escapes is logged, never fatal to the process.
func (w *Worker) run(ctx context.Context, c *store.ClaimedEffect, sl *slot) {
	err := loop.Safe(w.log, "delivery of "+c.EpisodeKey, func() error { return w.handle(ctx, c, sl) })
	switch {
	case err == nil:
		w.errs.OK()
	case errors.Is(err, store.ErrLeaseLost), ctx.Err() != nil:
	default:
		w.errs.Fail("delivery failed", err, "effect", c.ID, "episode", c.EpisodeKey, "destination", c.Destination)
	}
}

// Step claims due effects for every free slot, handles them, waits for
// their calls and notifications, and returns how many it claimed. It is
// the synchronous form of the background loop, for tests and tools that
// drive the worker with a fake clock.
func (w *Worker) Step(ctx context.Context) (int, error) {
	claims, _, err := w.claim(ctx)
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, c := range claims {
		wg.Go(func() {
			sl := &slot{w: w, c: c}
			defer sl.free()
			herr := loop.Safe(w.log, "delivery of "+c.EpisodeKey, func() error { return w.handle(ctx, c, sl) })
			if herr != nil && !errors.Is(herr, store.ErrLeaseLost) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("effect %d (%s): %w", c.ID, c.EpisodeKey, herr))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if w.notes != nil {
		w.notes.flush(ctx)
	}
	return len(claims), errors.Join(append(errs, err)...)
}

// Drain steps until no effect is due now.
func (w *Worker) Drain(ctx context.Context) error {
	for {
		n, err := w.Step(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// handle carries out one claimed effect; sl is its slot, freed early once
// a call succeeds (nil: freed by the caller only).
func (w *Worker) handle(ctx context.Context, c *store.ClaimedEffect, sl *slot) error {
	d, lim := w.dest(c.Destination)
	if d == nil {
		return w.st.EffectRelease(ctx, &store.EffectReleaseParams{EffectID: c.ID, Token: c.Token, Now: w.clk.Now(), NotBefore: w.clk.Now().Add(time.Hour)})
	}
	if d.Paused != "" {
		// Nothing is sent while the destination is paused (a disabled
		// endpoint): the effect waits in the exception queue, in sight,
		// until the destination is enabled again and re-drives it.
		return w.settle(ctx, c, d, &store.EffectSettleParams{State: store.EffectDead, Class: c.ErrorClass,
			Reason: "parked: " + d.Paused, SuggestedRepair: d.ParkRepair})
	}
	if newer, err := w.newerVersion(ctx, c); err != nil || newer != "" {
		if err != nil {
			return err
		}
		// Its call was in flight when a newer version was applied (which
		// supersedes only the effects waiting for a call): sent now, it
		// would reach the destination after the newer one, an older state
		// over a newer. Whatever the call did, the newer one carries the
		// current state.
		return w.settle(ctx, c, d, &store.EffectSettleParams{State: store.EffectSuperseded, Class: c.ErrorClass,
			Reason: "superseded by " + newer + ", applied while this effect's call was in flight: sent again, it would reach the destination after the newer version"})
	}
	if c.Resumed {
		// A previous call's outcome is unknown: reconcile, never resend
		// blindly (IP04).
		return w.reconcile(ctx, c, d, nil, "a previous call's outcome is unknown (the worker stopped during it or a lookup was scheduled)")
	}
	if c.Compensates != 0 {
		// A compensation waits for its original (compensation.go).
		if handled, err := w.gateCompensation(ctx, c, d); handled {
			return err
		}
	}
	if now := w.clk.Now(); now.Add(d.Timeout.D() + w.opts.LeaseFor/4).After(c.Until) {
		// Not enough lease left for a call and its settlement: a settle
		// that lost the lease would leave the outcome unknown to the
		// ledger, and the next claim would have to reconcile a call whose
		// answer was in hand. Give it back instead of calling.
		return w.st.EffectRelease(ctx, &store.EffectReleaseParams{EffectID: c.ID, Token: c.Token, Now: now, NotBefore: now, Owner: d.Owner})
	}
	if lim != nil {
		now := w.clk.Now()
		if !lim.AllowN(now, 1) {
			r := lim.ReserveN(now, 1)
			delay := r.DelayFrom(now)
			r.CancelAt(now)
			return w.st.EffectRelease(ctx, &store.EffectReleaseParams{EffectID: c.ID, Token: c.Token, Now: now,
				NotBefore: now.Add(max(delay, time.Millisecond)), Owner: d.Owner})
		}
	}
	call, err := w.buildCall(c, d)
	if err != nil {
		// Nothing was sent, and the same stored request would be refused on
		// every attempt: the exception queue at once, and a person is told.
		p := &store.EffectSettleParams{State: store.EffectDead, Class: store.ClassPermanent,
			Reason: "the stored request is unusable: " + err.Error(), SuggestedRepair: "fix the flow's request mapping, then replay the event"}
		if outbound.IsRequestError(err) {
			p.Reason = "request refused before sending: " + err.Error()
			p.SuggestedRepair = "wrap payload values in the flow's request.path in pathEscape() and pass query parameters in request.query, never in the path; " +
				"this stored request is refused on every attempt, so resolve the effect with a note (after making the call by hand if it is still due)"
		}
		return w.settleAndNotify(ctx, c, d, p)
	}
	ctx, span := w.startAttempt(ctx, c, d, call)
	defer span.End()
	started := w.clk.Now()
	var resp *Response
	var callErr error
	if perr := loop.Safe(w.log, "destination action "+d.Kind, func() error {
		resp, callErr = w.actions[d.Kind].Do(ctx, call)
		return nil
	}); perr != nil {
		// The action is the embedding program's code: whether it sent
		// anything before it panicked is unknown, so a person decides.
		return w.settleAndNotify(ctx, c, d, &store.EffectSettleParams{State: store.EffectDead, Class: store.ClassUnknown,
			AddAttempt: true, Attempt: &store.Attempt{StartedAt: started, Duration: w.clk.Now().Sub(started), Class: store.ClassUnknown, Error: perr.Error()},
			Reason:          fmt.Sprintf("the %s action panicked: %v", d.Kind, perr),
			SuggestedRepair: fmt.Sprintf("fix the %s action (its stack is in the log); check %s for episode %s%s, then resolve or retry the effect", d.Kind, d.Name, c.EpisodeKey, keyNote(d, c.EpisodeKey))})
	}
	class, reason := Classify(d, resp, callErr)
	att := &store.Attempt{StartedAt: started, Duration: w.clk.Now().Sub(started), Class: class, Error: reason}
	if class == classSuccess {
		att.Class, att.Error = store.ClassNone, ""
		// Nothing more goes to the receiver for this effect: its slot is
		// the next call's while the settle waits for its commit. Any other
		// answer may still look the outcome up, and keeps its slot.
		sl.free() // answered: the receiver is done with this effect
	}
	if resp != nil {
		att.Status, att.Response = resp.Status, excerpt(resp.Body, 2000)
	}
	endAttempt(span, resp, class)
	if outbound.IsAddressError(callErr) {
		// Refused at the dial for the address the destination resolved
		// to: nothing was sent, and every attempt would reach the same
		// address (RT06).
		repair := fmt.Sprintf("nothing was sent: %s leads to a non-public address; if destination %s is meant to be reached on an internal network, set allow_private_networks: true on it; otherwise fix its base_url or the name's DNS records; then retry the effect",
			hostOf(d.BaseURL), d.Name)
		if d.Kind == config.KindEndpoint {
			repair = fmt.Sprintf("nothing was sent: %s leads to a non-public address; if endpoint %s is meant to be reached on an internal network, set allow_private_networks: true on it; otherwise fix its url or the name's DNS records; then retry the effect",
				hostOf(d.BaseURL), strings.TrimPrefix(d.Name, store.EndpointDestinationPrefix))
		}
		return w.settleAndNotify(ctx, c, d, &store.EffectSettleParams{State: store.EffectDead, Class: class, Reason: reason,
			AddAttempt: true, Attempt: att, SuggestedRepair: repair})
	}
	return w.decide(ctx, c, d, resp, class, reason, att)
}

// decide turns a classified answer into the effect's next state.
func (w *Worker) decide(ctx context.Context, c *store.ClaimedEffect, d *config.Destination, resp *Response, class store.ErrorClass, reason string, att *store.Attempt) error {
	now := w.clk.Now()
	p := &store.EffectSettleParams{Attempt: att, AddAttempt: true, Class: class, Reason: reason, LastResponse: att.Response}
	switch class {
	case classSuccess:
		p.State, p.Class, p.Reason = store.EffectDone, store.ClassNone, ""
		p.DestinationRef = destinationRef(resp)
		return w.settle(ctx, c, d, p)
	case store.ClassTransient, store.ClassQuota, store.ClassContention:
		if replayedFailure(d, resp) {
			// The destination began executing the first request with this
			// key, failed, saved that answer and now replays it: retries and
			// re-drives under the same key inside its window cannot get
			// anything else, so waste none of them.
			p.State = store.EffectDead
			p.Reason = fmt.Sprintf("%s, replayed by %s from its saved answer to an earlier request with %s %s for episode %s (%s: %s): every retry under this key within its %s window gets the same answer",
				reason, d.Name, d.Idem.Header, IdempotencyKey(d, c.EpisodeKey), c.EpisodeKey, d.Idem.ReplayedHeader, resp.Header.Get(d.Idem.ReplayedHeader), d.Idem.Window.D())
			p.SuggestedRepair = fmt.Sprintf("the first call failed after %s began executing it: check %s for episode %s%s; if it took effect, resolve the effect with a note; if not, retry it once the key's %s window has passed, or fix the cause and replay the event",
				d.Name, d.Name, c.EpisodeKey, keyNote(d, c.EpisodeKey), d.Idem.Window.D())
			return w.settleAndNotify(ctx, c, d, p)
		}
		attempt := c.Attempts + 1
		if attempt >= d.Retry.Attempts {
			return w.die(ctx, c, d, p, fmt.Sprintf("%s; %d attempts made", reason, attempt),
				"the destination kept failing: check its status and credentials; the effect is re-driven on schedule, or retry it by hand")
		}
		var ra retryAfter
		if resp != nil {
			ra = parseRetryAfter(resp.Header, d.RetryAfter.Unit, d.RetryAfter.Max.D(), now)
		}
		wait := retryWait(d, attempt, w.opts.Rand)
		if ra.OK {
			wait = ra.Wait
		}
		att.RetryAfter, att.RetryAfterUnit, att.Wait = ra.Raw, ra.Unit, wait
		retryOnSpan(ctx, ra, wait)
		p.State, p.NextAttemptAt = store.EffectRetryWait, now.Add(wait)
		return w.settle(ctx, c, d, p)
	case store.ClassUnknown:
		return w.reconcile(ctx, c, d, att, reason)
	default: // permanent, hidden failure: never retried (RT06)
		repair := "the destination refused the request: fix the data or the mapping, then retry the effect"
		switch r := ruleRepair(d, resp, class); {
		case d.Kind == config.KindEndpoint && resp != nil && resp.Status == http.StatusGone:
			// The action disabled the endpoint: the rest of its messages
			// park behind this one.
			repair = d.ParkRepair
		case r != "":
			// The vendor's rule knows better (a retry that cannot succeed,
			// a resend that would duplicate).
			repair = r
		case class == store.ClassHiddenFailure:
			repair = "the destination answered success but reported a failure in the body: inspect the response, repair, then retry or resolve"
		case isRedirect(resp):
			repair = fmt.Sprintf("fix base_url of destination %s (or the flow's request path) to the address the destination answers at, which the reason names; then retry the effect", d.Name)
		case resp == nil || resp.Status == 0:
			// The action refused the call before sending it.
			repair = fmt.Sprintf("nothing was sent: fix the flow's request mapping or base_url of destination %s, as the reason says; then retry the effect", d.Name)
		}
		p.State = store.EffectDead
		p.SuggestedRepair = repair
		return w.settleAndNotify(ctx, c, d, p)
	}
}

// replayedFailure reports a 5xx that the destination says it replayed
// from a saved answer (Idempotency.ReplayedHeader).
func replayedFailure(d *config.Destination, resp *Response) bool {
	if d.Idem == nil || d.Idem.ReplayedHeader == "" || resp == nil || resp.Status < 500 {
		return false
	}
	return strings.EqualFold(strings.TrimSpace(resp.Header.Get(d.Idem.ReplayedHeader)), "true")
}

// die moves an effect that exhausted its attempts to the exception queue,
// with the next scheduled re-drive if any is left.
func (w *Worker) die(ctx context.Context, c *store.ClaimedEffect, d *config.Destination, p *store.EffectSettleParams, reason, repair string) error {
	p.State, p.Reason, p.SuggestedRepair = store.EffectDead, reason, repair
	if c.Redrives < len(d.Retry.Redrive) {
		p.NextAttemptAt = w.clk.Now().Add(d.Retry.Redrive[c.Redrives].D())
		p.Reason += fmt.Sprintf("; re-drive %d of %d scheduled", c.Redrives+1, len(d.Retry.Redrive))
		if err := w.settle(ctx, c, d, p); err != nil {
			return err
		}
		w.log.InfoContext(ctx, "effect dead, re-drive scheduled", "episode", c.EpisodeKey, "destination", d.Name,
			"class", p.Class, "redrive_at", p.NextAttemptAt.UTC().Format(time.RFC3339), "reason", p.Reason)
		return nil
	}
	p.Reason += "; no re-drive left"
	return w.settleAndNotify(ctx, c, d, p)
}

// reconcile settles an unknown outcome: look the effect up by its natural
// key, or resend under the same idempotency key while the destination
// still keeps it, or hand it to a person.
func (w *Worker) reconcile(ctx context.Context, c *store.ClaimedEffect, d *config.Destination, att *store.Attempt, reason string) error {
	now := w.clk.Now()
	p := &store.EffectSettleParams{Attempt: att, AddAttempt: att != nil, Class: store.ClassUnknown, Reason: reason}
	if att != nil {
		p.LastResponse = att.Response
	}
	if c.Attempts+1 >= d.Retry.Attempts && att != nil {
		// Out of attempts: a person decides, whatever a lookup might say.
		p.State = store.EffectNeedsReconciliation
		p.Reason = reason + fmt.Sprintf("; %d attempts made", c.Attempts+1)
		p.SuggestedRepair = fmt.Sprintf("check %s for episode %s%s: if it is there, resolve the effect with a note; if not, retry it", d.Name, c.EpisodeKey, keyNote(d, c.EpisodeKey))
		return w.settleAndNotify(ctx, c, d, p)
	}
	if d.Lookup != nil && d.Compiled != nil && d.Compiled.LookupPath != nil {
		found, ref, lookAtt, err := w.lookup(ctx, c, d, lookupReconcile)
		if lookAtt != nil && att == nil {
			p.Attempt = lookAtt
		}
		var refused *lookupRefused
		switch {
		case errors.As(err, &refused):
			// Asking again cannot help: a person decides, and is told.
			p.State = store.EffectNeedsReconciliation
			p.Reason = reason + "; " + err.Error()
			p.SuggestedRepair = fmt.Sprintf("%s of destination %s; meanwhile check %s for episode %s%s: if it is there, resolve the effect with a note; if not, retry it",
				refused.fix, d.Name, d.Name, c.EpisodeKey, keyNote(d, c.EpisodeKey))
			return w.settleAndNotify(ctx, c, d, p)
		case err != nil:
			p.State = store.EffectNeedsReconciliation
			p.NextAttemptAt = now.Add(retryWait(d, c.Attempts+1, w.opts.Rand) + time.Second)
			p.Reason = reason + "; lookup failed, retrying it: " + err.Error()
			return w.settle(ctx, c, d, p)
		case found:
			p.State, p.Class, p.DestinationRef = store.EffectDone, store.ClassNone, ref
			p.Reason = "reconciled: the destination already holds the effect"
			return w.settle(ctx, c, d, p)
		default:
			p.State = store.EffectRetryWait
			p.NextAttemptAt = now.Add(retryWait(d, c.Attempts+1, w.opts.Rand))
			p.Reason = reason + "; lookup found nothing, so a resend is safe"
			return w.settle(ctx, c, d, p)
		}
	}
	if d.Idem != nil && now.Before(c.CreatedAt.Add(d.Idem.Window.D())) {
		// The destination still remembers the key: resending with the same
		// key cannot do the work twice (IP07).
		p.State = store.EffectRetryWait
		p.NextAttemptAt = now.Add(retryWait(d, c.Attempts+1, w.opts.Rand))
		p.Reason = reason + "; resending under the same " + d.Idem.Header + " within its window"
		return w.settle(ctx, c, d, p)
	}
	p.State = store.EffectNeedsReconciliation
	p.Reason = reason + "; no lookup is configured and no idempotency key window applies, so a resend could do the work twice"
	p.SuggestedRepair = fmt.Sprintf("check %s for episode %s%s: if it is there, resolve the effect with a note; if not, retry it", d.Name, c.EpisodeKey, keyNote(d, c.EpisodeKey))
	return w.settleAndNotify(ctx, c, d, p)
}

// lookupRefused is a lookup that asking again cannot make succeed (a
// redirect, a request refused before it was sent); fix says what to change.
type lookupRefused struct{ msg, fix string }

func (e *lookupRefused) Error() string { return e.msg }

// lookup asks the destination whether the effect exists.
func (w *Worker) lookup(ctx context.Context, c *store.ClaimedEffect, d *config.Destination, purpose string) (found bool, ref string, att *store.Attempt, err error) {
	var req any
	_ = json.Unmarshal(c.Request, &req)
	// idempotency_key is the key the calls were sent under: a vendor that
	// lists requests by it is searched with exactly that key.
	key := IdempotencyKey(d, c.EpisodeKey)
	vars := expr.Vars{expr.VarEntity: c.Entity, expr.VarEpisodeKey: c.EpisodeKey, expr.VarIdempotencyKey: key,
		expr.VarEffect: c.Effect.Effect, expr.VarRequest: req}
	path, err := d.Compiled.LookupPath.EvalString(vars)
	if err != nil {
		return false, "", nil, fmt.Errorf("lookup.path: %w", err)
	}
	var query url.Values
	if d.Compiled.LookupQuery != nil {
		if query, err = d.Compiled.LookupQuery.EvalQuery(vars); err != nil {
			return false, "", nil, fmt.Errorf("lookup.query: %w", err)
		}
	}
	call := &Call{Destination: d, Method: d.Lookup.Method, Path: path, Query: query, Header: http.Header{},
		EpisodeKey: c.EpisodeKey, IdempotencyKey: key, CausationID: c.CausationID}
	w.causationHeaders(call.Header, c)
	if err := checkCall(call); err != nil {
		return false, "", nil, &lookupRefused{msg: "lookup refused before sending: " + err.Error(),
			fix: "wrap the values in lookup.path in pathEscape() and pass query parameters in lookup.query"}
	}
	// Verification is the schedule's work, days after the delivery: a
	// trace of its own linking to the receive span, as a re-drive is.
	ctx, span := w.startCall(ctx, "lookup "+d.Name, c, d, call, purpose != lookupVerify && !c.Redrive, attribute.String("hookledger.lookup", purpose))
	defer func() { endLookup(span, att, found, err); span.End() }()
	started := w.clk.Now()
	resp, callErr := w.actions[d.Kind].Do(ctx, call)
	callErr = outbound.RedactError(callErr)
	att = &store.Attempt{StartedAt: started, Duration: w.clk.Now().Sub(started), Reconcile: true}
	if ae := outbound.AsAddressError(callErr); ae != nil {
		msg := fmt.Sprintf("lookup: %v (destination %s)", ae, d.Name)
		att.Class, att.Error = store.ClassPermanent, msg
		return false, "", att, &lookupRefused{msg: msg,
			fix: "set allow_private_networks: true if the destination is meant to be reached on an internal network, or fix base_url"}
	}
	if callErr != nil || resp == nil || resp.Status == 0 {
		att.Class, att.Error = store.ClassTransient, fmt.Sprint("lookup: ", callErr)
		return false, "", att, fmt.Errorf("lookup: %w", callErr)
	}
	att.Status, att.Response = resp.Status, excerpt(resp.Body, 2000)
	if resp.Status >= 500 || resp.Status == http.StatusTooManyRequests {
		att.Class, att.Error = store.ClassTransient, fmt.Sprintf("lookup: HTTP %d", resp.Status)
		return false, "", att, fmt.Errorf("lookup: HTTP %d", resp.Status)
	}
	if isRedirect(resp) {
		// Not followed, so nothing was looked up: neither "found" nor "not
		// found" (which would make a resend look safe) is known.
		msg := "lookup: " + redirectReason(d.Name, resp)
		att.Class, att.Error = store.ClassPermanent, msg
		return false, "", att, &lookupRefused{msg: msg, fix: "fix base_url or lookup.path to the address the destination answers at"}
	}
	var body any = string(resp.Body)
	if j, err := expr.DecodeJSON(resp.Body); err == nil {
		body = j
	}
	vars[expr.VarStatus], vars[expr.VarHeaders], vars[expr.VarBody] = int64(resp.Status), lowerHeaders(resp.Header), body
	found, err = d.Compiled.LookupFound.EvalBool(vars)
	if err != nil {
		return false, "", att, fmt.Errorf("lookup.found: %w", err)
	}
	if found && d.Compiled.LookupRef != nil {
		ref, _ = d.Compiled.LookupRef.EvalString(vars)
	}
	return found, ref, att, nil
}

// buildCall is storedCall plus the causation headers that carry the
// feedback-loop chain (checked like every other header).
func (w *Worker) buildCall(c *store.ClaimedEffect, d *config.Destination) (*Call, error) {
	call, err := storedCall(d, c.EpisodeKey, c.Request)
	if err != nil {
		return nil, err
	}
	w.causationHeaders(call.Header, c)
	call.CausationID = c.CausationID
	if err := checkCall(call); err != nil {
		return nil, err
	}
	if err := signCall(call, w.clk.Now()); err != nil {
		return nil, err
	}
	return call, nil
}

// checkCall refuses, before anything is sent, a call whose path was built
// from payload data that would take it out of base_url's path, add query
// parameters or name another host, or whose header values (those the
// flow's request mapping built from the payload) would start another
// header. The headers hookledger builds from stored data itself (the
// idempotency key, the causation id) never fail it: they are hashed or
// encoded first.
// Such a call is refused on every attempt, so it is permanent; the
// transport would otherwise fail it as "not sent", which reads transient.
func checkCall(call *Call) error {
	if err := outbound.CheckPath(call.Path); err != nil {
		return err
	}
	for k, vs := range call.Header {
		for _, v := range vs {
			if err := outbound.CheckHeader(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// causationHeaders carry the feedback-loop chain on every outbound call.
// The causation id is a sender's event id, which may hold any character:
// it is percent-encoded (outbound.EncodeHeaderValue), so an effect whose
// event id has a control character or non-ASCII text is sent, and its
// receiver decodes the id back (docs/delivery.md). An id of visible ASCII
// without "%" goes as it is.
func (w *Worker) causationHeaders(h http.Header, c *store.ClaimedEffect) {
	if c.CausationID != "" {
		h.Set(w.cfg.Causation.Header, outbound.EncodeHeaderValue(c.CausationID))
		h.Set(w.cfg.Causation.HopHeader, strconv.Itoa(c.Hop))
	}
}

func (w *Worker) settle(ctx context.Context, c *store.ClaimedEffect, d *config.Destination, p *store.EffectSettleParams) error {
	p.EffectID, p.Token, p.Now, p.Actor = c.ID, c.Token, w.clk.Now(), w.opts.Owner
	// What the claim saw: a store that can settles by it in one round
	// trip, with no read of the effect first (store.SeenSettleDriver).
	p.Claimed = c.Fenced()
	// An effect that lands in the exception queue is its destination
	// owner's until someone assigns another (store.SettleOwner).
	p.Owner = d.Owner
	// The last net before the ledger, the log and the notification: a URL
	// in a reason (from any action or rule) keeps no credentials or query.
	p.Reason = redact(p.Reason)
	if p.Attempt != nil {
		p.Attempt.Error = redact(p.Attempt.Error)
		if p.Attempt.StartedAt.IsZero() {
			p.Attempt.StartedAt = p.Now
		}
	}
	storableSettle(p)
	// Settled with whatever other calls ended meanwhile, in one
	// transaction where the store can; every settle keeps its own answer.
	// The group runs under the context of its first settle: all of them
	// are the worker's.
	err := w.settler.Do(ctx, p)
	if errors.Is(err, store.ErrRefused) {
		// The database refused this attempt's evidence, not the settle:
		// settled without it, so the effect is never left submitting.
		w.log.WarnContext(ctx, "the store refused an attempt's evidence; settling without it", "episode", c.EpisodeKey, "err", err)
		withoutEvidence(p, err)
		err = w.settler.Do(ctx, p)
	}
	if err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	w.opts.Metrics.settled(d.Name, p)
	stateOnSpan(ctx, p.State)
	w.log.DebugContext(ctx, "effect settled", "episode", c.EpisodeKey, "destination", d.Name, "state", p.State, "class", p.Class, "reason", p.Reason)
	return nil
}

// newerVersion is the episode key of a newer version of c's effect, when
// c has been called before (a retry, a resumed or re-driven call) and is
// no compensation; "" otherwise. A first call needs no look: applying the
// newer version superseded it while it waited.
func (w *Worker) newerVersion(ctx context.Context, c *store.ClaimedEffect) (string, error) {
	if c.Compensates != 0 || (c.Attempts == 0 && !c.Resumed && !c.Redrive) {
		return "", nil
	}
	newer, err := w.st.EffectNewer(ctx, c.ID)
	if err != nil {
		return "", fmt.Errorf("look for a newer version: %w", err)
	}
	return newer, nil
}

// storableSettle makes every text of a settle one that every driver
// stores: reasons, the destination's answer, its Retry-After and Location
// come from the destination, which may answer any bytes (invalid UTF-8 in
// a header, NUL in a body).
func storableSettle(p *store.EffectSettleParams) {
	for _, s := range []*string{&p.Reason, &p.SuggestedRepair, &p.DestinationRef, &p.LastResponse} {
		*s = store.Storable(*s)
	}
	if a := p.Attempt; a != nil {
		for _, s := range []*string{&a.Error, &a.Response, &a.RetryAfter, &a.RetryAfterUnit} {
			*s = store.Storable(*s)
		}
	}
}

// withoutEvidence drops what a settle keeps of the destination's answer,
// which the database refused, and says so in the reason.
func withoutEvidence(p *store.EffectSettleParams, err error) {
	p.DestinationRef, p.LastResponse = "", ""
	if a := p.Attempt; a != nil {
		a.Response, a.RetryAfter = "", ""
	}
	p.Reason = store.Storable(strings.TrimSpace(p.Reason + " (the store refused this attempt's evidence: " + logging.OneLine(err) + ")"))
}

// settleAndNotify settles an effect that now needs a person and tells them.
func (w *Worker) settleAndNotify(ctx context.Context, c *store.ClaimedEffect, d *config.Destination, p *store.EffectSettleParams) error {
	if err := w.settle(ctx, c, d, p); err != nil {
		return err
	}
	w.log.WarnContext(ctx, "effect needs a person", "episode", c.EpisodeKey, "destination", d.Name, "state", p.State, "class", p.Class, "reason", p.Reason)
	if w.notes != nil {
		// Sent from the notification loop, outside this delivery slot: a
		// slow chat webhook must not hold a slot another call needs.
		w.notes.add(Notification{EffectID: c.ID, EpisodeKey: c.EpisodeKey, Destination: d.Name, State: p.State,
			Class: p.Class, Reason: p.Reason, SuggestedRepair: p.SuggestedRepair, Owner: d.Owner})
	}
	return nil
}

// redact is outbound.RedactText for text that names a URL; most reasons
// name none, and those skip the scan.
func redact(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return outbound.RedactText(s)
}

// hostOf is the host a base URL names, for a repair hint.
func hostOf(base string) string {
	if u, err := url.Parse(base); err == nil && u.Host != "" {
		return u.Host
	}
	return "base_url"
}

// destinationRef keeps the destination's id for the created object when
// the answer names one (a top-level "id", or a Location header).
func destinationRef(resp *Response) string {
	if resp == nil {
		return ""
	}
	if v, err := expr.DecodeJSON(resp.Body); err == nil {
		if m, ok := v.(map[string]any); ok {
			switch id := m["id"].(type) {
			case string:
				return id
			case int64:
				return strconv.FormatInt(id, 10)
			}
		}
	}
	return resp.Header.Get("Location")
}
