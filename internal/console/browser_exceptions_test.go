package console

import (
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookledger/hookledger/internal/console/consoletest"
)

// TestBrowserDeadLetterRepair follows a dead-lettered event in headless
// Chromium from the exception queue to its page, plans its replay, and
// resolves it with a note. No page may log a JavaScript error.
func TestBrowserDeadLetterRepair(t *testing.T) {
	f := newFixture(t, 0)
	f.addDeadEvent(t, "evt_dead")
	con := New(f.st, testToken, slog.New(slog.DiscardHandler), f.clk)
	con.Attach(Attachments{Router: routeByEntity{}, Owners: testOwners})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: con, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); _ = con.Close() })
	base := "http://" + ln.Addr().String()

	b := consoletest.Start(t, 90*time.Second)
	step, text := b.Step, b.Text
	step("log in with a one-time link",
		chromedp.Navigate(base+con.MintLoginLink()),
		chromedp.WaitVisible(chromedp.CSS("main")),
	)
	step("find the event in the exception queue",
		chromedp.Navigate(base+"/effects"),
		chromedp.WaitVisible(chromedp.CSS("#dead-event-rows")),
	)
	if row := text("#dead-event-rows"); !strings.Contains(row, "evt_dead") || !strings.Contains(row, deadReason) ||
		!strings.Contains(row, "team-billing") {
		t.Fatalf("queue row: %q", row)
	}
	step("open it",
		chromedp.Click(chromedp.CSS(`#dead-event-rows a`)),
		chromedp.WaitVisible(chromedp.CSS("#resolve-event")),
	)
	if got := text(".route-repair"); !strings.Contains(got, "replay the event") {
		t.Errorf("suggested repair: %q", got)
	}
	step("plan its replay",
		chromedp.Click(chromedp.CSS("#replay-event")),
		chromedp.WaitVisible(chromedp.CSS("#plan-events")),
	)
	if got := text("#plan-events"); got != "1" {
		t.Fatalf("the plan selects %q events, want 1", got)
	}
	step("go back and resolve it with a note",
		chromedp.Navigate(base+eventLink("stripe", "evt_dead")),
		chromedp.WaitVisible(chromedp.CSS("#resolve-event")),
		chromedp.SetValue(chromedp.CSS("#event-note"), "the sender will never send an id"),
		chromedp.Click(chromedp.CSS("#resolve-event")),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	if got := text("#event-disposition"); got != "resolved" {
		t.Fatalf("disposition after resolve: %q", got)
	}
	step("see the queue without it",
		chromedp.Navigate(base+"/effects"),
		chromedp.WaitVisible(chromedp.CSS("#dead-event-rows")),
	)
	if row := text("#dead-event-rows"); strings.Contains(row, "evt_dead") {
		t.Errorf("the resolved event is still queued: %q", row)
	}
	b.Check()
}
