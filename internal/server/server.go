// Package server assembles a running hookledger: it opens and migrates the
// store, builds the group-commit writer, the flow engine, the delivery
// worker, its verifier, publishing, the signals monitor, the retention loop
// and the HTTP side (receiver, health, metrics, admin API, console) on it,
// and runs them as one list of services, started in order and stopped in
// reverse, the store closing last.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/attribute"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/console"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/health"
	"github.com/hookledger/hookledger/internal/inbox"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/publish"
	"github.com/hookledger/hookledger/internal/receive"
	"github.com/hookledger/hookledger/internal/retention"
	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
	"github.com/hookledger/hookledger/internal/tracing"
)

// Options are the injected dependencies.
type Options struct {
	Logger *slog.Logger
	// Clock, when set, is the only clock the server reads (tests inject a
	// fake one). When nil the server tells time by HostClock, and on
	// PostgreSQL by HostClock corrected to the database's clock, so that
	// every process on one database judges leases and due times alike
	// (docs/architecture.md, "The database's clock").
	Clock clock.Clock
	// HostClock is this host's clock (default clock.Real). Tests of clock
	// skew set a clock.Shifted to run a process whose host clock is wrong.
	HostClock clock.Clock
	// Listener, when set, is used instead of listening on cfg.Listen (tests
	// pass one bound to 127.0.0.1:0).
	Listener net.Listener
	// Actions registers custom destination kinds for programs that embed
	// hookledger (see package deliver).
	Actions map[string]deliver.Action
	// StallAfter is how long a stage's rounds may keep failing before
	// /readyz turns unready (default health.DefaultStallAfter).
	StallAfter time.Duration
	// Tracing, when set, is the tracer provider (tests inject one with an
	// in-memory exporter); nil builds one from the config's tracing block
	// and the OTEL_* variables. The server shuts down only one it built.
	Tracing *tracing.Provider
	// Version is the build's version stamp, recorded in the traces.
	Version string
}

// Server is one running hookledger process.
type Server struct {
	cfg  *config.Config
	log  *slog.Logger
	clk  clock.Clock
	reg  *prometheus.Registry
	opts Options
	// hooks, when set (tests), watch and break the services' starts and
	// stops.
	hooks *serviceHooks
	// followDB: no clock was injected, so on a database with a clock of
	// its own the server follows it.
	followDB bool

	mu          sync.Mutex
	addr        string
	metricsAddr string
	console     *console.Console
	// api is the admin API's handler once serving (its routes: tests).
	api   *api.Handler
	ready chan struct{}
}

// New validates nothing further: cfg comes from config.Load.
func New(cfg *config.Config, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.HostClock == nil {
		opts.HostClock = clock.Real{}
	}
	followDB := opts.Clock == nil
	if followDB {
		opts.Clock = opts.HostClock
	}
	return &Server{cfg: cfg, log: opts.Logger, clk: opts.Clock, opts: opts, followDB: followDB, ready: make(chan struct{})}
}

// Ready is closed once the server accepts requests.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// MetricsAddr is the address of the metrics listener (metrics.listen),
// once Ready; "" when /metrics is served on the main listener.
func (s *Server) MetricsAddr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metricsAddr
}

// Addr is the address the server listens on, once Ready.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// ConsoleLoginLink mints a one-time login link to the console (valid once,
// for 15 minutes) and returns it as a full URL on the listener, so that a
// program that started the server (hookledger demo) can hand a browser a
// session without the admin token. It returns "" before Ready and when the
// console is off (no admin.token).
func (s *Server) ConsoleLoginLink() string {
	s.mu.Lock()
	cons, addr := s.console, s.addr
	s.mu.Unlock()
	if cons == nil {
		return ""
	}
	link := cons.MintLoginLink()
	if link == "" {
		return ""
	}
	return "http://" + addr + link
}

