// Package publish sends webhooks to the endpoints of a team's customers
// and partners, as the Standard Webhooks spec describes (WH06;
// docs/publishing.md): endpoints with filters and rotating secrets, a
// durable publish call guarded by an Idempotency-Key, and the fan-out of
// each message as ledger effects that the delivery worker carries out,
// signed on every attempt, retried on the spec's schedule, parked (never
// dropped) while an endpoint is disabled.
//
// The package keeps a snapshot of the endpoints, re-read from the store
// every publish.refresh and after each change this process makes, and
// offers the worker one destination per endpoint (RuntimeDestinations).
package publish

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookledger/hookledger/internal/aimd"
	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/health"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// Store is the part of the store publishing uses.
type Store interface {
	store.Publishing
	// EffectParked counts an endpoint's parked and waiting messages.
	EffectParked(ctx context.Context) ([]*store.ParkedCount, error)
	EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error)
	EffectOperate(ctx context.Context, p *store.EffectOperateParams) (*store.Effect, error)
}

// Options tune the service; zero values take defaults.
type Options struct {
	Logger *slog.Logger
	Clock  clock.Clock
	// Health hears whether this stage's rounds make progress (nil: nobody).
	Health *health.Board
	// HTTPClient sends the deliveries (default: a client with keep-alives);
	// non-public addresses are refused unless the endpoint allows them.
	HTTPClient *http.Client
	Resolver   outbound.Resolver
	// Notify tells a person that an endpoint was disabled (nil: nobody).
	Notify     func(deliver.Notification)
	Registerer prometheus.Registerer
	// Wake makes the delivery worker look for due effects now.
	Wake func()
	// Handoff, when set, is this process's delivery worker: a publish
	// inserts the deliveries it has room for already claimed for it
	// (store.PublishHandoff), and wakes it only where effects are left.
	// Wake is then unused after a publish.
	Handoff store.PublishHandoff
	// Tracing records a span per publish (nil: tracing.Off).
	Tracing *tracing.Provider
}

// Service is publishing in one process.
type Service struct {
	st   Store
	cfg  *config.Config
	opts Options
	log  *slog.Logger
	clk  clock.Clock
	loop *loop.Loop
	http *deliver.HTTPAction
	m    *metrics
	// tracer records a span per publish.
	tracer trace.Tracer

	mu      sync.Mutex
	version uint64
	eps     map[string]*store.Endpoint
	dests   []*config.Destination
	// reads numbers each Refresh's read of the store; installed is the
	// number of the read whose endpoints are in eps (mu).
	reads     atomic.Uint64
	installed uint64

	// disableMu lets one delivery at a time disable an endpoint.
	disableMu sync.Mutex

	// limits are the endpoints' adaptive limits on deliveries in flight,
	// by endpoint id (limMu): the worker reads them at each claim
	// (InFlightLimit), each delivery's answer moves them.
	limMu  sync.Mutex
	limits map[string]*aimd.Limit

	// inflight holds the Idempotency-Keys whose first request this
	// process is still storing (409 for a second one meanwhile).
	keysMu   sync.Mutex
	inflight map[string]bool

	// nextPrune is when expired Idempotency-Keys are dropped next (the
	// refresh loop's own state: only step touches it).
	nextPrune time.Time

	// afterRead, when set, runs in Refresh between reading the endpoints
	// and installing them: tests use it to interleave a change there.
	afterRead func()
}

// New builds the service.
func New(cfg *config.Config, st Store, opts Options) *Service {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Wake == nil {
		opts.Wake = func() {}
	}
	if opts.Tracing == nil {
		opts.Tracing = tracing.Off()
	}
	if opts.HTTPClient == nil {
		// The endpoints' calls run on the delivery workers.
		opts.HTTPClient = outbound.Client(cfg.Delivery.Workers)
	}
	s := &Service{st: st, cfg: cfg, opts: opts, log: opts.Logger, clk: opts.Clock,
		http: &deliver.HTTPAction{Client: opts.HTTPClient, Resolver: opts.Resolver},
		m:    newMetrics(opts.Registerer), eps: map[string]*store.Endpoint{}, inflight: map[string]bool{},
		limits: map[string]*aimd.Limit{}, tracer: opts.Tracing.Tracer()}
	s.loop = loop.New("endpoints", s.step,
		loop.Options{PollInterval: cfg.Publish.Refresh.D(), Logger: opts.Logger, Clock: opts.Clock, Stage: opts.Health.Stage("publishing")})
	return s
}

// Actions are the destination kinds publishing adds to the worker.
func (s *Service) Actions() map[string]deliver.Action {
	return map[string]deliver.Action{
		config.KindEndpoint: &endpointAction{s: s},
		config.KindPublish:  &publishAction{s: s},
	}
}

// Start writes the config's endpoints to the store, reads them all, and
// re-reads them every publish.refresh until Stop.
func (s *Service) Start(ctx context.Context) error {
	if err := s.Sync(ctx); err != nil {
		return err
	}
	if err := s.Refresh(ctx); err != nil {
		return err
	}
	return s.loop.Start(ctx)
}

// Stop ends the refresh loop.
func (s *Service) Stop(ctx context.Context) error { return s.loop.Stop(ctx) }

// step re-reads the endpoints and drops expired Idempotency-Keys.
func (s *Service) step(ctx context.Context) (bool, error) {
	if err := s.Refresh(ctx); err != nil {
		return false, err
	}
	// Expired keys are dropped once a minute, not at every re-read: on
	// SQLite each prune is a write through the one writer. A full batch
	// means more are waiting, so the next one runs at once.
	now := s.clk.Now()
	if now.Before(s.nextPrune) {
		return false, nil
	}
	n, err := s.st.IdempotencyPrune(ctx, now, 500)
	if err != nil {
		return false, fmt.Errorf("prune idempotency keys: %w", err)
	}
	if n < 500 {
		s.nextPrune = now.Add(time.Minute)
	}
	return n == 500, nil
}

