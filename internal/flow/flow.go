// Package flow is the ordered processor: it routes accepted events to the
// flows that subscribe to them, processes each entity under a lease one
// event at a time in business order (OR01, OR02), computes the business
// version (revision, refetch or occurrence time) and settles every event in
// one store transaction behind the revision guard, creating effect rows
// that can exist only once per episode key (IP05).
package flow

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/groupcommit"
	"github.com/hookledger/hookledger/internal/health"
	"github.com/hookledger/hookledger/internal/logging"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// Options tune the engine; zero values take the defaults.
type Options struct {
	// Workers bounds how many entities are processed in parallel (default
	// config.DefaultWorkers). More workers also mean larger shared commits
	// on SQLite.
	Workers int
	// LeaseFor is how long a claimed entity stays leased (default 30 s); a
	// worker that dies loses it after this.
	LeaseFor time.Duration
	// RetryDelay defers an entity whose refetch failed transiently
	// (default 5 s), so it neither spins nor blocks other entities.
	RetryDelay time.Duration
	// PollInterval is how often the background loop looks for work when
	// idle (default 200 ms).
	PollInterval time.Duration
	// Linger is how long a routing take waits before it reads its page
	// when the take before it found less than a page (processing.linger;
	// 0: none). See Engine.lingerFor.
	Linger time.Duration
	// Owner names this worker in leases and audit rows.
	Owner  string
	Logger *slog.Logger
	Clock  clock.Clock
	// HTTPClient makes refetch requests; redirects are never followed,
	// whatever its CheckRedirect says. For a source API without
	// allow_private_networks its transport (an *http.Transport) is cloned
	// with a dial that refuses non-public addresses (outbound.Guard).
	HTTPClient *http.Client
	// Resolver resolves API host names for that check (default
	// net.DefaultResolver).
	Resolver outbound.Resolver
	// OnEffects is called after an event created effects (the delivery
	// worker's Wake), so they are delivered without waiting for a poll.
	// Unused with a Handoff, which wakes the worker itself when needed.
	OnEffects func()
	// Handoff, when set, claims the effects processing writes for this
	// process's delivery worker in the transaction that writes them.
	Handoff Handoff
	// DeadlineWarnShare is the share of the time between an effect's
	// creation and its business deadline during which deadline_risk
	// warns (default DefaultDeadlineWarnShare; the server passes
	// signals.deadline_warn_share, whose default is the same).
	DeadlineWarnShare float64
	// Metrics counts settled events and approved effects (nil: none).
	Metrics *Metrics
	// Health hears whether routing and processing make progress (nil:
	// nobody).
	Health *health.Board
	// Tracing records a span per processed work item, in the trace of the
	// request that brought its event in (nil: tracing.Off).
	Tracing *tracing.Provider
}

