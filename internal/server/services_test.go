package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/hookledger/hookledger/internal/config"
)

// serviceNames are Run's services in start order on each driver: the
// order docs/architecture.md describes ("Background loops and shutdown").
// PostgreSQL adds the clock sync (no clock injected: the process follows
// the database's) and the table statistics keeper.
func serviceNames(storeURL string) []string {
	names := []string{"publishing", "delivery", "verifier", "signals monitor", "retention",
		"flow engine", "inbox writer", "console jobs", "http"}
	if strings.HasPrefix(storeURL, "sqlite:") {
		return names
	}
	names = append([]string{"clock sync"}, names...)
	return slices.Insert(names, slices.Index(names, "verifier")+1, "table statistics")
}

// servicesConfig serves /metrics on a listener of its own, so that the
// http service has both listeners to stop.
func servicesConfig(storeURL string) *config.Config {
	yaml := testConfig(storeURL) + "metrics:\n  listen: 127.0.0.1:0\n"
	cfg, err := config.Parse("services.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		panic(err)
	}
	return cfg
}

// lifecycle records what Run started and stopped, in order.
type lifecycle struct {
	mu      sync.Mutex
	started []string
	stopped []string
	errs    []string
}

func (l *lifecycle) hooks(failAt string, failure error) *serviceHooks {
	return &serviceHooks{
		start: func(name string) error {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.started = append(l.started, name)
			if name == failAt {
				return failure
			}
			return nil
		},
		stopped: func(name string, err error) {
			l.mu.Lock()
			defer l.mu.Unlock()
			l.stopped = append(l.stopped, name)
			if err != nil {
				l.errs = append(l.errs, fmt.Sprintf("%s: %v", name, err))
			}
		},
	}
}

// check asserts that the services in started were stopped in reverse
// order, each cleanly, and the store closed after all of them.
func (l *lifecycle) check(t *testing.T, started []string) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.Equal(l.started, started) {
		t.Errorf("started %q, want %q", l.started, started)
	}
	want := append(slices.Clone(started), "store")
	slices.Reverse(want[:len(started)])
	if !slices.Equal(l.stopped, want) {
		t.Errorf("stopped %q, want %q (the reverse of the starts, the store last)", l.stopped, want)
	}
	if len(l.errs) > 0 {
		t.Errorf("stops failed: %q", l.errs)
	}
}

// Run starts its services in order and stops them in reverse, the store
// last; when any one fails to start, everything started before it (and
// whatever part of the failed one did start) is stopped the same way
// before Run returns its error, and no goroutine of the process outlives
// Run.
func TestServicesStopInReverseAlsoWhenAStartFails(t *testing.T) {
	stores(t, testServicesStopInReverse)
}

func testServicesStopInReverse(t *testing.T, storeURL string) {
	cfg := servicesConfig(storeURL)
	names := serviceNames(storeURL)

	t.Run("clean run", func(t *testing.T) {
		var l lifecycle
		srv := New(cfg, Options{})
		srv.hooks = l.hooks("", nil)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { <-srv.Ready(); cancel() }()
		before := hookledgerGoroutines()
		if err := srv.Run(ctx); err != nil {
			t.Fatalf("Run: %v, want a clean stop", err)
		}
		l.check(t, names)
		noneLeft(t, before)
	})
	boom := errors.New("injected start failure")
	for i, name := range names {
		t.Run("failing "+name, func(t *testing.T) {
			var l lifecycle
			srv := New(cfg, Options{})
			srv.hooks = l.hooks(name, boom)
			before := hookledgerGoroutines()
			err := srv.Run(context.Background())
			if !errors.Is(err, boom) {
				t.Fatalf("Run = %v, want the start failure", err)
			}
			l.check(t, names[:i+1])
			noneLeft(t, before)
			select {
			case <-srv.Ready():
				t.Error("Ready was closed, though a service did not start")
			default:
			}
		})
	}
}

// A start that really fails (the listen address is taken) stops every
// service started before it, closes the store last and leaves nothing
// running.
func TestListenFailureStopsWhatStarted(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	storeURL := sqliteURL(t)
	cfg := servicesConfig(storeURL)
	cfg.Listen = busy.Addr().String()
	var l lifecycle
	srv := New(cfg, Options{})
	srv.hooks = l.hooks("", nil)
	before := hookledgerGoroutines()
	err = srv.Run(context.Background())
	if want := "listen on " + cfg.Listen; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Run = %v, want an error containing %q", err, want)
	}
	l.check(t, serviceNames(storeURL))
	noneLeft(t, before)
}

var goroutineHeader = regexp.MustCompile(`^goroutine (\d+) `)

// hookledgerGoroutines returns the stacks of the goroutines running
// hookledger's code, by goroutine id.
func hookledgerGoroutines() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		m := goroutineHeader.FindStringSubmatch(g)
		if m != nil && strings.Contains(g, "\ngithub.com/hookledger/hookledger/internal/") {
			out[m[1]] = g
		}
	}
	return out
}

// noneLeft fails the test when a goroutine running hookledger's code was
// started since before and is still there. A loop's goroutine signals
// that it is done on its way out, so Stop may return while it is still
// returning; it is given turns of the scheduler to finish (no time: one
// still there after a thousand was never waited for).
func noneLeft(t *testing.T, before map[string]string) {
	t.Helper()
	var left []string
	for range 1000 {
		left = left[:0]
		for id, g := range hookledgerGoroutines() {
			if _, ok := before[id]; !ok {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return
		}
		runtime.Gosched()
	}
	t.Errorf("%d goroutines outlived Run:\n\n%s", len(left), strings.Join(left, "\n\n"))
}
