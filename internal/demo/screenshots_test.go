//go:build screenshots

package demo

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookledger/hookledger/internal/console/consoletest"
)

// syncWriter is the demo's output, read while the demo runs.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestScreenshots runs the demo, logs in to its console with the printed
// one-time link in headless Chromium and saves the README's screenshots
// (1280x800 PNG) of the overview, the events list, the dossier's order
// and the exception queue. scripts/screenshots.sh runs it:
//
//	go test -tags screenshots -run TestScreenshots -count=1 ./internal/demo
//
// HOOKLEDGER_SCREENSHOTS_DIR is where they go (default docs/img),
// HOOKLEDGER_CHROMIUM the browser (default /usr/bin/chromium).
func TestScreenshots(t *testing.T) {
	outDir := os.Getenv("HOOKLEDGER_SCREENSHOTS_DIR")
	if outDir == "" {
		outDir = filepath.Join("..", "..", "docs", "img")
	}
	bin := os.Getenv("HOOKLEDGER_CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("no Chromium at %s (apt-get install chromium, or set HOOKLEDGER_CHROMIUM): %v", bin, err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		t.Fatal(err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := &syncWriter{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	// Speed 4: the deadline and the verification pass within seconds, and
	// the ages on the pages still read like a person's minutes.
	go func() { done <- Run(ctx, Options{Listener: ln, Speed: 4, Out: out}) }()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), "press Ctrl-C") {
		select {
		case err := <-done:
			t.Fatalf("the demo ended early: %v\n%s", err, out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not finish its script:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond) // waiting for the demo's output, not measuring time
	}
	m := regexp.MustCompile(`Log in once: (\S+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no login link in:\n%s", out)
	}
	link := m[1]
	base := link[:strings.Index(link, "/login")]

	bctxTimeout, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelTimeout()
	opts := consoletest.AllocatorOptions(bin, consoletest.TempDir(t), chromedp.Flag("hide-scrollbars", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(bctxTimeout, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 800)); err != nil {
		t.Fatalf("start chromium (%s): %v", bin, err)
	}

	shoot := func(name, url string) {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS("main"))); err != nil {
			t.Fatalf("%s: open %s: %v", name, url, err)
		}
		// The lists fill and the charts draw after load: wait for the
		// page, then for no htmx request in flight.
		if _, err := chromedp.Run(bctx, chromedp.Poll[bool](
			`document.readyState === "complete" && !document.querySelector(".htmx-request")`)); err != nil {
			t.Fatalf("%s: waiting for the page: %v", name, err)
		}
		path, err := chromedp.Run(bctx, chromedp.Evaluate[string]("location.pathname"))
		if err != nil || path == "/login" {
			t.Fatalf("%s: landed on %q (%v), want a page behind the session", name, path, err)
		}
		png, err := chromedp.Run(bctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatalf("%s: screenshot: %v", name, err)
		}
		if len(png) < 8 || string(png[1:4]) != "PNG" {
			t.Fatalf("%s: not a PNG", name)
		}
		file := filepath.Join(outDir, name+".png")
		if err := os.WriteFile(file, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s (%d bytes)", file, len(png))
	}
	shoot("overview", link) // the one-time link logs in and lands on the overview
	shoot("events", base+"/events")
	shoot("entity", base+"/entity?flow=orders&entity=ord-1001")
	shoot("exceptions", base+"/effects")

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("demo stop: %v", err)
	}
}