// Run serves until ctx ends, then shuts down in order. Its services are
// declared once, in start order (parts.services); they start in that order and
// stop in reverse, each before what it uses: the HTTP listeners drain
// in-flight requests (their commits complete), the console's jobs stop,
// the writer commits its queue, then the flow engine, the retention loop,
// the signals monitor, the statistics keeper, the verifier, the delivery
// worker, publishing and the clock sync stop, and the store closes last
// (docs/architecture.md, "Background loops and shutdown"). A start that
// fails stops what started before it the same way. It returns nil after
// a clean stop.
func (s *Server) Run(ctx context.Context) error {
	st, drv, err := s.openStore(ctx)
	if err != nil {
		return err
	}
	p, err := s.build(ctx, st, drv)
	if err != nil {
		return errors.Join(err, s.closeStore(st))
	}
	svcs := p.services(s.cfg)
	for _, w := range s.cfg.Warnings {
		s.log.Warn("config", "warning", w.Error())
	}
	// The end of ctx is the signal to stop the services in order, not a
	// cancellation of each: every one runs until its own Stop.
	if n, err := s.startAll(context.WithoutCancel(ctx), svcs); err != nil {
		stopCtx, cancel := s.shutdownContext()
		defer cancel()
		return errors.Join(err, s.stopAll(stopCtx, svcs[:n]), s.closeStore(st))
	}
	s.log.Info("hookledger serving", "addr", s.Addr(), "store", storeopen.Redact(s.cfg.Store), "sources", len(s.cfg.Sources))
	s.logConsole()
	if p.web.msrv != nil {
		s.log.Info("serving /metrics on its own listener", "addr", s.MetricsAddr(), "auth", s.cfg.Metrics.Auth)
	}
	close(s.ready)

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-p.web.errs:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("serve: %w", err)
		}
	}
	s.log.Info("shutting down: draining in-flight requests")
	stopCtx, cancel := s.shutdownContext()
	defer cancel()
	runErr = errors.Join(runErr, s.stopAll(stopCtx, svcs), s.closeStore(st))
	s.log.Info("stopped")
	return runErr
}

// logConsole names the console's URL, or says how to turn it on.
func (s *Server) logConsole() {
	s.mu.Lock()
	on, addr := s.console != nil, s.addr
	s.mu.Unlock()
	if !on {
		s.log.Info("console off: set admin.token to serve it and the admin API")
		return
	}
	// A server on every interface is reached on this host by loopback.
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	s.log.Info("console served", "url", "http://"+addr+"/")
}

// shutdownContext bounds a shutdown by receive.shutdown_timeout.
func (s *Server) shutdownContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.cfg.Receive.ShutdownTimeout.D())
}

// openStore opens the configured store with its driver and applies
// pending migrations.
func (s *Server) openStore(ctx context.Context) (store.Store, *storeopen.Driver, error) {
	drv, err := storeopen.For(s.cfg.Store)
	if err != nil {
		return nil, nil, fmt.Errorf("open store: %w", err)
	}
	st, err := drv.Open(ctx, s.cfg.Store)
	if err != nil {
		return nil, nil, err
	}
	applied, err := st.Migrate(ctx)
	if err != nil {
		return nil, nil, errors.Join(err, s.closeStore(st))
	}
	if len(applied) > 0 {
		s.log.Info("schema migrated", "applied", applied)
	}
	return st, drv, nil
}

// closeStore closes the store. It is not one of the services: everything
// is built from the open store, and it closes after all of them stopped.
func (s *Server) closeStore(st store.Store) error {
	err := st.Close()
	if err != nil {
		err = fmt.Errorf("close store: %w", err)
	}
	s.stopped("store", err)
	return err
}

// parts are the pieces of a process, built on the open store and not
// started.
type parts struct {
	tracing  *tracing.Provider
	ownTrace bool       // built here: flushed and shut down at stop
	clock    *clockSync // nil unless the process follows the database's clock
	pub      *publish.Service
	worker   *deliver.Worker
	verifier *deliver.Verifier
	stats    *loop.Loop // nil unless the store keeps table statistics
	monitor  *signals.Monitor
	pruner   *retention.Service
	engine   *flow.Engine
	writer   *inbox.Writer
	web      *httpService
}

