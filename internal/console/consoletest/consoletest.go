// Package consoletest drives the console in headless Chromium for tests:
// the console package's own browser tests (an in-process console) and the
// acceptance test of cmd/hookledger (the real binary) share it.
//
// Start finds a Chromium, starts it with a fresh profile and records,
// from the first page on, everything that says a page went wrong: an
// uncaught exception, a console error (Chromium reports a script that
// failed and a resource the Content-Security-Policy blocked there), an
// answer of 400 or more to any request the page made, and a request that
// failed or was blocked. Check fails the test for each of them.
//
// Without Chromium a test skips loudly on a developer's machine, and
// fails under CI (CI set, package testdep), where .ci/run installs Debian's
// chromium package.
package consoletest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/hookledger/hookledger/internal/testdep"
)

// Chromium returns the path of a local Chromium, or skips the test (fails
// it under CI) when there is none.
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	testdep.Missing(t, "no Chromium found (looked for chromium, chromium-browser, google-chrome on PATH): "+
		"the console's browser test did not run; install Debian's chromium package (apt-get install chromium)")
	return ""
}

// Browser is one headless Chromium with one tab, bound to a test.
type Browser struct {
	// Ctx is the tab's chromedp context, for actions the helpers lack.
	Ctx context.Context

	t        testing.TB
	bound    context.Context // ends when the test's time for the browser is up
	cancel   []context.CancelFunc
	mu       sync.Mutex
	problems []string
	console  chan struct{}
	closed   bool
}

// TempDir is a directory for one browser's profile and temporary files,
// removed when t ends. Its path is short, unlike t.TempDir's (which
// carries the test's name): Chromium puts a Unix socket under it, and a
// socket's path cannot exceed 107 bytes.
func TempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "chromium")
	if err != nil {
		t.Fatalf("browser directory: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// AllocatorOptions are the flags every browser of the tests and of the
// screenshot script runs with: headless Debian chromium as root in a
// sandbox-less container, nothing fetched from the network, a fresh
// profile in userDataDir, 1280×800. extra adds to them. The browser's
// temporary files go to userDataDir too: Chromium leaves a directory of
// its own (org.chromium.Chromium.*, its singleton socket) in TMPDIR at
// every start, and the system one would collect one per browser a test
// ever started. userDataDir's path must be short (TempDir).
func AllocatorOptions(bin, userDataDir string, extra ...chromedp.ExecAllocatorOption) []chromedp.ExecAllocatorOption {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(userDataDir),
		chromedp.Env("TMPDIR="+userDataDir),
		chromedp.WindowSize(1280, 800),
	)
	return append(opts, extra...)
}

// Start launches Chromium for t. limit bounds the whole browser session:
// it stops a hung browser from holding the suite, it is not a
// measurement. The browser stops when the test ends, or at Check.
func Start(t testing.TB, limit time.Duration) *Browser {
	t.Helper()
	bin := Chromium(t)
	bound, cancel := context.WithTimeout(context.Background(), limit)
	actx, cancelAlloc := chromedp.NewExecAllocator(bound, AllocatorOptions(bin, TempDir(t))...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	b := &Browser{Ctx: bctx, t: t, bound: bound, cancel: []context.CancelFunc{cancelBrowser, cancelAlloc, cancel},
		console: make(chan struct{})}
	t.Cleanup(b.stop)

	// Every console message and uncaught exception of every page. The
	// subscription starts the browser; when it cannot, the reader ends
	// at once and Do below says why.
	messages := chromedp.Console(bctx)
	go func() {
		defer close(b.console)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				b.problem(fmt.Sprintf("the page logged a JavaScript error: %s (%s:%d)", m, m.URL, m.Line+1))
			}
		}
	}()
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium (%s): %v", bin, err)
	}
	// Every answer and failure of the network; the callback only records.
	urls := map[network.RequestID]string{}
	err := chromedp.Listen(bctx, func(ev any) {
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			b.mu.Lock()
			urls[e.RequestID] = e.Request.URL
			b.mu.Unlock()
		case *network.EventResponseReceived:
			if e.Response.Status >= 400 {
				b.problem(fmt.Sprintf("a resource failed: %d for %s", e.Response.Status, e.Response.URL))
			}
		case *network.EventLoadingFailed:
			// A request cut short by leaving the page (a list's refresh
			// in flight) is cancelled, not failed.
			if e.Canceled && e.BlockedReason == "" {
				return
			}
			b.mu.Lock()
			u := urls[e.RequestID]
			b.mu.Unlock()
			b.problem(fmt.Sprintf("a request failed: %s %s (blocked: %q)", u, e.ErrorText, e.BlockedReason))
		}
	})
	if err != nil {
		t.Fatalf("listen to chromium: %v", err)
	}
	return b
}

func (b *Browser) problem(s string) {
	b.mu.Lock()
	b.problems = append(b.problems, s)
	b.mu.Unlock()
}

// stop ends the browser and waits for the console messages to be read.
func (b *Browser) stop() {
	if b.closed {
		return
	}
	b.closed = true
	b.cancel[0]()
	<-b.console
	for _, c := range b.cancel[1:] {
		c()
	}
}

// Problems stops the browser and returns what went wrong in its pages,
// one line each, in the order seen.
func (b *Browser) Problems() []string {
	b.stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.problems)
}

// Check stops the browser and fails the test for every problem a page
// had, and when the browser ran out of its time.
func (b *Browser) Check() {
	b.t.Helper()
	for _, p := range b.Problems() {
		b.t.Error(p)
	}
	if errors.Is(b.bound.Err(), context.DeadlineExceeded) {
		b.t.Error("the browser test ran out of time")
	}
}

// Step runs actions within 15 seconds; on failure it names the page and
// the start of its text.
func (b *Browser) Step(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v (page %s)", what, err, b.where())
	}
}

func (b *Browser) where() string {
	s, _ := chromedp.Run(b.Ctx, chromedp.Evaluate[string](`location.href + " " + document.body.innerText.slice(0, 600)`))
	return s
}

// Text is the visible text of the first element sel matches.
func (b *Browser) Text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.Ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("text of %s: %v (page %s)", sel, err, b.where())
	}
	return strings.TrimSpace(s)
}

// Eval evaluates a JavaScript expression whose value is a string.
func (b *Browser) Eval(expr string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.Ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		b.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return s
}

// Poll waits for a JavaScript expression to hold; a poll cut by a
// navigation (the page it ran in went away) starts again in the new page.
func (b *Browser) Poll(what, expr string) {
	b.t.Helper()
	var err error
	for range 20 {
		if _, err = chromedp.Run(b.Ctx, chromedp.Poll[bool](expr)); err == nil || b.Ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		b.t.Fatalf("%s: waiting for %s: %v (page %s)", what, expr, err, b.where())
	}
}
