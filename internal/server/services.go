package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/console"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

// service is one part of a running process: a background loop, the inbox
// writer, the console's jobs, the HTTP listeners. Start returns once the
// service runs, its work going on in the background; Stop ends it and
// waits, within ctx, until nothing of it runs. Stop must be safe on a
// service that never started or whose Start failed. The loops built on
// internal/loop have this shape already.
//
// It is river's startstop.Service without the Started channel (a Start
// here returns only when the service runs) and with a deadline on Stop.
// Unlike its StopAllParallel, services stop one after the other in
// reverse, because the order is the point: each stops before what it
// uses (docs/architecture.md, "Background loops and shutdown").
type service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// namedService is a service with the name tests watch it by.
type namedService struct {
	name string
	service
}

// serviceFuncs makes a service of a part whose start or stop has another
// shape; a nil func does nothing.
type serviceFuncs struct {
	start func(ctx context.Context) error
	stop  func(ctx context.Context) error
}

func (f serviceFuncs) Start(ctx context.Context) error {
	if f.start == nil {
		return nil
	}
	return f.start(ctx)
}

func (f serviceFuncs) Stop(ctx context.Context) error {
	if f.stop == nil {
		return nil
	}
	return f.stop(ctx)
}

// serviceHooks let tests watch and break a run: start runs before each
// service starts, and its error fails that start as the service's own
// would; stopped runs after each service stopped, and after the store
// closed (name "store"), with what that returned.
type serviceHooks struct {
	start   func(name string) error
	stopped func(name string, err error)
}

// startAll starts svcs in order and returns how many it tried: all of
// them, or up to and including the one that failed, whose error it
// returns. The caller stops that many (stopAll): the failed one too,
// since whatever part of it did start must stop with the others.
func (s *Server) startAll(ctx context.Context, svcs []namedService) (int, error) {
	for i, svc := range svcs {
		var err error
		if s.hooks != nil && s.hooks.start != nil {
			err = s.hooks.start(svc.name)
		}
		if err == nil {
			err = svc.Start(ctx)
		}
		if err != nil {
			return i + 1, err
		}
	}
	return len(svcs), nil
}

// stopAll stops svcs in reverse order, each one even when another failed
// to stop, and returns their errors joined.
func (s *Server) stopAll(ctx context.Context, svcs []namedService) error {
	var errs error
	for i := len(svcs) - 1; i >= 0; i-- {
		err := svcs[i].Stop(ctx)
		s.stopped(svcs[i].name, err)
		errs = errors.Join(errs, err)
	}
	return errs
}

func (s *Server) stopped(name string, err error) {
	if s.hooks != nil && s.hooks.stopped != nil {
		s.hooks.stopped(name, err)
	}
}

// workerLink lets publishing reach the delivery worker, which is built
// after it: the worker is built from publishing's actions and run-time
// destinations, and publishing wakes it (a message published) and tells
// its notifier (an endpoint disabled). Both happen only once the services
// run, long after the link is set; a wake before it would have no worker
// to wake, and the worker's first round claims everything due anyway.
type workerLink struct{ w *deliver.Worker }

func (l *workerLink) Wake() {
	if l.w != nil {
		l.w.Wake()
	}
}

// ReserveFresh and Take hand the worker a publish's deliveries
// (store.PublishHandoff); before the worker is linked there is no room.
func (l *workerLink) ReserveFresh(effects map[string]int) []*store.EffectClaimParams {
	if l.w == nil {
		return nil
	}
	return l.w.ReserveFresh(effects)
}

func (l *workerLink) Take(claims []*store.EffectClaimParams, claimed [][]*store.ClaimedEffect, effects map[string]int) {
	if l.w != nil {
		l.w.Take(claims, claimed, effects)
	}
}

func (l *workerLink) Tell(n deliver.Notification) {
	if l.w != nil {
		l.w.Tell(n)
	}
}

// httpService serves the main listener and, when metrics.listen is set,
// /metrics on a listener of its own.
type httpService struct {
	s       *Server
	srv     *http.Server
	metrics http.Handler
	cons    *console.Console
	api     *api.Handler

	msrv *http.Server
	// errs hears each Serve's end; Run stops serving at the first one
	// that is not the end Stop asked for.
	errs    chan error
	serving sync.WaitGroup
}

// Start listens (unless Options.Listener was given) and serves.
func (h *httpService) Start(context.Context) error {
	s := h.s
	ln := s.opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", s.cfg.Listen); err != nil {
			return fmt.Errorf("listen on %s: %w", s.cfg.Listen, err)
		}
	}
	msrv, mln, err := s.listenMetrics(h.metrics)
	if err != nil {
		_ = ln.Close()
		return err
	}
	s.mu.Lock()
	s.addr = ln.Addr().String()
	if mln != nil {
		s.metricsAddr = mln.Addr().String()
	}
	s.console = h.cons
	s.api = h.api
	s.mu.Unlock()
	h.msrv = msrv
	h.errs = make(chan error, 2)
	h.serve(h.srv, ln)
	if msrv != nil {
		h.serve(msrv, mln)
	}
	return nil
}

func (h *httpService) serve(srv *http.Server, ln net.Listener) {
	h.serving.Add(1)
	go func() {
		defer h.serving.Done()
		h.errs <- srv.Serve(ln)
	}()
}

// Stop stops accepting and drains the requests in flight (their commits
// complete), the main listener first, then waits for both Serve calls to
// return.
func (h *httpService) Stop(ctx context.Context) error {
	if h.errs == nil {
		return nil // never served
	}
	var errs error
	if err := h.srv.Shutdown(ctx); err != nil {
		errs = fmt.Errorf("shutdown http: %w", err)
	}
	if h.msrv != nil {
		if err := h.msrv.Shutdown(ctx); err != nil {
			errs = errors.Join(errs, fmt.Errorf("shutdown metrics listener: %w", err))
		}
	}
	served := make(chan struct{})
	go func() { h.serving.Wait(); close(served) }()
	select {
	case <-served:
	case <-ctx.Done():
		errs = errors.Join(errs, fmt.Errorf("stop http: listeners still serving: %w", ctx.Err()))
	}
	return errs
}