// Refresh re-reads the endpoints; the worker sees a new version only when
// one changed. Every change this process makes calls it after the change
// is committed, and once that call returns the snapshot is never older
// than the change (a disabled endpoint stays disabled here).
func (s *Service) Refresh(ctx context.Context) error {
	// Several re-reads run at once (the refresh loop, a delivery's
	// outcome, the admin API), and one that read the endpoints before a
	// change can finish after the change's own re-read: installed, it
	// would undo the change until the next one (a 410 that disabled an
	// endpoint, whose messages would then be sent). Each read is numbered
	// before it starts, and a read older than the one installed is
	// dropped: the change's re-read is numbered after the change was
	// committed, so whatever is installed after it read the change too.
	// Numbering costs nothing and never waits, where holding one lock
	// across the read would make every delivery outcome wait for a slow
	// read in flight.
	n := s.reads.Add(1)
	list, err := s.st.EndpointList(ctx)
	if err != nil {
		return fmt.Errorf("read endpoints: %w", err)
	}
	if s.afterRead != nil {
		s.afterRead()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if n < s.installed {
		return nil // a newer read is installed
	}
	s.installed = n
	changed := len(list) != len(s.eps)
	eps := make(map[string]*store.Endpoint, len(list))
	for _, e := range list {
		eps[e.ID] = e
		if old := s.eps[e.ID]; old == nil || !sameEndpoint(old, e) {
			changed = true
		}
	}
	if !changed {
		return nil
	}
	s.eps = eps
	s.dests = s.dests[:0:0]
	for _, e := range list {
		s.dests = append(s.dests, s.destination(e))
	}
	s.setLimits(s.dests)
	s.version++
	return nil
}

// setLimits gives every endpoint of dests an adaptive limit whose ceiling
// is its max_in_flight, keeping the limit an endpoint already has (a
// change of its url or types says nothing of its pace), and drops those
// of endpoints no longer there.
func (s *Service) setLimits(dests []*config.Destination) {
	s.limMu.Lock()
	defer s.limMu.Unlock()
	keep := make(map[string]*aimd.Limit, len(dests))
	for _, d := range dests {
		l := s.limits[d.Name]
		if l == nil {
			l = aimd.New(d.MaxInFlight, s.cfg.Publish.SlowAnswer.D())
		} else {
			l.SetCeiling(d.MaxInFlight)
		}
		keep[d.Name] = l
	}
	s.limits = keep
}

// limit is the adaptive limit of an endpoint's destination, or nil.
func (s *Service) limit(dest string) *aimd.Limit {
	s.limMu.Lock()
	defer s.limMu.Unlock()
	return s.limits[dest]
}

// InFlightLimit is what deliver's Worker asks its runtime destinations for:
// how many deliveries an endpoint may have in flight now (0 for a destination not its own).
func (s *Service) InFlightLimit(dest string) int {
	if l := s.limit(dest); l != nil {
		return l.Current()
	}
	return 0
}

// sameEndpoint tells whether a re-read endpoint is the one in the
// snapshot. It compares every field, not only updated_at: two changes
// within one tick of the clock (a stopped test clock, a clock stepped
// back, another process's clock) leave updated_at as it was, and the
// snapshot would keep the old url or types for good. Comparing the whole
// value keeps a field added to the endpoint from being missed here.
func sameEndpoint(a, b *store.Endpoint) bool {
	return reflect.DeepEqual(*a, *b)
}

// RuntimeDestinations implements deliver.DestinationSource.
func (s *Service) RuntimeDestinations() (uint64, []*config.Destination) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version, s.dests
}

// endpoint returns the snapshot of one endpoint, or nil.
func (s *Service) endpoint(id string) *store.Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.eps[id]
}

// destination is what the worker delivers an endpoint's effects with.
func (s *Service) destination(e *store.Endpoint) *config.Destination {
	p := &s.cfg.Publish
	d := &config.Destination{
		Name: store.EndpointDestination(e.ID), Kind: config.KindEndpoint, Preset: "generic",
		BaseURL: e.URL, Timeout: p.Timeout, Owner: e.Owner, Builtin: true,
		Retry: config.RetryPolicy{Base: config.Duration(time.Second), Factor: 2, Cap: config.Duration(time.Minute),
			Attempts: p.Attempts(), Redrive: []config.Duration{}},
		RetryAfter: config.RetryAfter{Unit: "seconds", Max: config.Duration(10 * time.Hour)},
		// The receiver dedupes on webhook-id (the spec asks it to), so a
		// call whose outcome is unknown is resent, as a failed one is.
		Idem:                 &config.Idempotency{Header: "webhook-id", Window: p.DisableAfter},
		MaxInFlight:          e.MaxInFlight,
		AllowPrivateNetworks: e.AllowPrivateNetworks,
		TracePropagation:     p.TracePropagation,
		Schedule:             p.ScheduleDurations(),
		ParkRepair: fmt.Sprintf("enable endpoint %s once it accepts messages again (PATCH /api/v1/endpoints/%s with {\"enabled\": true}): "+
			"its parked messages are then delivered in the order they were published", e.ID, e.ID),
	}
	if d.MaxInFlight == 0 {
		d.MaxInFlight = p.MaxInFlight
	}
	if e.RateLimit > 0 {
		d.RateLimit = config.RateLimit{PerSecond: e.RateLimit, Burst: max(1, int(e.RateLimit))}
	}
	if !e.Enabled {
		d.Paused = fmt.Sprintf("endpoint %s is disabled (%s)", e.ID, e.DisabledReason)
	}
	return d
}
