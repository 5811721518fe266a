// Package server assembles a running hookledger: it opens and migrates the
// store, starts the group-commit writer, the flow engine, the delivery
// worker, its verifier, the signals monitor and the retention loop, serves HTTP (receiver,
// health, metrics, admin API, console) and shuts all of it down in order.
package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/console"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/health"
	"github.com/hookledger/hookledger/internal/inbox"
	"github.com/hookledger/hookledger/internal/publish"
	"github.com/hookledger/hookledger/internal/receive"
	"github.com/hookledger/hookledger/internal/retention"
	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
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
}

// Server is one running hookledger process.
type Server struct {
	cfg  *config.Config
	log  *slog.Logger
	clk  clock.Clock
	reg  *prometheus.Registry
	opts Options
	// followDB: no clock was injected, so on a database with a clock of
	// its own the server follows it.
	followDB bool

	mu          sync.Mutex
	addr        string
	metricsAddr string
	console     *console.Console
	ready       chan struct{}
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

// Run serves until ctx ends, then shuts down in order: stop accepting and
// drain in-flight requests (their commits complete), stop the console's
// jobs, stop the writer after its queue is committed, then the retention
// loop, the signals monitor, the flow engine, the verifier and the delivery worker, and close
// the store (docs/architecture.md, "Background loops and shutdown"). It
// returns nil after a clean stop.
func (s *Server) Run(ctx context.Context) error {
	drv, err := storeopen.For(s.cfg.Store)
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	st, err := drv.Open(ctx, s.cfg.Store)
	if err != nil {
		return err
	}
	defer st.Close()
	applied, err := st.Migrate(ctx)
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		s.log.Info("schema migrated", "applied", applied)
	}

	s.reg = prometheus.NewRegistry()
	s.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	// Before anything reads the clock: on PostgreSQL every component of
	// this process tells time by the database's clock.
	if s.followDB {
		cs, err := newClockSync(ctx, st, s.opts.HostClock, s.log, s.reg)
		if err != nil {
			return err
		}
		if cs != nil {
			s.clk = cs.clk
			if err := cs.Start(context.WithoutCancel(ctx)); err != nil {
				return err
			}
			// Last, after the delivery worker, before the store closes:
			// the clock keeps its offset once re-measuring stops.
			defer func() { _ = cs.Stop(context.Background()) }()
		}
	}

	// Every stage reports its rounds to one board: a stage that keeps
	// failing with work waiting turns /readyz unready (docs/deploy.md).
	board := health.NewBoard(health.Options{Logger: s.log, Clock: s.clk, StallAfter: s.opts.StallAfter})
	writer := inbox.New(st, inbox.Options{Logger: s.log, Clock: s.clk, Registerer: s.reg, Flushers: drv.Flushers, Health: board,
		// A commit that outlasts every waiting request's commit_timeout
		// only holds the writer: its callers have been answered 503.
		CommitTimeout: s.cfg.Receive.CommitTimeout.D()})
	writer.Start()

	// The delivery worker and the processor sleep when idle; each stage
	// wakes the next as soon as it hands work on, so latency is not bound
	// to the poll interval.
	deliveryMetrics := deliver.NewMetrics(s.reg)
	// Publishing hands the worker one destination per endpoint and the
	// actions that deliver to them (docs/publishing.md); the worker is
	// made after it, so its hooks reach the worker through this variable.
	var worker *deliver.Worker
	pub := publish.New(s.cfg, st, publish.Options{Logger: s.log, Clock: s.clk, Registerer: s.reg, Health: board,
		Wake:   func() { worker.Wake() },
		Notify: func(n deliver.Notification) { worker.Tell(n) }})
	actions := pub.Actions()
	for k, a := range s.opts.Actions {
		actions[k] = a
	}
	worker, err = deliver.New(s.cfg, st, deliver.Options{
		Workers:      s.cfg.Delivery.Workers,
		LeaseFor:     s.cfg.Delivery.Lease.D(),
		PollInterval: s.cfg.Delivery.PollInterval.D(),
		Logger:       s.log,
		Clock:        s.clk,
		Actions:      actions,
		Metrics:      deliveryMetrics,
		Runtime:      pub,
		Health:       board,
	})
	if err != nil {
		_ = writer.Stop(context.Background())
		return err
	}
	engine := flow.New(s.cfg, st, flow.Options{
		Workers:      s.cfg.Processing.Workers,
		LeaseFor:     s.cfg.Processing.Lease.D(),
		RetryDelay:   s.cfg.Processing.RetryDelay.D(),
		PollInterval: s.cfg.Processing.PollInterval.D(),
		Logger:       s.log,
		Clock:        s.clk,
		OnEffects:    worker.Wake,
		Metrics:      flow.NewMetrics(s.reg, deliveryMetrics.Transitions),
		// Effects record when deadline_risk starts to warn about them.
		DeadlineWarnShare: s.cfg.Signals.DeadlineWarnShare,
		Health:            board,
	})
	recv, err := receive.New(s.cfg, receive.Options{Writer: writer, Router: engine, OnStored: engine.WakeRouting,
		Store: st, Clock: s.clk, Logger: s.log, Registerer: s.reg})
	if err != nil {
		_ = writer.Stop(context.Background())
		return err
	}
	engineCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	defer stopEngine()
	if err := engine.Start(engineCtx); err != nil {
		_ = writer.Stop(context.Background())
		return err
	}
	if err := pub.Start(engineCtx); err != nil {
		_ = writer.Stop(context.Background())
		return err
	}
	if err := worker.Start(engineCtx); err != nil {
		_ = writer.Stop(context.Background())
		return err
	}
	// The signals are measured apart from the pipeline; a missed deadline
	// it escalates is told to a person through the worker's notifier.
	monitor := signals.NewMonitor(st, s.cfg.Signals, signals.Options{Logger: s.log, Clock: s.clk, Registerer: s.reg, Health: board,
		OnEscalated: worker.NotifyEscalated, Gatherer: s.reg})
	if err := monitor.Start(engineCtx); err != nil {
		_ = writer.Stop(context.Background())
		return err
	}
	// Retention deletes what is past each source's retention, one short
	// transaction per batch (docs/retention.md); it needs nothing from
	// the other loops.
	pruner := retention.New(st, retention.PolicyOf(s.cfg), retention.Options{Logger: s.log, Clock: s.clk, Registerer: s.reg, Health: board})
	if !s.cfg.Retention.Disabled {
		if err := pruner.Start(engineCtx); err != nil {
			_ = writer.Stop(context.Background())
			return err
		}
	}
	// On PostgreSQL the planner's statistics follow the tables' growth
	// faster than autovacuum does (postgres.Store.AnalyzeGrown).
	stats := NewStatsKeeper(st, s.log, s.clk)
	if stats != nil {
		if err := stats.Start(engineCtx); err != nil {
			_ = writer.Stop(context.Background())
			return err
		}
	}
	// Continuous verification starts only when a destination sets verify:.
	verifier := deliver.NewVerifier(worker, st, deliver.VerifierOptions{})
	if err := verifier.Start(engineCtx); err != nil {
		_ = writer.Stop(context.Background())
		return err
	}
	for _, w := range s.cfg.Warnings {
		s.log.Warn("config", "warning", w.Error())
	}

	mux := http.NewServeMux()
	mux.Handle("POST /hooks/{source}", recv)
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
	mux.Handle("/api/v1/", apiHandler)
	cons := console.New(st, s.cfg.Admin.Token, s.log, s.clk, console.WithSignals(s.cfg.Signals), console.WithGuessLimit(guard))
	cons.Attach(consoleAttachments(s.cfg, engine, worker, pub, s.reg))
	mux.Handle("/", cons)

	rc := s.cfg.Receive
	srv := s.httpServer(mux)
	ln := s.opts.Listener
	if ln == nil {
		ln, err = net.Listen("tcp", s.cfg.Listen)
		if err != nil {
			_ = writer.Stop(context.Background())
			return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
		}
	}
	msrv, mln, err := s.listenMetrics(metrics)
	if err != nil {
		_ = ln.Close()
		_ = writer.Stop(context.Background())
		return err
	}
	s.mu.Lock()
	s.addr = ln.Addr().String()
	if mln != nil {
		s.metricsAddr = mln.Addr().String()
	}
	s.console = cons
	s.mu.Unlock()
	s.log.Info("hookledger serving", "addr", s.addr, "store", storeopen.Redact(s.cfg.Store), "sources", len(s.cfg.Sources))

	serveErr := make(chan error, 2)
	go func() { serveErr <- srv.Serve(ln) }()
	if msrv != nil {
		s.log.Info("serving /metrics on its own listener", "addr", s.metricsAddr, "auth", s.cfg.Metrics.Auth)
		go func() { serveErr <- msrv.Serve(mln) }()
	}
	close(s.ready)

	var runErr error
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("serve: %w", err)
		}
	}
	s.log.Info("shutting down: draining in-flight requests")
	shutCtx, cancel := context.WithTimeout(context.Background(), rc.ShutdownTimeout.D())
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("shutdown http: %w", err))
	}
	if msrv != nil {
		if err := msrv.Shutdown(shutCtx); err != nil {
			runErr = errors.Join(runErr, fmt.Errorf("shutdown metrics listener: %w", err))
		}
	}
	// The console's jobs (bulk retries, replays) stop between two steps
	// and record how far they got while the store is still open.
	if err := cons.Shutdown(shutCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("stop console jobs: %w", err))
	}
	if err := writer.Stop(shutCtx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	// The processor stops after the inbox: every acknowledged event is
	// already durable, and unprocessed work simply waits for the next start.
	stopEngine()
	// A pruning batch in progress is one short transaction; a pass cut
	// short starts over at the next start.
	if err := pruner.Stop(shutCtx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if err := monitor.Stop(shutCtx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	if stats != nil {
		if err := stats.Stop(shutCtx); err != nil {
			runErr = errors.Join(runErr, err)
		}
	}
	if err := engine.Stop(shutCtx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	// Before the worker: its notifications go out through the worker's.
	if err := verifier.Stop(shutCtx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	// An effect whose call was cut short stays submitting and is
	// reconciled after its lease by the next process.
	if err := pub.Stop(shutCtx); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("stop endpoint refresh: %w", err))
	}
	if err := worker.Stop(shutCtx); err != nil {
		runErr = errors.Join(runErr, err)
	}
	s.log.Info("stopped")
	return runErr
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