// Engine routes and processes events for the configured flows.
type Engine struct {
	cfg      *config.Config
	st       store.Pipeline
	opts     Options
	log      *slog.Logger
	clk      clock.Clock
	bySource map[string][]*config.Flow
	flows    map[string]*config.Flow
	apis     map[string]*config.SourceAPI
	kinds    map[string]string
	http     *http.Client // guarded: public addresses only
	// httpPrivate serves the source APIs with allow_private_networks.
	httpPrivate *http.Client
	// changesOnly marks, per flow, the effects whose destination sends
	// changes only (send_changes_only, Braze's data points); nil for a
	// flow without any.
	changesOnly map[string][]bool

	// settler groups the pages of concurrent entities into shared
	// transactions, and lister their listings into shared queries.
	settler *groupcommit.Batcher[[]*store.FlowApplyParams, store.FlowApplyOutcome]
	lister  *groupcommit.Batcher[*store.WorkListPendingParams, listOutcome]

	// errs keeps failing entities from filling the log.
	errs *logging.Repeats
	loop *loop.Loop
	// routingStage and processingStage hear of every routing take, claim
	// and entity: a take or claim that finds nothing is progress too.
	routingStage, processingStage *health.Stage

	// Continuous slots: up to Workers entities in flight, each source API
	// at most its max_in_flight of them (a bulkhead for refetch).
	mu       sync.Mutex
	inflight int
	apiSlots map[string]chan struct{}
	running  sync.WaitGroup
	// routing is true while the background loop's router runs: at most
	// one at a time, beside the claims (see fill).
	routing atomic.Bool
	// routeWanted and claimWanted say what the loop's next round should
	// look for: set by whatever may have made events routable (the
	// receiver, a full routed page) or entities ready (a routed page, an
	// entity released with work left, a claim that filled every slot),
	// and by the poll; taken by the round that looks (see fill).
	routeWanted, claimWanted atomic.Bool
	// routeLook and claimLook are the last routing take and claim that
	// found all there was: a poll soon after one does not ask for it
	// again (see pollWants).
	routeLook, claimLook loop.Look
	// drained is true once a routing take found less than a page: the
	// router has no backlog, and the next take may linger (lingerFor).
	drained atomic.Bool

	// aheadMu guards aheadCtx, the context routing ahead runs on
	// (RouteAhead): set by Start, ended and cleared by Stop. aheadSlots
	// holds a token per routing take ahead in flight.
	aheadMu    sync.Mutex
	aheadCtx   context.Context
	aheadStop  context.CancelFunc
	aheadSlots chan struct{}
	// aheadLast, under aheadMu, closes once the last take ahead whose
	// group was queued has queued its routing (aheadTake).
	aheadLast <-chan struct{}

	// prepareHook, set only by tests, runs before an item's expressions:
	// it stands in for an expression that panics.
	prepareHook func(*store.WorkItem)
	// decodeHook, set only by tests, hears each decoding of an event's
	// body.
	decodeHook func(*store.RoutableEvent)
}

// Wake makes an idle background loop look for work now: events to route
// and entities to claim.
func (e *Engine) Wake() {
	e.routeWanted.Store(true)
	e.claimWanted.Store(true)
	e.loop.Wake()
}

// WakeRouting makes an idle background loop route now, and claim only
// once what it routed made entities ready (the receiver calls it after
// storing events a flow subscribes to: they need routing before any
// entity has work).
func (e *Engine) WakeRouting() {
	e.routeWanted.Store(true)
	e.loop.Wake()
}

// wantAll asks the next round to look for everything: at start and on
// the poll, which is how work another process made ready, and entities
// deferred into the future, are found.
func (e *Engine) wantAll() {
	e.routeWanted.Store(true)
	e.claimWanted.Store(true)
}

// pollWants asks the poll's round to look for what no routing take or
// claim looked for just before: at a steady load the wakes route and
// claim all the time, and the poll's own take and claim found nothing.
func (e *Engine) pollWants() {
	if !e.loop.Fresh(&e.routeLook) {
		e.routeWanted.Store(true)
	}
	if !e.loop.Fresh(&e.claimLook) {
		e.claimWanted.Store(true)
	}
}

