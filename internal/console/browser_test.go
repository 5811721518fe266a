package console

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/console/consoletest"
	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
)

// recordHistory writes an hour of minute history for the nine signals and
// the trends, as the signals monitor would have.
func recordHistory(t *testing.T, f *fixture) {
	t.Helper()
	now := f.clk.Now()
	for m := 60; m >= 0; m-- {
		p := &store.SignalHistoryRecordParams{Now: now.Add(-time.Duration(m) * time.Minute)}
		for i, name := range append(store.SignalNames(), signals.TrendNames()...) {
			p.Points = append(p.Points, store.SignalHistoryInput{Name: name, Value: int64((m + i) % 7), Status: signals.StatusOK})
		}
		if err := f.st.SignalHistoryRecord(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
}

// TestBrowser drives the console in headless Chromium against a real HTTP
// server on loopback: log in, see the overview's signals and charts and
// follow a number to its list, filter events by disposition, open an
// event, retry a dead effect and see its state change, watch a list
// refresh itself, and check that no page logged a JavaScript error (a script that
// failed, or a resource the Content-Security-Policy blocked).
func TestBrowser(t *testing.T) {
	f := newFixture(t, 3)
	con := New(f.st, testToken, slog.New(slog.DiscardHandler), f.clk, WithSignals(config.Signals{}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: con, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()

	// The test takes about ten seconds; the bound only stops a hung
	// browser from holding the suite.
	b := consoletest.Start(t, 90*time.Second)
	step, text, poll, eval := b.Step, b.Text, b.Poll, b.Eval

	// A page asked for without a session leads to the login page, and
	// back to the page after login.
	step("open the console",
		chromedp.Navigate(base+"/events"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
	)
	step("log in",
		chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#f-disposition")),
	)
	if loc := eval("location.pathname"); loc != "/events" {
		t.Fatalf("after login at %s, want /events", loc)
	}
	if eval("typeof htmx") != "object" {
		t.Fatal("htmx did not load")
	}
	if cookies := eval("document.cookie"); strings.Contains(cookies, cookieName) {
		t.Fatalf("the session cookie is readable by scripts: %q", cookies)
	}

	step("filter by disposition",
		chromedp.SetValue(chromedp.CSS("#f-disposition"), "stale"),
		chromedp.Click(chromedp.CSS("#apply-filters")),
	)
	poll("filter by disposition", `location.search.includes("disposition=stale") && document.readyState == "complete"`)
	rows := text("#event-rows")
	if !strings.Contains(rows, "evt_2") || strings.Contains(rows, "evt_1") || strings.Contains(rows, "ping_") {
		t.Fatalf("rows with disposition=stale: %q, want evt_2 alone", rows)
	}
	if v := eval(`document.querySelector("#f-disposition").value`); v != "stale" {
		t.Errorf("the filter field shows %q after filtering, want stale", v)
	}

	step("open the event",
		chromedp.Click(chromedp.CSS(`#event-rows a[href*="event_id=evt_2"]`)),
		chromedp.WaitVisible(chromedp.CSS("#event-disposition")),
	)
	if d := text("#event-disposition"); d != "stale" {
		t.Fatalf("event page disposition %q, want stale", d)
	}

	// The body that holds a script is text on the page, and never ran.
	step("open the event with a script in its body",
		chromedp.Navigate(base+"/event?source=stripe&event_id=evt_1"),
		chromedp.WaitVisible(chromedp.CSS("pre.body")),
	)
	if body := text("pre.body"); !strings.Contains(body, "<script>window.__pwned=1</script>") {
		t.Fatalf("event body shown as %q", body)
	}
	if eval("typeof window.__pwned") != "undefined" {
		t.Fatal("the event body's script ran")
	}

	id := strconv.FormatInt(f.deadID, 10)

	// The overview: nine signals with status words, a sparkline each and
	// the trend charts drawn from the recorded history, numbers that
	// refresh in place, and the dead letter's number leading to its list.
	recordHistory(t, f)
	step("open the overview",
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS("#signal-dead_letters")),
	)
	if n := eval(`String(document.querySelectorAll(".signals > li.signal").length)`); n != "9" {
		t.Fatalf("the overview shows %s signals, want 9", n)
	}
	if s := text("#now-dead_letters [data-status]"); s != "Warn" {
		t.Errorf("dead_letters status %q, want Warn", s)
	}
	poll("draw the sparklines and trend charts", `document.querySelectorAll(".spark canvas").length == 9 && document.querySelectorAll(".chart canvas").length == 4`)
	if w := eval(`String(document.querySelector("#signal-dead_letters .spark canvas").width)`); w == "0" {
		t.Error("the dead_letters sparkline has no width")
	}
	if _, err := f.st.AuditInsert(context.Background(), &store.AuditInsertParams{At: f.clk.Now(), Actor: "worker",
		Action: "key_conflict", Source: "stripe", EventID: "evt_1", Detail: "episode key reused"}); err != nil {
		t.Fatal(err)
	}
	poll("see the overview refresh", `document.querySelector("#now-key_conflicts a.num").textContent == "1"`)
	if n := eval(`String(document.querySelectorAll(".spark canvas").length)`); n != "9" {
		t.Errorf("after the refresh %s sparklines, want 9 (the refresh must leave the charts)", n)
	}
	step("follow the dead_letters number",
		chromedp.Click(chromedp.CSS("#now-dead_letters a.num")),
		chromedp.WaitVisible(chromedp.CSS("#effect-rows")),
	)
	if loc := eval("location.pathname + location.search"); loc != "/effects?state=dead" {
		t.Fatalf("the dead_letters number led to %s, want /effects?state=dead", loc)
	}
	if rows := text("#effect-rows"); !strings.Contains(rows, "upsert_deal") {
		t.Fatalf("the dead effects list shows %q, want the dead upsert_deal", rows)
	}

	step("open the dead effect from the exception queue",
		chromedp.Navigate(base+"/effects"),
		chromedp.WaitVisible(chromedp.CSS("#effect-rows")),
		chromedp.Click(chromedp.CSS(`#effect-rows a[href="/effects/`+id+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#retry")),
	)
	if st := text("#effect-state"); st != "dead" {
		t.Fatalf("effect state %q before retry, want dead", st)
	}
	step("retry it",
		chromedp.Click(chromedp.CSS("#retry")),
		chromedp.WaitVisible(chromedp.CSS(".flash")),
	)
	if st := text("#effect-state"); st != "approved" {
		t.Fatalf("effect state %q after retry, want approved", st)
	}
	if st := f.effect(t, f.deadID).State; st != store.EffectApproved {
		t.Fatalf("stored state %s after retry, want approved", st)
	}

	// A list refreshes in place, keeping its filters: the effect is
	// resolved elsewhere while the page is open.
	step("open every effect of the flow",
		chromedp.Navigate(base+"/effects?state=any&flow=billing_to_crm"),
		chromedp.WaitVisible(chromedp.CSS("#effect-rows")),
	)
	if _, err := f.st.EffectOperate(context.Background(), &store.EffectOperateParams{EffectID: f.deadID,
		Action: store.OperateResolve, Actor: "operator:alice", Note: "done by hand", Now: f.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	poll("see the list refresh", `document.querySelector("#effect-rows").textContent.includes("resolved")`)
	if loc := eval("location.search"); !strings.Contains(loc, "flow=billing_to_crm") {
		t.Errorf("the refresh changed the address to %s", loc)
	}

	step("log out",
		chromedp.Click(chromedp.CSS(".logout button")),
		chromedp.WaitVisible(chromedp.CSS("#token")),
	)

	// No page logged an error, failed a resource or broke the policy.
	b.Check()
}
