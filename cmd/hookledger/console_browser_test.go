//go:build !windows

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/hookledger/hookledger/internal/console/consoletest"
	"github.com/hookledger/hookledger/internal/store"
)

// TestConsoleBrowser is the console's acceptance test against the real
// binary: it builds hookledger, plays the demo (a real server, SQLite, the
// fake destination, the dossier's webhooks), and drives the console the
// demo prints a login link for in headless Chromium: the overview's nine
// signals, the stale event and its entity's history in business order, what
// unrouted means, the exception queue's reasons and owners for dead effects
// and dead-lettered events, a dead effect retried to done once its cause is
// repaired with its calls counted on across the retry, a bulk retry of
// the exception queue, a replay of one entity, and no page error
// anywhere. Then, without a browser, a page without the session cookie
// leads to the login page and a state change with a wrong or no CSRF token
// is refused. Ctrl-C (SIGINT) stops the demo with exit 0.
func TestConsoleBrowser(t *testing.T) {
	consoletest.Chromium(t) // skips (fails under CI) before the build
	if testing.Short() {
		t.Skip("builds the binary and plays the demo")
	}
	bin := filepath.Join(t.TempDir(), "hookledger")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	dir := filepath.Join(t.TempDir(), "demo")
	out := &lockedBuffer{}
	errOut := &lockedBuffer{}
	cmd := exec.Command(bin, "demo", "--listen", "127.0.0.1:0", "--no-open", "--speed", "20", "--dir", dir)
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	// On failure, the server's own account of what happened.
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(dir, "hookledger.log"))
			t.Logf("demo output:\n%s\nstderr:\n%s\nserver log (last 4000 bytes):\n%s", out, errOut, lastBytes(string(log), 4000))
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "press Ctrl-C") {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("the demo ended before serving: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the demo's script did not finish within a minute")
		}
		time.Sleep(20 * time.Millisecond) // waiting for the demo's output, not measuring time
	}
	text := out.String()
	pick := func(re string) string {
		t.Helper()
		m := regexp.MustCompile(re).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no %s in the demo's output", re)
		}
		return m[1]
	}
	link := pick(`Log in once: (\S+)`)
	token := pick(`Admin token: (\S+)`)
	base := strings.TrimSuffix(pick(`Console:\s+(\S+)`), "/")
	dest := pick(`fake destination on (\S+)`)

	b := consoletest.Start(t, 90*time.Second)

	// 1. The one-time link logs in and leads to the overview: the nine
	// signals by name with a status word, and a sparkline drawn for each.
	b.Step("follow the one-time login link",
		chromedp.Navigate(link),
		chromedp.WaitVisible(chromedp.CSS("#signal-dead_letters")),
	)
	if p := b.Eval("location.pathname"); p != "/" {
		t.Fatalf("the login link led to %s, want the overview", p)
	}
	if n := b.Eval(`String(document.querySelectorAll("li.signal").length)`); n != "9" {
		t.Errorf("the overview shows %s signals, want 9", n)
	}
	for _, name := range store.SignalNames() {
		if got := b.Text("#signal-" + name + " code"); got != name {
			t.Errorf("signal card %s names %q", name, got)
		}
		if got := b.Text("#now-" + name + " [data-status]"); got != "OK" && got != "Warn" && got != "Alert" {
			t.Errorf("signal %s shows the status %q, want OK, Warn or Alert", name, got)
		}
	}
	// The demo leaves dead letters behind: a number, and not OK.
	if got := b.Text("#now-dead_letters a"); got == "0" || got == "" {
		t.Errorf("dead_letters shows %q after the demo", got)
	}
	if got := b.Text("#now-dead_letters [data-status]"); got == "OK" {
		t.Errorf("dead_letters is OK after the demo left dead letters")
	}
	b.Poll("draw the nine sparklines", `(() => { const c = document.querySelectorAll(".spark canvas");
		return c.length == 9 && [...c].every(x => x.width > 0 && x.height > 0); })()`)

	// 2. The events filtered by disposition=stale hold the late r2 alone.
	b.Step("filter the events by disposition",
		chromedp.Navigate(base+"/events"),
		chromedp.WaitVisible(chromedp.CSS("#f-disposition")),
		chromedp.SetValue(chromedp.CSS("#f-disposition"), "stale"),
		chromedp.Click(chromedp.CSS("#apply-filters")),
	)
	b.Poll("filter by disposition", `location.search.includes("disposition=stale") && document.readyState == "complete"`)
	rows := b.Text("#event-rows")
	if !strings.Contains(rows, "evt-1001-r2") || strings.Contains(rows, "evt-1001-r1") || strings.Contains(rows, "evt-1001-r3") {
		t.Fatalf("events with disposition=stale: %q, want evt-1001-r2 alone", rows)
	}
	b.Step("open the stale event",
		chromedp.Click(chromedp.CSS(`#event-rows a[href*="event_id=evt-1001-r2"]`)),
		chromedp.WaitVisible(chromedp.CSS("#event-disposition")),
	)
	if d := b.Text("#event-disposition"); d != "stale" {
		t.Fatalf("the event page says %q, want stale", d)
	}
	b.Step("open its entity",
		chromedp.Click(chromedp.CSS(`main a[href^="/entity"][href*="ord-1001"]`)),
		chromedp.WaitVisible(chromedp.CSS("main table")),
	)
	checkEntityHistory(t, b)
	// The events page says what unrouted means where it shows it: the
	// customer.updated event no flow subscribes to.
	b.Step("list the unrouted events",
		chromedp.Navigate(base+"/events?disposition=unrouted"),
		chromedp.WaitVisible(chromedp.CSS("#unrouted-note")),
	)
	if note := b.Text("#unrouted-note"); !strings.Contains(note, "no flow subscribes to its type") {
		t.Errorf("the events page explains unrouted as %q", note)
	}
	if tip := b.Eval(`(() => { for (const r of document.querySelectorAll("#event-rows tr")) {
		if (r.innerText.includes("evt-cus-1")) { const s = r.querySelector(".badge"); return s ? s.title : "no badge"; } }
		return "no row"; })()`); !strings.Contains(tip, "no flow subscribes") {
		t.Errorf("the unrouted badge of evt-cus-1 explains itself as %q", tip)
	}

	// 3. A dead effect retried once its cause is repaired: the warehouse
	// refused the invoice for a missing VAT number (422, permanent, never
	// retried by itself); a person adds it at the warehouse, then
	// retries from the console, and the effect ends done.
	resp, err := http.Post(dest+"/warehouse/vat-numbers", "application/json", strings.NewReader(`{"order":"ord-1006"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("adding the VAT number at the warehouse: %d", resp.StatusCode)
	}
	b.Step("open the exception queue", chromedp.Navigate(base+"/effects"), chromedp.WaitVisible(chromedp.CSS("#effect-rows")))
	invoice := b.Eval(`(() => { for (const r of document.querySelectorAll("#effect-rows tr")) {
		if (/\bexport_invoice\b/.test(r.innerText)) { return r.querySelector('a[href^="/effects/"]').getAttribute("href"); } }
		return ""; })()`)
	if !regexp.MustCompile(`^/effects/\d+$`).MatchString(invoice) {
		t.Fatalf("the exception queue has no export_invoice row (got %q): %s", invoice, b.Text("#effect-rows"))
	}
	// Each dead effect's row names its reason, its suggested repair, its age and the owner its
	// destination's config gives it; the dead-lettered events stand
	// beside them with their reason, suggested repair and owner.
	if row := b.Eval(`(() => { for (const r of document.querySelectorAll("#effect-rows tr")) {
		if (/\bexport_invoice\b/.test(r.innerText)) { return r.innerText; } } return ""; })()`); !strings.Contains(row, "HTTP 422") ||
		!strings.Contains(row, "team-data") || !strings.Contains(row, "then retry the effect") || !regexp.MustCompile(`\d+s ago`).MatchString(row) {
		t.Errorf("the queue's export_invoice row lacks its reason, suggested repair, owner or age: %q", row)
	}
	if row := b.Eval(`(() => { for (const r of document.querySelectorAll("#dead-event-rows tr")) {
		if (r.innerText.includes("evt-1010-r1-other")) { return r.innerText; } } return ""; })()`); !strings.Contains(row, "version_conflict") ||
		!strings.Contains(row, "resolve the event with a note") || !strings.Contains(row, "team-orders") {
		t.Errorf("the queue's dead-lettered evt-1010-r1-other row lacks its reason, repair or owner: %q", row)
	}
	b.Step("open the dead invoice export", chromedp.Click(chromedp.CSS(`#effect-rows a[href="`+invoice+`"]`)),
		chromedp.WaitVisible(chromedp.CSS("#effect-state")))
	if st := b.Text("#effect-state"); st != "dead" {
		t.Fatalf("export_invoice is %q before the retry, want dead", st)
	}
	// The retry's answer is the effect page again, with a confirmation:
	// wait for that, not for #effect-state, which the page before the
	// click still shows (as "dead") until the answer arrives.
	b.Step("retry it", chromedp.Click(chromedp.CSS("#retry")), chromedp.WaitVisible(chromedp.CSS("p.flash")),
		chromedp.WaitVisible(chromedp.CSS("#effect-state")))
	if p := b.Eval("location.pathname"); p != invoice {
		t.Fatalf("after the retry at %s, want the effect's page %s", p, invoice)
	}
	// The effect page does not refresh itself: reload it until the
	// delivery worker has sent the invoice again.
	until := time.Now().Add(30 * time.Second)
	for st := b.Text("#effect-state"); st != "done"; st = b.Text("#effect-state") {
		if st == "dead" {
			t.Fatalf("export_invoice is dead again after the retry:\n%s", b.Text("main"))
		}
		if time.Now().After(until) {
			t.Fatalf("export_invoice is %q, not done, 30s after the retry", st)
		}
		time.Sleep(100 * time.Millisecond) // waiting for the delivery worker, not measuring time
		b.Step("reload the effect", chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#effect-state")))
	}
	if attempts := b.Eval(`[...document.querySelectorAll("main tbody tr")].map(r => r.innerText).join("\n")`); !regexp.MustCompile(`\b201\b`).MatchString(attempts) {
		t.Errorf("the attempt timeline shows no 201 after the retry:\n%s", attempts)
	}
	// The call after the retry goes on counting (#2, not #1 again) and
	// says the operator's retry restarted the attempts.
	if second := b.Eval(`(() => { for (const r of document.querySelectorAll("main tbody tr")) {
		if (/\b201\b/.test(r.innerText)) { return r.innerText; } } return ""; })()`); !regexp.MustCompile(`^2\s`).MatchString(second) ||
		!strings.Contains(second, "restarted by operator retry") {
		t.Errorf("the call after the retry reads %q, want #2, restarted by operator retry", second)
	}

	// 4. Bulk retry of the exception queue: the dry run counts, then the
	// run's progress block follows it to the end.
	b.Step("open the bulk retry's dry run",
		chromedp.Navigate(base+"/effects"),
		chromedp.WaitVisible(chromedp.CSS("#bulk-retry")),
		chromedp.Click(chromedp.CSS("#bulk-retry")),
		chromedp.WaitVisible(chromedp.CSS("#plan-retryable")),
	)
	matched, retryable := leadingInt(t, b.Text("#plan-matched")), leadingInt(t, b.Text("#plan-retryable"))
	if retryable < 2 || retryable > matched {
		t.Fatalf("dry run: %d matched, %d to retry; want at least the hidden failure and the ledger's unknown outcome", matched, retryable)
	}
	if dests := b.Text("#plan-dests"); !strings.Contains(dests, "marketing") || !strings.Contains(dests, "ledger") ||
		strings.Contains(dests, "warehouse") {
		t.Errorf("dry run per destination: %q, want marketing and ledger, and no warehouse (its invoice is done)", dests)
	}
	b.Step("run the bulk retry", chromedp.Click(chromedp.CSS("#bulk-run")), chromedp.WaitVisible(chromedp.CSS("#job-bar")))
	b.Poll("see the bulk retry reach the end", `document.querySelector("#job-state").textContent.includes("finished")`)
	done, failed, skipped := leadingInt(t, b.Text("#job-done")), leadingInt(t, b.Text("#job-failed")), leadingInt(t, b.Text("#job-skipped"))
	total, _ := strconv.Atoi(b.Eval(`document.querySelector("#job-bar").getAttribute("max")`))
	if done < 1 || failed != 0 || done+skipped != total || total != matched {
		t.Errorf("bulk retry: %d retried, %d failed, %d skipped of %d planned; the dry run matched %d", done, failed, skipped, total, matched)
	}
	if v := b.Eval(`document.querySelector("#job-bar").getAttribute("value")`); v != strconv.Itoa(total) {
		t.Errorf("the progress bar stopped at %s of %d", v, total)
	}

	// 5. Replay one entity: the plan, then the run, followed until it
	// settles. Its effects are in the ledger already: none is created.
	b.Step("plan a replay of ord-1001",
		chromedp.Navigate(base+"/replay"),
		chromedp.WaitVisible(chromedp.CSS("#r-entity")),
		chromedp.SetValue(chromedp.CSS("#r-flow"), "orders"),
		chromedp.SetValue(chromedp.CSS("#r-entity"), "ord-1001"),
		chromedp.Click(chromedp.CSS("#replay-plan")),
		chromedp.WaitVisible(chromedp.CSS("#plan-events")),
	)
	// r1, its duplicate, r3 and the stale r2; notify_created and
	// notify_cancel are in the ledger.
	if got := b.Text("#plan-events"); got != "4" {
		t.Errorf("the plan selects %q events of ord-1001, want 4", got)
	}
	if got := b.Text("#plan-in-ledger"); leadingInt(t, got) != 2 {
		t.Errorf("the plan says %q effects are in the ledger, want 2", got)
	}
	b.Step("run the replay", chromedp.Click(chromedp.CSS("#replay-run")), chromedp.WaitVisible(chromedp.CSS("#job-bar")))
	b.Poll("see the replay settle", `document.querySelector("#job-state").textContent.includes("finished")`)
	if got := b.Text("#job-settled"); got != "4 of 4" {
		t.Errorf("the replay settled %q work items, want 4 of 4", got)
	}
	if got := b.Text("#job-created"); got != "0" {
		t.Errorf("the replay created %q effects, want 0: they were in the ledger", got)
	}

	// 6. No page logged an error, failed a resource or broke the policy.
	b.Check()

	// 7. Plain HTTP: no cookie, no page; no CSRF token, no change.
	checkConsoleRefusals(t, base, token)

	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Fatalf("the demo after SIGINT: %v, want exit 0", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not stop within 30s of SIGINT")
	}
	if !strings.HasSuffix(out.String(), "stopped\n") {
		t.Errorf("the demo's last line is not 'stopped':\n%s", lastBytes(out.String(), 300))
	}
}

// checkEntityHistory finds the entity page's history of ord-1001 (the
// first table with one row for each of r1, r2 and r3) and checks the rows
// are in business order, with r2 marked stale. It reads the rows' visible
// text only, so the page's markup may change.
func checkEntityHistory(t *testing.T, b *consoletest.Browser) {
	got := b.Eval(`(() => {
		const ids = ["evt-1001-r1", "evt-1001-r2", "evt-1001-r3"];
		const has = (text, id) => new RegExp("(^|[^\\w-])" + id + "(?![\\w-])").test(text);
		for (const table of document.querySelectorAll("main table")) {
			const rows = [...table.querySelectorAll("tr")].map(r => r.innerText);
			const at = ids.map(id => rows.map((r, i) => has(r, id) ? i : -1).filter(i => i >= 0));
			if (at.every(a => a.length == 1)) {
				return JSON.stringify({rows: at.map(a => rows[a[0]]), at: at.map(a => a[0])});
			}
		}
		return "";
	})()`)
	if got == "" {
		t.Fatalf("the entity page has no table with one row per event of ord-1001:\n%s", b.Text("main"))
	}
	var h struct {
		Rows []string `json:"rows"`
		At   []int    `json:"at"`
	}
	if err := json.Unmarshal([]byte(got), &h); err != nil {
		t.Fatal(err)
	}
	t.Logf("the entity's history, rows %v:\n%s", h.At, strings.Join(h.Rows, "\n"))
	if !(h.At[0] < h.At[1] && h.At[1] < h.At[2]) {
		t.Errorf("the entity's history is not in business order (r1, r2, r3): rows %v\n%s", h.At, strings.Join(h.Rows, "\n"))
	}
	word := func(row, w string) bool { return regexp.MustCompile(`\b` + w + `\b`).MatchString(row) }
	if !word(h.Rows[1], "stale") {
		t.Errorf("r2's row does not say stale: %q", h.Rows[1])
	}
	if !word(h.Rows[0], "applied") || !word(h.Rows[2], "applied") || word(h.Rows[0], "stale") || word(h.Rows[2], "stale") {
		t.Errorf("r1 and r3 are not shown applied: %q, %q", h.Rows[0], h.Rows[2])
	}
}

// checkConsoleRefusals asks the console without a browser: without the
// session cookie a page redirects to the login page and a state change is
// 401; with the cookie, a state change with a wrong CSRF token or none is
// 403 and changes nothing, while the page's own token is accepted.
func checkConsoleRefusals(t *testing.T, base, token string) {
	client := &http.Client{Timeout: 10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, cookie *http.Cookie, form url.Values) (int, string, http.Header) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(form.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body), resp.Header
	}
	toLogin := func(what string, code int, h http.Header) {
		t.Helper()
		if loc := h.Get("Location"); code != http.StatusSeeOther || !strings.HasPrefix(loc, "/login") {
			t.Errorf("%s: %d to %q, want 303 to /login", what, code, loc)
		}
	}

	code, _, h := do(http.MethodGet, "/effects", nil, nil)
	toLogin("GET /effects without the cookie", code, h)

	// A session of its own, from the admin token.
	req, _ := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Value != "" && c.MaxAge >= 0 {
			session = c
		}
	}
	if resp.StatusCode != http.StatusSeeOther || session == nil {
		t.Fatalf("POST /login with the admin token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}

	// The hidden failure's effect, whatever state the bulk retry left it in.
	code, page, _ := do(http.MethodGet, "/effects?state=any&flow=orders&entity=ord-1007", session, nil)
	id := regexp.MustCompile(`href="/effects/(\d+)"`).FindStringSubmatch(page)
	if code != http.StatusOK || id == nil {
		t.Fatalf("GET /effects with the cookie: %d, no effect of ord-1007:\n%s", code, page)
	}
	effect := "/effects/" + id[1]
	code, page, _ = do(http.MethodGet, effect, session, nil)
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if code != http.StatusOK || csrf == nil {
		t.Fatalf("GET %s with the cookie: %d, CSRF token %v", effect, code, csrf)
	}

	if code, _, _ := do(http.MethodPost, effect+"/assign", nil, url.Values{"owner": {"mallory"}, "csrf": {csrf[1]}}); code != http.StatusUnauthorized {
		t.Errorf("POST %s/assign without the cookie: %d, want 401", effect, code)
	}
	for _, c := range []struct {
		what string
		form url.Values
	}{
		{"a wrong CSRF token", url.Values{"owner": {"mallory"}, "csrf": {csrf[1] + "x"}}},
		{"no CSRF token", url.Values{"owner": {"mallory"}}},
	} {
		if code, _, _ := do(http.MethodPost, effect+"/assign", session, c.form); code != http.StatusForbidden {
			t.Errorf("POST %s/assign with the cookie and %s: %d, want 403", effect, c.what, code)
		}
		if code, _, _ := do(http.MethodPost, "/logout", session, url.Values{"csrf": c.form["csrf"]}); code != http.StatusForbidden {
			t.Errorf("POST /logout with the cookie and %s: %d, want 403", c.what, code)
		}
	}
	code, page, _ = do(http.MethodGet, effect, session, nil)
	if code != http.StatusOK || strings.Contains(page, "mallory") {
		t.Errorf("after the refused state changes, %s answers %d (want 200, the session alive) and shows mallory: %v",
			effect, code, strings.Contains(page, "mallory"))
	}
	// The page's own token goes through: the refusals were the token's,
	// not the session's. Logging out ends the session.
	code, _, _ = do(http.MethodPost, "/logout", session, url.Values{"csrf": {csrf[1]}})
	if code != http.StatusSeeOther {
		t.Errorf("POST /logout with the page's CSRF token: %d, want 303", code)
	}
	code, _, h = do(http.MethodGet, "/effects", session, nil)
	toLogin("GET /effects with the cookie of a session that logged out", code, h)
}

// leadingInt reads the number a text starts with ("3 (dead or …)").
func leadingInt(t *testing.T, s string) int {
	t.Helper()
	m := regexp.MustCompile(`^\s*(\d+)`).FindStringSubmatch(s)
	if m == nil {
		t.Fatalf("%q does not start with a number", s)
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