// services declares the process's services once, in start order; Run
// stops them in reverse. Each starts after what it uses and so stops
// before it: publishing loads the endpoints the worker's first claim may
// need; the verifier and the monitor tell people through the worker's
// notifier, and the engine wakes the worker; the receiver hands events to
// the writer and wakes the engine.
func (p *parts) services(cfg *config.Config) []namedService {
	var svcs []namedService
	add := func(name string, svc service) { svcs = append(svcs, namedService{name, svc}) }
	if p.ownTrace {
		// First to start, last to stop: the spans of every other
		// service's last work are flushed before the process ends.
		add("tracing", serviceFuncs{stop: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, tracing.ShutdownTimeout)
			defer cancel()
			return p.tracing.Shutdown(ctx)
		}})
	}
	if p.clock != nil {
		// The clock keeps its offset once re-measuring stops.
		add("clock sync", p.clock)
	}
	add("publishing", serviceFuncs{start: p.pub.Start, stop: func(ctx context.Context) error {
		if err := p.pub.Stop(ctx); err != nil {
			return fmt.Errorf("stop endpoint refresh: %w", err)
		}
		return nil
	}})
	// An effect whose call was cut short stays submitting and is
	// reconciled after its lease by the next process.
	add("delivery", p.worker)
	add("verifier", p.verifier)
	if p.stats != nil {
		add("table statistics", p.stats)
	}
	add("signals monitor", p.monitor)
	if !cfg.Retention.Disabled {
		// A pruning batch in progress is one short transaction; a pass
		// cut short starts over at the next start.
		add("retention", p.pruner)
	}
	// Unprocessed work simply waits for the next start.
	add("flow engine", p.engine)
	// The writer stops after the listeners, before the engine: every
	// acknowledged event is durable, its queue committed.
	add("inbox writer", serviceFuncs{start: func(context.Context) error { p.writer.Start(); return nil }, stop: p.writer.Stop})
	// The console's jobs (bulk retries, replays) stop between two steps
	// and record how far they got while the store is still open.
	add("console jobs", serviceFuncs{stop: func(ctx context.Context) error {
		if err := p.web.cons.Shutdown(ctx); err != nil {
			return fmt.Errorf("stop console jobs: %w", err)
		}
		return nil
	}})
	add("http", p.web)
	return svcs
}