// New returns an engine over the store's pipeline.
func New(cfg *config.Config, st store.Pipeline, opts Options) *Engine {
	if opts.Workers <= 0 {
		opts.Workers = config.DefaultWorkers
	}
	if opts.LeaseFor <= 0 {
		opts.LeaseFor = 30 * time.Second
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = 5 * time.Second
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = 200 * time.Millisecond
	}
	if opts.Handoff != nil {
		opts.OnEffects = nil // the handoff wakes the worker where needed
	}
	if opts.DeadlineWarnShare <= 0 || opts.DeadlineWarnShare > 1 {
		opts.DeadlineWarnShare = defaultDeadlineWarnShare
	}
	if opts.Owner == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		opts.Owner = "worker-" + hex.EncodeToString(b[:])
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Tracing == nil {
		opts.Tracing = tracing.Off()
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.HTTPClient == nil {
		// No client-side retries: refetch failures go back through the
		// entity's own deferral (RT01: one retry layer).
		opts.HTTPClient = outbound.Client(opts.Workers)
	}
	// A refetch never follows a redirect, whatever the injected client
	// says: the source API's credentials would go along. Nor does it
	// connect to an internal address unless the API allows it.
	e := &Engine{
		cfg: cfg, st: st, opts: opts, log: opts.Logger, clk: opts.Clock, settler: newSettler(st, opts.Handoff), lister: newLister(st),
		http:        outbound.Guard(opts.HTTPClient, outbound.GuardOptions{Resolver: opts.Resolver}),
		httpPrivate: outbound.NoRedirects(opts.HTTPClient),
		bySource:    map[string][]*config.Flow{}, flows: map[string]*config.Flow{},
		apis: map[string]*config.SourceAPI{}, kinds: map[string]string{}, changesOnly: map[string][]bool{},
		errs:         logging.NewRepeats(opts.Logger, opts.Clock, "entity processing", 0),
		apiSlots:     map[string]chan struct{}{},
		aheadSlots:   make(chan struct{}, aheadTakes),
		aheadLast:    closedChan(),
		routingStage: opts.Health.Stage("routing"), processingStage: opts.Health.Stage("processing"),
	}
	e.loop = loop.New("processing", e.fill, loop.Options{PollInterval: opts.PollInterval, Logger: opts.Logger, Clock: opts.Clock,
		OnPoll: e.pollWants})
	dests := map[string]*config.Destination{}
	for i := range cfg.Destinations {
		dests[cfg.Destinations[i].Name] = &cfg.Destinations[i]
	}
	for i := range cfg.Flows {
		f := &cfg.Flows[i]
		e.bySource[f.Source] = append(e.bySource[f.Source], f)
		e.flows[f.Name] = f
		for j, eff := range f.Effects {
			// A forward sends every event, whatever a destination's
			// preference for changes: each one is a change of its own.
			if d := dests[eff.Destination]; d != nil && d.ChangesOnly() && f.Forward == nil {
				if e.changesOnly[f.Name] == nil {
					e.changesOnly[f.Name] = make([]bool, len(f.Effects))
				}
				e.changesOnly[f.Name][j] = true
			}
		}
	}
	withAPI := 0
	for _, s := range cfg.Sources {
		if s.API != nil {
			withAPI++
		}
	}
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		e.kinds[s.Name] = s.Kind
		if s.API != nil {
			e.apis[s.Name] = s.API
			n := s.API.MaxInFlight
			if n <= 0 {
				n = config.DefaultMaxInFlight(opts.Workers, withAPI)
			}
			e.apiSlots[s.Name] = make(chan struct{}, n)
		}
	}
	return e
}

// Start runs routing and processing in the background until Stop (or
// until ctx ends). A second call returns loop.ErrStarted.
func (e *Engine) Start(ctx context.Context) error {
	e.wantAll()
	if err := e.loop.Start(ctx); err != nil {
		return err
	}
	e.aheadMu.Lock()
	e.aheadCtx, e.aheadStop = context.WithCancel(ctx)
	e.aheadMu.Unlock()
	return nil
}

// Stop ends the background loop and waits, within ctx, for the entities in
// flight (their context is canceled; unfinished work stays pending and
// leased until the lease runs out). Safe to call twice.
func (e *Engine) Stop(ctx context.Context) error {
	err := e.loop.Stop(ctx)
	// No routing take ahead starts once this returns, so that running's
	// Wait below sees every one that did.
	e.aheadMu.Lock()
	if e.aheadStop != nil {
		e.aheadStop()
	}
	e.aheadCtx = nil
	e.aheadMu.Unlock()
	done := make(chan struct{})
	go func() { e.running.Wait(); close(done) }()
	select {
	case <-done:
		return err
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("stop processing: entities still in flight: %w", ctx.Err()))
	}
}

