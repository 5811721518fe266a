package console

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookledger/hookledger/internal/console/consoletest"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
)

// TestBrowserOperations drives the operations that run as jobs in
// headless Chromium: a bulk retry from the exception queue (dry run, then
// the run, whose progress block refreshes itself to the end), and a replay
// (plan, then the run, followed to its outcome). No page may log a
// JavaScript error.
func TestBrowserOperations(t *testing.T) {
	f := newFixture(t, 0)
	f.addEffect(t, "o_nr", "crm", store.EffectNeedsReconciliation)
	f.addEffect(t, "o_dead", "erp", store.EffectDead)
	doneID := f.addEffect(t, "o_done", "crm", store.EffectDone)
	g := &gatedStore{Store: f.st, retried: make(chan int64, 10), resume: make(chan struct{})}
	con := New(g, testToken, slog.New(slog.DiscardHandler), f.clk)
	con.Attach(Attachments{Router: routeByEntity{}, Compensations: ordersCompensations{}})
	// The progress blocks poll every 200ms, so that the test sees them
	// move without waiting seconds.
	con.jobs.poll = 200 * time.Millisecond
	paused, resume := make(chan struct{}, 1), make(chan struct{})
	con.jobs.pause = func(ctx context.Context) error {
		paused <- struct{}{}
		select {
		case <-resume:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: con, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); _ = con.Close() })
	base := "http://" + ln.Addr().String()

	b := consoletest.Start(t, 90*time.Second)
	step, text, poll := b.Step, b.Text, b.Poll

	step("log in with a one-time link",
		chromedp.Navigate(base+con.MintLoginLink()),
		chromedp.WaitVisible(chromedp.CSS("main")),
	)

	// Bulk retry: the exception queue's three effects.
	step("open the bulk retry's dry run from the exception queue",
		chromedp.Navigate(base+"/effects"),
		chromedp.WaitVisible(chromedp.CSS("#bulk-retry")),
		chromedp.Click(chromedp.CSS("#bulk-retry")),
		chromedp.WaitVisible(chromedp.CSS("#plan-retryable")),
	)
	if got := text("#plan-retryable"); !strings.HasPrefix(got, "3 ") {
		t.Fatalf("dry run says %q will be retried, want 3", got)
	}
	if got := text("#plan-dests"); !strings.Contains(got, "crm") || !strings.Contains(got, "erp") {
		t.Errorf("dry run per destination: %q", got)
	}
	step("run it", chromedp.Click(chromedp.CSS("#bulk-run")), chromedp.WaitVisible(chromedp.CSS("#job-bar")))
	<-g.retried // the first effect is retried; the run waits at the gate
	if st := text("#job-state"); !strings.Contains(st, "retrying") {
		t.Fatalf("job state %q while the run is held, want retrying", st)
	}
	close(g.resume)
	poll("see the progress reach the end", `document.querySelector("#job-state").textContent.includes("finished")`)
	if got := text("#job-done"); got != "3" {
		t.Fatalf("retried %q, want 3", got)
	}
	if v := text("#job-skipped"); !strings.HasPrefix(v, "0") {
		t.Errorf("skipped %q, want 0", v)
	}
	if st := f.effect(t, f.deadID).State; st != store.EffectApproved {
		t.Fatalf("stored state %s after the bulk retry, want approved", st)
	}

	// Replay: plan, then run, followed to its outcome.
	step("plan a replay of stripe",
		chromedp.Navigate(base+"/replay"),
		chromedp.WaitVisible(chromedp.CSS("#r-source")),
		chromedp.SetValue(chromedp.CSS("#r-source"), "stripe"),
		chromedp.Click(chromedp.CSS("#replay-plan")),
		chromedp.WaitVisible(chromedp.CSS("#plan-events")),
	)
	if got := text("#plan-events"); got != "2" {
		t.Fatalf("plan selects %q events, want 2", got)
	}
	if got := text("#plan-in-ledger"); !strings.HasPrefix(got, "1,") {
		t.Errorf("plan: effects in the ledger %q, want 1", got)
	}
	step("run the replay", chromedp.Click(chromedp.CSS("#replay-run")), chromedp.WaitVisible(chromedp.CSS("#job-bar")))
	<-paused // enqueued, polled once
	f.processReplay(t)
	close(resume)
	poll("see the replay settle", `document.querySelector("#job-state").textContent.includes("finished")`)
	if got := text("#job-settled"); got != "2 of 2" {
		t.Fatalf("replay settled %q, want 2 of 2", got)
	}
	step("see it in the history",
		chromedp.Navigate(base+"/replay"),
		chromedp.WaitVisible(chromedp.CSS("#history-h")),
	)
	if got := text("main"); !strings.Contains(got, "replay 1: 2 work items") {
		t.Errorf("replay history: %q", got)
	}

	// Compensate a done effect, then see the compensation among the
	// entity's effects.
	step("compensate a done effect",
		chromedp.Navigate(fmt.Sprintf("%s/effects/%d", base, doneID)),
		chromedp.WaitVisible(chromedp.CSS("#compensate")),
		chromedp.SetValue(chromedp.CSS("#compensate-note"), "order cancelled by the customer"),
		chromedp.Click(chromedp.CSS("#compensate")),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	if got := text("main"); !strings.Contains(got, "Compensation recorded") || !strings.Contains(got, fmt.Sprintf("#%d", doneID)) {
		t.Fatalf("after compensate: %q", got)
	}
	step("see the compensation on the entity page",
		chromedp.Navigate(base+entityLink("orders", "o_done")),
		chromedp.WaitVisible(chromedp.CSS("main")),
	)
	if got := text("main"); !strings.Contains(got, "push"+flow.CompensateSuffix) {
		t.Errorf("entity page lists no compensation effect: %q", got)
	}

	// The replayed entity's history in business order: the first pass of
	// each event by its order key, the replay's passes after them, the
	// applied one marked and the stale one with its reason.
	step("open the replayed entity",
		chromedp.Navigate(base+entityLink("billing_to_crm", "sub_1")),
		chromedp.WaitVisible(chromedp.CSS("#entity-history")),
	)
	rows, err := chromedp.Run(b.Ctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#entity-history tbody tr")].map(r => r.innerText)`))
	if err != nil {
		t.Fatalf("entity history rows: %v", err)
	}
	if len(rows) != 4 || !strings.Contains(rows[0], "evt_1") || !strings.Contains(rows[0], "(current state)") ||
		!strings.Contains(rows[1], "evt_2") || !strings.Contains(rows[1], "stale") || !strings.Contains(rows[1], "older than applied") ||
		!strings.Contains(rows[2], "replay 1") || !strings.Contains(rows[2], "duplicate") {
		t.Errorf("entity history in business order: %q", rows)
	}

	// No page logged an error, failed a resource or broke the policy.
	b.Check()
}