// build builds every part of the process on the open store. It starts
// nothing.
func (s *Server) build(ctx context.Context, st store.Store, drv *storeopen.Driver) (*parts, error) {
	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p := &parts{tracing: s.opts.Tracing}
	if p.tracing == nil {
		set, err := tracingSettings(s.cfg.Tracing, s.opts.Version).Resolve(os.LookupEnv)
		if err != nil {
			return nil, err
		}
		if p.tracing, err = tracing.New(ctx, set, tracing.Options{}); err != nil {
			return nil, err
		}
		p.ownTrace = p.tracing.Enabled()
	}
	// Before anything reads the clock: on PostgreSQL every component of
	// this process tells time by the database's clock.
	if s.followDB {
		var err error
		if p.clock, err = newClockSync(ctx, st, s.opts.HostClock, s.log, s.reg); err != nil {
			return nil, err
		}
		if p.clock != nil {
			s.clk = p.clock.clk
		}
	}

	registerWriterTime(st, s.reg)

	// Every stage reports its rounds to one board: a stage that keeps
	// failing with work waiting turns /readyz unready (docs/deploy.md).
	board := health.NewBoard(health.Options{Logger: s.log, Clock: s.clk, StallAfter: s.opts.StallAfter})
	p.writer = inbox.New(st, inbox.Options{Logger: s.log, Clock: s.clk, Registerer: s.reg, Flushers: drv.Flushers, Health: board,
		// A commit that outlasts every waiting request's commit_timeout
		// only holds the writer: its callers have been answered 503.
		CommitTimeout: s.cfg.Receive.CommitTimeout.D(),
		// The engine (built below, before the writer starts) routes what
		// it can of each group in the group's commit, and wakes its
		// router for the rest.
		RouteAhead: func(subs []*store.Submission) (queued, after func()) { return p.engine.RouteAhead(subs) }})

	// The delivery worker and the processor sleep when idle; each stage
	// wakes the next as soon as it hands work on, so latency is not bound
	// to the poll interval.
	deliveryMetrics := deliver.NewMetrics(s.reg)
	// Publishing hands the worker one destination per endpoint and the
	// actions that deliver to them (docs/publishing.md), so it is built
	// first and reaches the worker through the link.
	link := &workerLink{}
	p.pub = publish.New(s.cfg, st, publish.Options{Logger: s.log, Clock: s.clk, Registerer: s.reg, Health: board,
		Wake: link.Wake, Handoff: link, Notify: link.Tell, Tracing: p.tracing})
	actions := p.pub.Actions()
	for k, a := range s.opts.Actions {
		actions[k] = a
	}
	worker, err := deliver.New(s.cfg, st, deliver.Options{
		Workers:      s.cfg.Delivery.Workers,
		LeaseFor:     s.cfg.Delivery.Lease.D(),
		PollInterval: s.cfg.Delivery.PollInterval.D(),
		Logger:       s.log,
		Clock:        s.clk,
		Actions:      actions,
		Metrics:      deliveryMetrics,
		Runtime:      p.pub,
		Health:       board,
		Tracing:      p.tracing,
	})
	if err != nil {
		return nil, err
	}
	p.worker, link.w = worker, worker
	p.engine = flow.New(s.cfg, st, flow.Options{
		Workers:      s.cfg.Processing.Workers,
		LeaseFor:     s.cfg.Processing.Lease.D(),
		RetryDelay:   s.cfg.Processing.RetryDelay.D(),
		PollInterval: s.cfg.Processing.PollInterval.D(),
		Linger:       s.cfg.Processing.Linger.D(),
		Logger:       s.log,
		Clock:        s.clk,
		Handoff:      worker,
		Metrics:      flow.NewMetrics(s.reg, deliveryMetrics.Transitions),
		// Effects record when deadline_risk starts to warn about them.
		DeadlineWarnShare: s.cfg.Signals.DeadlineWarnShare,
		Health:            board,
		Tracing:           p.tracing,
	})
	recv, err := receive.New(s.cfg, receive.Options{Writer: p.writer, Router: p.engine,
		Store: st, Clock: s.clk, Logger: s.log, Registerer: s.reg})
	if err != nil {
		return nil, err
	}
	// The signals are measured apart from the pipeline; a missed deadline
	// it escalates is told to a person through the worker's notifier.
	p.monitor = signals.NewMonitor(st, s.cfg.Signals, signals.Options{Logger: s.log, Clock: s.clk, Registerer: s.reg, Health: board,
		OnEscalated: worker.NotifyEscalated, Gatherer: s.reg, Owners: s.cfg.Owners()})
	// Retention deletes what is past each source's retention, one short
	// transaction per batch (docs/retention.md); it needs nothing from
	// the other loops.
	p.pruner = retention.New(st, retention.PolicyOf(s.cfg), retention.Options{Logger: s.log, Clock: s.clk, Registerer: s.reg, Health: board})
	// On PostgreSQL the planner's statistics follow the tables' growth
	// faster than autovacuum does (postgres.Store.AnalyzeGrown).
	p.stats = NewStatsKeeper(st, s.log, s.clk)
	// Continuous verification starts only when a destination sets verify:.
	p.verifier = deliver.NewVerifier(worker, st, deliver.VerifierOptions{})
	p.web = s.web(st, board, recv, p.engine, worker, p.pub, p.tracing)
	return p, nil
}

// web builds the HTTP side: the receiver, /healthz, /readyz, /metrics,
// the admin API and the console.
func (s *Server) web(st store.Store, board *health.Board, recv http.Handler, engine *flow.Engine, worker *deliver.Worker, pub *publish.Service, tp *tracing.Provider) *httpService {
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/{source}", tp.Handler(recv, receiveTracing(s.cfg.Tracing.TrustedSources)))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", s.readyz(st, board))
	// One count of wrong admin tokens per client for the API, the console
	// and /metrics alike, so that a guesser gets no second budget.
	guard := s.guessLimit()
	metrics := s.metricsHandler(guard)
	if s.cfg.Metrics.Listen == "" {
		mux.Handle("GET /metrics", metrics)
	} else {
		// Served on metrics.listen only; not the console's login page
		// either, which a scraper pointed here by mistake would read.
		mux.Handle("GET /metrics", http.NotFoundHandler())
	}
	apiHandler := api.New(st, s.cfg.Admin.Token, s.log, s.clk.Now)
	apiHandler.LimitGuesses(guard)
	apiHandler.ServeReplays(engine)
	apiHandler.ServeCompensations(engine)
	apiHandler.ServeSignals(s.cfg.Signals)
	apiHandler.ServePublishing(pub, s.cfg.Publish.MaxPayloadBytes)
	apiHandler.ServeIdempotencyKeys(deliver.KeyFunc(s.cfg))
	apiHandler.ServeOwners(s.cfg.Owners())
	mux.Handle("/api/v1/", tp.Handler(apiHandler, tracing.ServerOptions{}))
	cons := console.New(st, s.cfg.Admin.Token, s.log, s.clk, console.WithSignals(s.cfg.Signals), console.WithGuessLimit(guard))
	cons.Attach(consoleAttachments(s.cfg, engine, worker, pub, s.reg))
	mux.Handle("/", cons)
	return &httpService{s: s, srv: s.httpServer(mux), metrics: metrics, cons: cons, api: apiHandler}
}

