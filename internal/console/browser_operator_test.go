package console

import (
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookledger/hookledger/internal/console/consoletest"
)

// TestBrowserOperatorPages drives the operator's pages in headless
// Chromium at 1280×800: the overview's deadline_missed link keeps its
// filter through the form, the entity page reads its order keys as the
// flow names them, no table is wider than its container (long episode
// keys and response bodies wrap), a forward's request body reads as text,
// and no page logs a JavaScript error.
func TestBrowserOperatorPages(t *testing.T) {
	f := newFixture(t, 0)
	occurred := sortKey(t0.UnixMicro()) + "|evt_A1"
	seedEntity(t, f, "by_time", "o2", "evt_A1", occurred, "t2026-11-03T09:00:00Z/evt_A1", occurred)
	long := addForwardEffect(t, f, "evt_long", []byte(`{}`), "application/json", true)
	fwd := addForwardEffect(t, f, "evt_fwd", []byte(`{"id":"evt_fwd","type":"charge.succeeded"}`), "application/json; charset=utf-8", false)
	con := New(f.st, testToken, slog.New(slog.DiscardHandler), f.clk)
	con.Attach(Attachments{VersionModes: map[string]string{"by_time": "occurred_at", "billing_to_crm": "revision"},
		Destinations: []string{"crm", "app"}, Sources: []string{"stripe", "shop"}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: con, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); _ = con.Close() })
	base := "http://" + ln.Addr().String()

	b := consoletest.Start(t, 90*time.Second)
	step, text, eval, poll := b.Step, b.Text, b.Eval, b.Poll
	step("log in with a one-time link",
		chromedp.Navigate(base+con.MintLoginLink()),
		chromedp.WaitVisible(chromedp.CSS("main")),
	)

	// The overview's deadline_missed number links to a filtered list; the
	// form shows that filter, and pressing Filter keeps it.
	poll("the overview's deadline_missed link", `!!document.querySelector('a[href*="deadline_missed=true"]')`)
	step("follow the deadline_missed link",
		chromedp.Navigate(base+eval(`document.querySelector('a[href*="deadline_missed=true"]').getAttribute("href")`)),
		chromedp.WaitVisible(chromedp.CSS("#f-deadline-missed")),
	)
	if eval(`String(document.querySelector("#f-deadline-missed").checked)`) != "true" {
		t.Fatal("the deadline filter the link applied is not shown checked")
	}
	// The old page is marked, so the wait below ends on the page the
	// form loads and not on the one it leaves: a navigation still in
	// flight would abort the next one.
	eval(`String(window.beforeFilter = true)`)
	step("press Filter", chromedp.Click(chromedp.CSS("#apply-filters")))
	poll("the filtered page", `!window.beforeFilter && document.readyState === "complete" && !!document.querySelector("#f-deadline-missed")`)
	if q := eval("location.search"); !strings.Contains(q, "deadline_missed=true") {
		t.Fatalf("after Filter the address is %q: the deadline filter was dropped", q)
	}

	// The entity page: the business version, the encoded key a tooltip.
	step("open an entity ordered by occurrence time",
		chromedp.Navigate(base+"/entity?flow=by_time&entity=o2"),
		chromedp.WaitVisible(chromedp.CSS("#entity-history")),
	)
	if got := text("#entity-history td.order-key"); got != "t2026-11-03T09:00:00Z/evt_A1" {
		t.Errorf("order key cell reads %q", got)
	}
	if got := eval(`document.querySelector("#entity-history td.order-key").title`); !strings.Contains(got, occurred) {
		t.Errorf("order key tooltip %q lacks the stored key", got)
	}
	if got := text("#entity-history td.version-applied"); got != "t2026-11-03T09:00:00Z/evt_A1" {
		t.Errorf("version applied reads %q", got)
	}

	// A forward's body reads as the text it is, with its content type.
	step("open a forward's effect",
		chromedp.Navigate(base+"/effects/"+strconv.FormatInt(fwd, 10)),
		chromedp.WaitVisible(chromedp.CSS("#forward-request")),
	)
	if got := text(`pre[aria-label="Request body"]`); !strings.Contains(got, `"type": "charge.succeeded"`) {
		t.Errorf("forwarded body shown as %q", got)
	}
	if got := text("#forward-content-type"); got != "application/json; charset=utf-8" {
		t.Errorf("forwarded content type %q", got)
	}
	// The events that asked for the effect, each a link to its page, and
	// its calls counted across restarts.
	if got := text("#effect-source-events"); !strings.Contains(got, "evt_fwd") ||
		!strings.Contains(eval(`document.querySelector("#effect-source-events a").getAttribute("href")`), "evt_fwd") {
		t.Errorf("asked for by %q, want a link to evt_fwd", got)
	}
	if got := text("#effect-attempts"); got != "0" {
		t.Errorf("attempts %q, want 0 calls made", got)
	}

	// At 1280 px no page scrolls sideways and no table is wider than its
	// container: long keys, ids and response bodies wrap.
	for _, path := range []string{"/effects/" + strconv.FormatInt(long, 10), "/effects?state=any", "/entity?flow=stripe_to_app&entity=evt_long",
		"/entity?flow=billing_to_crm&entity=sub_1", "/destinations", "/events", "/"} {
		step("open "+path, chromedp.Navigate(base+path), chromedp.WaitVisible(chromedp.CSS("main")))
		if w := eval("String(innerWidth)"); w != "1280" {
			t.Fatalf("the window is %s px wide, want 1280", w)
		}
		wide := eval(`(() => { const d = document.documentElement; const out = [];
			if (d.scrollWidth > d.clientWidth) out.push("page " + d.scrollWidth + " > " + d.clientWidth);
			document.querySelectorAll(".table-wrap").forEach(w => { if (w.scrollWidth > w.clientWidth + 1)
				out.push((w.querySelector("table").id || "table") + " " + w.scrollWidth + " > " + w.clientWidth) });
			return out.join("; ") })()`)
		if wide != "" {
			t.Errorf("%s at 1280 px: %s", path, wide)
		}
		if path == "/destinations" {
			if got := text("#calls-hint"); strings.Contains(got, "newest 0") || !strings.Contains(got, "in all") {
				t.Errorf("destinations hint %q", got)
			}
		}
	}
	b.Check()
}