// fill is the background loop's step: route a batch, then claim as many
// entities as there are free slots and process each on its own goroutine.
// An entity that finishes frees its slot and wakes the loop, so the next
// one is claimed at once instead of after the slowest of a batch.
//
// Routing runs on a goroutine of its own, one at a time, beside the
// claims: a routed page wakes the loop when it is stored. Routing a page
// in line held every freed slot idle for its duration, and on PostgreSQL
// under load (a page of 200 events in 100-300 ms) one process settled
// barely more entities per second than its slots per page.
//
// A round routes only when asked to (routeWanted) and claims only when
// asked to (claimWanted). Doing both on every wake cost, for one event
// at a light load, three routing takes and three claims where one of
// each finds it: the receiver's wake claimed before anything was routed,
// the routed page's wake took an empty page, and the entity's release
// did both again (docs/benchmarks-history.md, "What a lone webhook asks
// of the database"). The poll asks for both.
func (e *Engine) fill(ctx context.Context) (more bool, err error) {
	claim := e.claimWanted.Swap(false)
	if e.routeWanted.Swap(false) {
		e.route(ctx)
	}
	if !claim {
		return false, loop.ErrIdle
	}
	if e.full() {
		// Every slot is busy: the next entity to finish claims.
		return false, loop.ErrIdle
	}
	began := e.loop.Began()
	// The slots are promised as the claim runs (slotClaim): a routing
	// take beside it, or a take ahead, that the writer runs first leases
	// what it made ready, and this claim what is left.
	slots := e.slotClaim()
	leases, err := e.st.EntityClaim(ctx, &store.EntityClaimParams{
		Owner: e.opts.Owner, Now: e.clk.Now(), LeaseFor: e.opts.LeaseFor, Limit: e.opts.Workers, Slots: slots,
	})
	free := slots.done(len(leases))
	if err == nil && len(leases) < free {
		e.loop.Looked(&e.claimLook, began) // every ready entity was taken
	}
	switch {
	case err != nil:
		err = fmt.Errorf("claim entities: %w", err)
		e.processingStage.Fail(err)
	case len(leases) == 0 && free > 0:
		e.processingStage.OK() // nothing waiting
	}
	for _, l := range leases {
		e.process(ctx, l)
	}
	// Another round at once only when the claim filled every free slot,
	// so more entities may be ready. A shorter claim found all there was,
	// and whatever becomes ready later wakes the loop (a routed page, an
	// entity finishing, the receiver) or is found by the poll. Going round
	// again after every claim cost an empty claim, and an empty routing
	// take beside it, per event at light load (docs/benchmarks-history.md,
	// "Empty claims at light load").
	more = free > 0 && len(leases) == free
	if more {
		e.claimWanted.Store(true)
	}
	return more, err
}

// slotClaim is one claim's share of the free slots, promised as the
// database runs the claim (store.Slots): on SQLite, when the one writer
// runs it. A claim used to promise them as it was queued and hold them
// until its commit had ended; the takes ahead that the writer ran in
// the meantime found none, left the entities they made ready to the
// next claim, which held every slot in turn, and a share of the slots
// had to be kept free for them.
type slotClaim struct {
	e       *Engine
	held    int // promised and not given back
	granted int // what the last Take granted
}

// slotClaim is a claim's share of the slots, none promised yet.
func (e *Engine) slotClaim() *slotClaim { return &slotClaim{e: e} }

// Take promises up to limit slots, counting those still held from an
// attempt before (store.Slots).
func (c *slotClaim) Take(limit int) int {
	c.held += c.e.reserveSlots(limit - c.held)
	c.granted = c.held
	return c.held
}

// Leased gives back at once the promised slots the leases did not fill.
func (c *slotClaim) Leased(n int) {
	c.keep(n)
}

// done gives back what the claim holds beyond its n leases, once it has
// ended whatever its outcome, and returns how many slots its last
// attempt was granted: n when its leases filled them all.
func (c *slotClaim) done(n int) int {
	c.keep(n)
	return c.granted
}

// keep gives back the slots held beyond n. A claim that found every
// slot promised to this one asked for a claim (reserveSlots), and
// those given back answer it.
func (c *slotClaim) keep(n int) {
	if c.held <= n {
		return
	}
	c.e.giveBack(c.held - n)
	c.held = n
	if c.e.claimWanted.Load() {
		c.e.loop.Wake()
	}
}

// full reports whether every slot is busy or promised; then it asks for
// a claim, under mu as giveBack is, so that the slot freed next sees the
// request and wakes the loop.
func (e *Engine) full() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inflight < e.opts.Workers {
		return false
	}
	e.claimWanted.Store(true)
	return true
}

// freeSlots is how many slots are neither busy nor promised now.
func (e *Engine) freeSlots() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return max(e.opts.Workers-e.inflight, 0)
}

// reserveSlots promises up to n free slots and returns how many. When
// none is free for a claim that wanted some, it asks for a claim (see
// full): the entities it would have leased are ready.
func (e *Engine) reserveSlots(n int) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	free := min(max(e.opts.Workers-e.inflight, 0), n)
	if free <= 0 {
		if n > 0 {
			e.claimWanted.Store(true)
		}
		return 0
	}
	e.inflight += free
	return free
}