// readiness answers /readyz: ready when the store can commit now, which a
// ping cannot tell (a full disk or a lock held elsewhere still answers
// reads), and no stage of the pipeline has stalled (health.Board). Each
// check is one durable write, so results are reused for a second and at
// most one probe runs at a time: an unauthenticated client polling /readyz
// cannot turn it into a write load.
type readiness struct {
	st  store.Store
	clk clock.Clock
	log *slog.Logger

	mu       sync.Mutex
	at       time.Time
	err      error
	inflight chan struct{} // closed when the running probe ends
	wasDown  bool
}

const (
	readyCacheFor = time.Second
	readyTimeout  = 2 * time.Second
)

func (rd *readiness) check() error {
	rd.mu.Lock()
	if !rd.at.IsZero() && rd.clk.Now().Sub(rd.at) < readyCacheFor {
		err := rd.err
		rd.mu.Unlock()
		return err
	}
	wait := rd.inflight
	if wait == nil {
		wait = make(chan struct{})
		rd.inflight = wait
		go rd.probe(wait)
	}
	rd.mu.Unlock()
	t := time.NewTimer(readyTimeout)
	defer t.Stop()
	select {
	case <-wait:
		rd.mu.Lock()
		defer rd.mu.Unlock()
		return rd.err
	case <-t.C:
		return fmt.Errorf("the store did not commit a probe write within %s", readyTimeout)
	}
}

// probe runs apart from the request: a driver stuck waiting for a lock
// must not hold /readyz past its own timeout.
func (rd *readiness) probe(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*readyTimeout)
	defer cancel()
	err := rd.st.Ping(ctx)
	if err == nil {
		err = rd.st.ProbeWrite(ctx, rd.clk.Now())
	}
	rd.mu.Lock()
	rd.at, rd.err, rd.inflight = rd.clk.Now(), err, nil
	switch {
	case err != nil && !rd.wasDown:
		rd.wasDown = true
		rd.log.Warn("not ready: the store cannot commit", "err", err)
	case err == nil && rd.wasDown:
		rd.wasDown = false
		rd.log.Info("ready again: the store commits")
	}
	rd.mu.Unlock()
	close(done)
}

func (s *Server) readyz(st store.Store, board *health.Board) http.HandlerFunc {
	rd := &readiness{st: st, clk: s.clk, log: s.log}
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := rd.check(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: the store cannot commit\n"))
			return
		}
		// A stalled stage is named, and when it stalled; its cause goes
		// to the log at WARN, not here: /readyz answers anyone, and a
		// driver's error may name the database's host and user.
		if stalls := board.Stalled(); len(stalls) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			for _, st := range stalls {
				_, _ = fmt.Fprintf(w, "not ready: stage %s has made no progress since %s (its cause is logged at WARN)\n",
					st.Stage, st.Since.UTC().Format(time.RFC3339))
			}
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	}
}

// Migrate opens the configured store, applies pending migrations and closes it.
func Migrate(ctx context.Context, cfg *config.Config) ([]string, error) {
	st, err := storeopen.Open(ctx, cfg.Store)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	return st.Migrate(ctx)
}

// tracingSettings are the config's tracing block as the tracing package
// takes it.
func tracingSettings(t config.Tracing, version string) tracing.Settings {
	return tracing.Settings{Enabled: t.Enabled, Endpoint: t.Endpoint, Protocol: t.Protocol,
		SampleRatio: t.SampleRatio, ServiceName: t.ServiceName, Version: version}
}

// receiveTracing names a webhook's source on its span, and trusts the
// traceparent of the sources the config lists.
func receiveTracing(trusted []string) tracing.ServerOptions {
	return tracing.ServerOptions{
		Trusted: func(r *http.Request) bool { return slices.Contains(trusted, r.PathValue("source")) },
		Attributes: func(r *http.Request) []attribute.KeyValue {
			return []attribute.KeyValue{tracing.AttrSource.String(r.PathValue("source"))}
		},
	}
}