// giveBack returns n promised slots that a claim did not fill.
func (e *Engine) giveBack(n int) {
	e.mu.Lock()
	e.inflight -= n
	e.mu.Unlock()
}

// process works the leased entity on a goroutine of its own, in a slot
// already counted in inflight, and frees the slot when it ends.
func (e *Engine) process(ctx context.Context, l *store.Lease) {
	e.running.Add(1)
	go func() {
		defer e.running.Done()
		_, drained, perr := e.safeProcess(ctx, l)
		switch {
		case perr == nil:
			e.errs.OK()
			e.processingStage.OK()
		case ctx.Err() == nil:
			e.errs.Fail("processing failed", perr, "flow", l.Flow, "entity", l.Entity)
			e.processingStage.Fail(perr)
		}
		e.giveBack(1)
		// An entity released with no work left readies nothing: its
		// freed slot is worth a claim only when one was asked for
		// while the slots were busy. Any other end (work routed
		// while it was processed, a deferral, a lost lease, an
		// error) may have left it ready.
		if !drained {
			e.claimWanted.Store(true)
		}
		if e.claimWanted.Load() {
			e.loop.Wake()
		}
	}()
}

// routePage is how many events one routing take reads.
const routePage = 200

// route starts a routing take on its own goroutine unless one runs
// already; then it asks that take's end to wake the loop for another, as
// the running take may have read its page before the events that asked.
func (e *Engine) route(ctx context.Context) {
	if !e.routing.CompareAndSwap(false, true) {
		e.routeWanted.Store(true)
		// The take may have ended between the swap and the store, and
		// not seen the request: then this round's caller wakes.
		if !e.routing.Load() {
			e.loop.Wake()
		}
		return
	}
	e.running.Add(1)
	go func() {
		defer e.running.Done()
		if d := e.lingerFor(); d > 0 {
			if clock.Sleep(ctx, d) != nil {
				e.routing.Store(false)
				return
			}
			// The wakes that came while it waited are this take's: their
			// events were stored before it reads its page.
			e.routeWanted.Store(false)
		}
		began := e.loop.Began()
		// The take also leases, for the free slots, the entities it made
		// ready (store.EventRouteNextParams.Claim): a claim of their own
		// was one commit more between a webhook and its effect. The
		// slots are promised as its transaction leases (slotClaim).
		slots := e.slotClaim()
		routed, leased, leases, rerr := e.routeOnce(ctx, slots)
		e.drained.Store(rerr == nil && routed < routePage)
		claim := slots.done(leased)
		for _, l := range leases {
			e.process(ctx, l)
		}
		// A claim that filled fewer slots than it had took every ready
		// entity.
		claimedAll := rerr == nil && routed > 0 && claim > 0 && leased < claim
		if claimedAll {
			e.loop.Looked(&e.claimLook, began)
		}
		if rerr == nil && routed < routePage {
			e.loop.Looked(&e.routeLook, began) // every routable event was taken
		}
		e.routing.Store(false)
		switch {
		case rerr == nil:
			e.routingStage.OK()
		case ctx.Err() == nil:
			e.errs.Fail("routing failed", rerr)
			e.routingStage.Fail(rerr)
		}
		if routed > 0 && !claimedAll {
			e.claimWanted.Store(true)
		}
		if routed >= routePage {
			e.routeWanted.Store(true)
		}
		if routed > 0 || e.routeWanted.Load() {
			e.loop.Wake()
		}
	}()
}

// lingerFor is how long the next routing take waits before it reads its
// page: Options.Linger when the take before it found less than a page,
// else nothing. A lone webhook on PostgreSQL costs the database about
// four times what the same webhook costs in a group (each of its
// transactions wakes a backend that runs cold), and the router's
// transaction is the largest of a webhook's three: waiting a few tens of
// milliseconds lets the events that arrive meanwhile share it
// (docs/postgres.md, "Routing's linger"). A backlog is never waited
// for, nor is the first take after Start.
func (e *Engine) lingerFor() time.Duration {
	if e.opts.Linger > 0 && e.drained.Load() {
		return e.opts.Linger
	}
	return 0
}

// safeProcess processes one entity; a panic that escapes (a bug, never an
// expression: those are contained per item) is an error, not the end of
// the process. The lease runs out and the work stays pending.
func (e *Engine) safeProcess(ctx context.Context, l *store.Lease) (n int, drained bool, err error) {
	err = loop.Safe(e.log, "processing of "+l.Flow+"/"+l.Entity, func() error {
		var perr error
		n, drained, perr = e.processEntity(ctx, l)
		return perr
	})
	return n, drained, err
}

// Step routes one batch of events and processes one round of entities,
// returning how many events and work items it settled.
func (e *Engine) Step(ctx context.Context) (int, error) {
	routed, err := e.RouteOnce(ctx)
	if err != nil {
		return routed, err
	}
	processed, err := e.ProcessOnce(ctx)
	return routed + processed, err
}

// Drain steps until no work is pending or ctx ends. Entities deferred into
// the future are not waited for: the caller advances its clock.
func (e *Engine) Drain(ctx context.Context) error {
	for {
		n, err := e.Step(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// RouteOnce routes up to one batch of accepted events. A page that the
// database refuses (store.ErrRefused: the values of one of its events) is
// routed again one event at a time, and the event refused alone is
// dead-lettered with the database's reason: one event never stops the
// routing of the others.
func (e *Engine) RouteOnce(ctx context.Context) (int, error) {
	n, _, _, err := e.routeOnce(ctx, nil)
	return n, err
}

// routeOnce is RouteOnce, leasing with the page up to as many ready
// entities as slots grants, when set (see routePage):
// leased is how many it leased, and leases those the processor is to
// work on (the others' work was settled in the routing transaction, and
// their slots given back: see routeSettle). A page routed one event at a
// time leases none: the loop's claim finds them.
func (e *Engine) routeOnce(ctx context.Context, slots *slotClaim) (routed, leased int, leases []*store.Lease, err error) {
	var rs *routeSettle
	if slots != nil {
		rs = &routeSettle{}
	}
	page, err := e.routePage(ctx, routePage, slots, nil, rs)
	if !errors.Is(err, store.ErrRefused) {
		return page.Events, len(page.Leases), rs.finish(ctx, e, page), err
	}
	rs.finish(ctx, e, store.RoutedPage{}) // nothing settled: slots and spans back
	n, err := e.routeAlone(ctx, routePage)
	return n, 0, nil, err
}

// routeAlone routes up to limit events one page of one at a time; the one
// the database refuses is routed again as a dead letter with the reason.
func (e *Engine) routeAlone(ctx context.Context, limit int) (int, error) {
	total := 0
	for range limit {
		var taken int64
		page, err := e.routePage(ctx, 1, nil, func(pk int64) string { taken = pk; return "" }, nil)
		if errors.Is(err, store.ErrRefused) && taken != 0 {
			reason := refusedReason("routing", err)
			page, err = e.routePage(ctx, 1, nil, func(pk int64) string {
				if pk == taken {
					return reason
				}
				return ""
			}, nil)
		}
		if err != nil {
			return total, err
		}
		if page.Events == 0 {
			break
		}
		total += page.Events
	}
	return total, nil
}

// refusedReason is the reason a dead letter gives when the database
// refused an item's values: storable text, one line, bounded.
func refusedReason(stage string, err error) string {
	s := logging.OneLine(err)
	if len(s) > 500 {
		s = s[:500] + "…"
	}
	return store.Storable(stage + ": the database refused a value of this event: " + s)
}

// routePage routes one page of up to limit events and, when slots is
// set, leases with it up to as many ready entities as slots grants as
// the transaction runs. refused, when set, names for an event the
// reason to dead-letter it with instead of routing it ("" routes it);
// it also tells the caller which events were taken. rs, when set,
// settles in the routing transaction what it can of the leased
// entities' work.
func (e *Engine) routePage(ctx context.Context, limit int, slots *slotClaim, refused func(pk int64) string, rs *routeSettle) (store.RoutedPage, error) {
	var evs []*store.RoutableEvent
	var ds []*store.RouteDecision
	now := e.clk.Now()
	var lease *store.EntityClaimParams
	if slots != nil {
		lease = e.leaseParams(now, e.opts.Workers, slots)
	}
	var settle func(context.Context, []*store.Lease) store.RouteSettle
	if rs != nil && lease != nil {
		settle = func(ctx context.Context, leases []*store.Lease) store.RouteSettle {
			return rs.prepare(ctx, e, leases)
		}
	}
	// A page of more than inlineMax events is a busy pipeline: the
	// processor's groups settle its entities in fewer statements than
	// small groups in routing would.
	page, err := e.st.EventRouteNext(ctx, &store.EventRouteNextParams{Limit: limit, Now: now, Claim: lease, Settle: settle, SettleMax: inlineMax,
		Decide: func(page []*store.RoutableEvent) []*store.RouteDecision {
			evs = page
			// The page's work is prepared for a settle while a slot is
			// free; with none free now, the transaction may still lease
			// what frees meanwhile, without the listing a settle reads.
			settling := settle != nil && e.freeSlots() > 0
			if lease != nil && !settling {
				lease.List = 0
			}
			ds = e.decide(ctx, page, refused, settling, rs)
			return ds
		}})
	if err != nil || page.Events == 0 {
		return page, err
	}
	e.recordRouted(ctx, evs, ds)
	return page, nil
}

// leaseParams is the claim a routing take makes for up to limit ready
// entities, as many as slots grants as it runs, with their first page
// of work.
func (e *Engine) leaseParams(now time.Time, limit int, slots *slotClaim) *store.EntityClaimParams {
	// With the leases, their first page of work, where the database
	// reads it in the routing transaction (PostgreSQL): the processor's
	// listing was a transaction more per webhook.
	return &store.EntityClaimParams{Owner: e.opts.Owner, Now: now, LeaseFor: e.opts.LeaseFor, Limit: limit, Slots: slots, List: workPage}
}

// decide computes the routing decisions of the events evs, one per
// event in the same order. refused, when set, names the events to
// dead-letter instead (routeAlone). When settling, a page of at most
// inlineMax events keeps what routing decoded for rs: the work prepared
// from it ahead of the transaction, or inside it where the database is
// shared.
func (e *Engine) decide(ctx context.Context, evs []*store.RoutableEvent, refused func(pk int64) string, settling bool, rs *routeSettle) []*store.RouteDecision {
	ds := make([]*store.RouteDecision, 0, len(evs))
	// A page routing settles keeps each event's body as the decision
	// decoded it, for the work prepared from it.
	keep := settling && len(evs) <= inlineMax
	var ins []*input
	if keep {
		ins = make([]*input, 0, len(evs))
	}
	for _, ev := range evs {
		var routes []store.Route
		var in *input
		if why := refusedFor(refused, ev.PK); why != "" {
			routes = e.failedRoutes(ev, why)
		} else {
			routes, in = e.safeRoutes(ev)
		}
		ds = append(ds, &store.RouteDecision{EventPK: ev.PK, Routes: routes})
		if keep {
			ins = append(ins, in)
		}
	}
	switch {
	case !keep:
	case e.st.Shared():
		// Prepared inside the routing transaction, after the lease.
		rs.keep(evs, ins)
	default:
		rs.ahead(ctx, e, evs, ds, ins)
	}
	return ds
}

// recordRouted counts, traces and logs a routed page: the events evs,
// decided as ds.
func (e *Engine) recordRouted(ctx context.Context, evs []*store.RoutableEvent, ds []*store.RouteDecision) {
	e.opts.Metrics.routed(ds)
	traced := e.routeSpans(ctx, evs, ds)
	for i, d := range ds {
		// Logged in the event's trace, so the line leads to it.
		ictx := ctx
		if i < len(traced) {
			ictx = traced[i]
		}
		for _, r := range d.Routes {
			if r.Failed != "" {
				e.log.WarnContext(ictx, "event dead-lettered", "source", evs[i].Source, "event_id", evs[i].EventID, "flow", r.Flow, "reason", r.Failed)
			}
		}
	}
}

// refusedFor is refused's reason for the event pk ("" when refused is
// nil or routes it).
func refusedFor(refused func(pk int64) string, pk int64) string {
	if refused == nil {
		return ""
	}
	return refused(pk)
}

// safeRoutes is Routes with a panic in an expression turned into a failed
// route of every flow subscribing to the event: the event is dead-lettered
// with the reason, and routing goes on with the next one.
func (e *Engine) safeRoutes(ev *store.RoutableEvent) ([]store.Route, *input) {
	var routes []store.Route
	var in *input
	if err := loop.Safe(e.log, "routing of "+ev.Source+"/"+ev.EventID, func() error {
		routes, in = e.routes(ev)
		return nil
	}); err != nil {
		return e.failedRoutes(ev, "routing: "+err.Error()), nil
	}
	return routes, in
}

// failedRoutes is a failed route, with the reason, for every flow that
// subscribes to the event: the event is dead-lettered in each.
func (e *Engine) failedRoutes(ev *store.RoutableEvent, reason string) []store.Route {
	var routes []store.Route
	for _, f := range e.bySource[ev.Source] {
		if subscribes(f, ev.Type) {
			routes = append(routes, store.Route{Flow: f.Name, Failed: reason})
		}
	}
	return routes
}

// Routes computes, for one event, the flows and entities it belongs to and
// its place in each entity's business order.
func (e *Engine) Routes(ev *store.RoutableEvent) []store.Route {
	routes, _ := e.routes(ev)
	return routes
}

// routes is Routes, with the event's body as decoded for it (nil when no
// flow subscribes to the type): the work prepared ahead of a routing
// transaction evaluates the same body, and decoding it again was a
// sixth of the bytes a webhook allocated.
func (e *Engine) routes(ev *store.RoutableEvent) ([]store.Route, *input) {
	var routes []store.Route
	var in *input // decoded only when a flow subscribes to the type
	for _, f := range e.bySource[ev.Source] {
		if !subscribes(f, ev.Type) {
			continue
		}
		if in == nil {
			in = e.decode(ev)
		}
		r := store.Route{Flow: f.Name}
		if in.err != nil && !f.Compiled.OpaqueBody {
			r.Failed = "payload: " + in.err.Error()
			routes = append(routes, r)
			continue
		}
		vars := in.vars()
		if c := f.Compiled.When; c != nil {
			ok, err := c.EvalBool(vars)
			if err != nil {
				r.Failed = "when: " + err.Error()
				routes = append(routes, r)
				continue
			}
			if !ok {
				continue
			}
		}
		entity, err := f.Compiled.Entity.EvalString(vars)
		switch {
		case err != nil:
			r.Failed = "entity: " + err.Error()
		case entity == "":
			r.Failed = "entity: the expression gave an empty id"
		default:
			r.Entity = entity
			r.OrderKey, err = orderKey(f, ev, vars)
			if err != nil {
				r.Failed = err.Error()
			}
		}
		// An entity is an identity (store.CheckID): the store's routing
		// rule fails a route whose entity is not, here as in the drivers.
		store.StorableRoute(&r)
		routes = append(routes, r)
	}
	return routes, in
}

// Subscribes reports whether any flow of the source subscribes to the event
// type, so the receiver can store an event nobody wants as unrouted at once.
func (e *Engine) Subscribes(source, typ string) bool {
	for _, f := range e.bySource[source] {
		if subscribes(f, typ) {
			return true
		}
	}
	return false
}

func subscribes(f *config.Flow, typ string) bool {
	if len(f.Events) == 0 {
		// Only a forward flow may leave events out: it takes every type.
		return true
	}
	for _, g := range f.Events {
		if ok, _ := path.Match(g, typ); ok {
			return true
		}
	}
	return false
}

// ProcessOnce claims up to Workers entities and processes their pending
// work in parallel, each entity by one goroutine.
func (e *Engine) ProcessOnce(ctx context.Context) (int, error) {
	leases, err := e.st.EntityClaim(ctx, &store.EntityClaimParams{
		Owner: e.opts.Owner, Now: e.clk.Now(), LeaseFor: e.opts.LeaseFor, Limit: e.opts.Workers,
	})
	if err != nil {
		return 0, fmt.Errorf("claim entities: %w", err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
		errs  []error
	)
	for _, l := range leases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, _, err := e.safeProcess(ctx, l)
			mu.Lock()
			total += n
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	return total, errors.Join(errs...)
}
