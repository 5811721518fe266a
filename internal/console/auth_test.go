package console

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/authlimit"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/publish"
	"github.com/hookledger/hookledger/internal/store"
)

// hostileNext are next= values (as the query decodes them) that a naive
// check lets through but that a browser would follow off the site once
// http.Redirect has cleaned the path, or once it reads a backslash as a
// slash and drops a tab or a newline.
var hostileNext = []string{
	"//evil.example/x",
	"///evil.example/x",
	"/\\evil.example/x",
	"/\\/evil.example/x",
	"/./\\127.0.0.2:19300/pwned",
	"/a/../\\evil.example",
	"/a/..//evil.example",
	"/./../\\evil.example",
	"/.//\\evil.example",
	"/%2F%2Fevil.example",
	"/%2f/evil.example",
	"/%5Cevil.example",
	"/%5cevil.example",
	"/\t/evil.example",
	"/\n/evil.example",
	"/\r\n/evil.example",
	"/%09/evil.example",
	"/\x00/evil.example",
	"https://evil.example/",
	"http:/evil.example/",
	"//user@evil.example",
	"\\\\evil.example",
	"events",
	"",
}

func TestSafeNext(t *testing.T) {
	for _, in := range hostileNext {
		if got := safeNext(in); got != "/" {
			t.Errorf("safeNext(%q) = %q, want /", in, got)
		}
	}
	for in, want := range map[string]string{
		"/":                         "/",
		"/events?x=1":               "/events?x=1",
		"/events?next=//x":          "/events?next=//x",
		"/effects/7":                "/effects/7",
		"/effects/":                 "/effects/",
		"/a/../events":              "/events",
		"/./events?source=a%2Fb":    "/events?source=a%2Fb",
		"/../../events":             "/events",
		"/event?source=s&event_id=": "/event?source=s&event_id=",
	} {
		if got := safeNext(in); got != want {
			t.Errorf("safeNext(%q) = %q, want %q", in, got, want)
		}
	}
}

// staysOnSite reports whether a browser that follows Location from base
// stays on base's host: it reads a backslash as a slash and drops tabs
// and newlines, as the URL standard says.
func staysOnSite(t *testing.T, base, loc string) bool {
	t.Helper()
	browser := strings.NewReplacer("\\", "/", "\t", "", "\n", "", "\r", "").Replace(loc)
	b := mustURL(t, base)
	u, err := b.Parse(browser)
	return err == nil && u.Host == b.Host && strings.HasPrefix(loc, "/") && !strings.ContainsAny(loc, "\\\t\r\n")
}

// Every way into a redirect after login (the login page with a session,
// the login form, a one-time link) lands on this site, whatever next says.
func TestLoginRedirectStaysOnSite(t *testing.T) {
	_, con, srv := startConsole(t, 0)
	logged := newClient(t, srv)
	logged.login()
	for _, next := range hostileNext {
		q := "next=" + url.QueryEscape(next)
		resp, _ := logged.get("/login?" + q)
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !staysOnSite(t, srv.URL, loc) {
			t.Errorf("GET /login?%s with a session: %d to %q, want a redirect on this site", q, resp.StatusCode, loc)
		}
		fresh := newClient(t, srv)
		resp, _ = fresh.post("/login", url.Values{"token": {testToken}, "next": {next}})
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !staysOnSite(t, srv.URL, loc) {
			t.Errorf("POST /login next=%q: %d to %q, want a redirect on this site", next, resp.StatusCode, loc)
		}
		once := newClient(t, srv)
		resp, _ = once.get(con.MintLoginLink() + "&" + q)
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !staysOnSite(t, srv.URL, loc) {
			t.Errorf("one-time link with %s: %d to %q, want a redirect on this site", q, resp.StatusCode, loc)
		}
	}
	// A local next is kept through the login.
	resp, _ := newClient(t, srv).post("/login", url.Values{"token": {testToken}, "next": {"/effects?state=dead"}})
	if loc := resp.Header.Get("Location"); loc != "/effects?state=dead" {
		t.Errorf("local next: redirected to %q, want /effects?state=dead", loc)
	}
}

// Whatever next holds, the answer that http.Redirect makes of safeNext's
// result keeps a browser on this site, and safeNext keeps its own results.
func FuzzSafeNext(f *testing.F) {
	for _, s := range hostileNext {
		f.Add(s)
	}
	f.Add("/events?source=stripe")
	f.Add("/a/./b/../c/")
	f.Fuzz(func(t *testing.T, next string) {
		got := safeNext(next)
		if again := safeNext(got); again != got {
			t.Fatalf("safeNext(%q) = %q, but safeNext(%q) = %q", next, got, got, again)
		}
		rec := httptest.NewRecorder()
		http.Redirect(rec, httptest.NewRequest("GET", "http://console.test/login", nil), got, http.StatusSeeOther)
		if loc := rec.Header().Get("Location"); !staysOnSite(t, "http://console.test/", loc) {
			t.Fatalf("safeNext(%q) = %q redirects to %q, off the site", next, got, loc)
		}
	})
}

// consoleState is everything a console request can change: the effects,
// the audit trail, the endpoints, the jobs and the sessions.
func consoleState(t *testing.T, e *opsEnv) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	effects, err := e.f.st.EffectList(ctx, &store.EffectListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range effects {
		fmt.Fprintf(&b, "effect %d %s owner=%q note=%q redrives=%d updated=%s\n", o.ID, o.State, o.Owner, o.Note, o.Redrives, o.UpdatedAt)
	}
	audit, err := e.f.st.AuditList(ctx, &store.AuditListParams{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "audit rows %d\n", len(audit))
	endpoints, err := e.f.st.EndpointList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range endpoints {
		fmt.Fprintf(&b, "endpoint %s enabled=%v\n", ep.ID, ep.Enabled)
	}
	e.con.jobs.mu.Lock()
	for _, j := range e.con.jobs.order {
		select {
		case <-j.ctxDone():
			fmt.Fprintf(&b, "job %s stopped\n", j.ID)
		default:
			fmt.Fprintf(&b, "job %s running\n", j.ID)
		}
	}
	e.con.jobs.mu.Unlock()
	e.con.sessions.mu.Lock()
	fmt.Fprintf(&b, "sessions %d\n", len(e.con.sessions.byID))
	e.con.sessions.mu.Unlock()
	return b.String()
}

// Every state-changing route of the console refuses a request without
// the session's CSRF token, or with a wrong one, with 403 and changes
// nothing; the same request with the token does change something, so
// each row is a real state change. A POST route added to the console
// without a row here fails the test.
func TestEveryStateChangeNeedsCSRF(t *testing.T) {
	e := startOps(t, nil, Attachments{})
	f, ctx := e.f, context.Background()
	cfg, err := config.Parse("c.yaml", []byte("{}"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	svc := publish.New(cfg, f.st, publish.Options{Clock: f.clk})
	u, id := "https://partner.example/hooks", "partner"
	if _, err := svc.Create(ctx, &publish.EndpointInput{ID: &id, URL: &u}, "test"); err != nil {
		t.Fatal(err)
	}
	paused := make(chan struct{}, 1)
	e.con.jobs.pause = func(ctx context.Context) error {
		paused <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	e.con.Attach(Attachments{Router: routeByEntity{}, Compensations: ordersCompensations{}, Endpoints: svc})
	effect := func(name, dest string, state store.EffectState) string {
		return "/effects/" + strconv.FormatInt(f.addEffect(t, name, dest, state), 10)
	}
	lastJob := func() *job {
		e.con.jobs.mu.Lock()
		defer e.con.jobs.mu.Unlock()
		return e.con.jobs.order[len(e.con.jobs.order)-1]
	}
	other := &session{} // another browser's session, for a job to cancel
	var cancelled *job
	type row struct {
		pattern string
		path    func() string
		form    url.Values
		// settled waits for what the accepted request started in the
		// background, before the next row's snapshot.
		settled func()
	}
	rows := []row{
		{pattern: "POST /effects/{id}/{action}", path: func() string { return effect("c_retry", "crm", store.EffectDead) + "/retry" }},
		{pattern: "POST /effects/{id}/{action}", path: func() string { return effect("c_resolve", "crm", store.EffectDead) + "/resolve" },
			form: url.Values{"note": {"fixed by hand"}}},
		{pattern: "POST /effects/{id}/{action}", path: func() string { return effect("c_assign", "crm", store.EffectDead) + "/assign" },
			form: url.Values{"owner": {"alice"}}},
		{pattern: "POST /effects/{id}/compensate", path: func() string { return effect("c_done", "crm", store.EffectDone) + "/compensate" },
			form: url.Values{"note": {"refunded"}}},
		{pattern: "POST /endpoints/{id}/{action}", path: func() string { return "/endpoints/partner/disable" }},
		{pattern: "POST /endpoints/{id}/{action}", path: func() string { return "/endpoints/partner/enable" }},
		// Before the replay, which would make the event pending again.
		{pattern: "POST /event/resolve", path: func() string {
			f.addDeadEvent(t, "evt_csrf")
			return "/event/resolve"
		}, form: url.Values{"source": {"stripe"}, "event_id": {"evt_csrf"}, "note": {"closed by hand"}}},
		{pattern: "POST /effects/bulk-retry", path: func() string {
			last := f.addEffect(t, "c_bulk", "bulk", store.EffectDead)
			return "/effects/bulk-retry?upto=" + strconv.FormatInt(last, 10)
		}, form: url.Values{"filter": {"destination=bulk&state=dead"}, "planned": {"1"}},
			settled: func() { <-lastJob().done }},
		{pattern: "POST /jobs/{id}/cancel", path: func() string {
			j, err := e.con.jobs.start(other, jobReplay, jobProgress{}, func(ctx context.Context, _ *job) { <-ctx.Done() })
			if err != nil {
				t.Fatal(err)
			}
			cancelled = j
			return "/jobs/" + j.ID + "/cancel"
		}, settled: func() { <-cancelled.done }},
		{pattern: "POST /replay", form: url.Values{"source": {"stripe"}}, path: func() string { return "/replay" },
			settled: func() { <-paused }},
		{pattern: "POST /logout", path: func() string { return "/logout" }},
	}

	covered := map[string]bool{}
	for _, r := range rows {
		covered[r.pattern] = true
	}
	for _, p := range e.con.patterns {
		if strings.HasPrefix(p, "POST ") && p != "POST /login" && !covered[p] {
			t.Errorf("state-changing route %q has no row in this test", p)
		}
	}

	// Every effect is made before the first request: making one claims
	// what is approved, and an accepted retry approves one.
	paths := make([]string, len(rows))
	for i, r := range rows {
		paths[i] = r.path()
	}
	for i, r := range rows {
		path := paths[i]
		// The bulk retry's plan travels in the form, like the page's.
		if p, q, ok := strings.Cut(path, "?"); ok {
			path = p
			extra, _ := url.ParseQuery(q)
			r.form = withValues(r.form, extra)
		}
		for name, token := range map[string][]string{"without": nil, "wrong": {e.c.csrf + "x"}, "empty": {""}} {
			before := consoleState(t, e)
			form := withValues(r.form, url.Values{"csrf": token})
			if token == nil {
				form.Del("csrf")
			}
			if resp, body := e.c.post(path, form); resp.StatusCode != http.StatusForbidden {
				t.Errorf("POST %s %s the CSRF token: %d, want 403: %.200s", path, name, resp.StatusCode, body)
			}
			if after := consoleState(t, e); after != before {
				t.Errorf("POST %s %s the CSRF token changed the console's state:\nbefore:\n%s\nafter:\n%s", path, name, before, after)
			}
		}
		before := consoleState(t, e)
		resp, body := e.c.post(path, withValues(r.form, url.Values{"csrf": {e.c.csrf}}))
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("POST %s with the CSRF token: %d, want 303: %.300s", path, resp.StatusCode, body)
		}
		if r.settled != nil {
			r.settled()
		}
		if after := consoleState(t, e); after == before {
			t.Errorf("POST %s with the CSRF token changed nothing: the row tests no state change", path)
		}
	}
}

// withValues is a copy of base with extra's keys set.
func withValues(base, extra url.Values) url.Values {
	out := url.Values{}
	for k, v := range base {
		out[k] = v
	}
	for k, v := range extra {
		out[k] = v
	}
	return out
}

// A login from a browser that has a session ends that session, by the
// form and by a one-time link alike, and so does logging out: the old
// cookie, replayed from elsewhere, gets the login page.
func TestNewLoginEndsTheOldSession(t *testing.T) {
	_, con, srv := startConsole(t, 0)
	base := mustURL(t, srv.URL)
	c := newClient(t, srv)
	stale := func(what string, old []*http.Cookie) {
		t.Helper()
		replay := newClient(t, srv)
		replay.hc.Jar.SetCookies(base, old)
		resp, body := replay.get("/events")
		if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login?") {
			t.Errorf("the cookie from before %s: %d to %q, want the login page: %.200s", what, resp.StatusCode, resp.Header.Get("Location"), body)
		}
	}
	cookieNow := func() []*http.Cookie {
		t.Helper()
		cks := c.hc.Jar.Cookies(base)
		if len(cks) != 1 || cks[0].Name != cookieName {
			t.Fatalf("browser cookies %v, want the session's", cks)
		}
		return cks
	}

	c.login()
	first := cookieNow()
	c.login()
	second := cookieNow()
	if second[0].Value == first[0].Value {
		t.Fatal("logging in again kept the session id")
	}
	stale("logging in again", first)

	if resp, _ := c.get(con.MintLoginLink()); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("one-time link: %d", resp.StatusCode)
	}
	third := cookieNow()
	stale("a one-time link's login", second)

	if _, body := c.get("/events"); !strings.Contains(body, `name="csrf"`) {
		t.Fatalf("the new session shows no form: %.200s", body)
	}
	if resp, _ := c.post("/logout", url.Values{"csrf": {c.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	stale("logging out", third)
	con.sessions.mu.Lock()
	left := len(con.sessions.byID)
	con.sessions.mu.Unlock()
	if left != 0 {
		t.Errorf("%d sessions live after the browser logged out of each, want 0", left)
	}
}

// Ten wrong tokens from one address lock that address out of the login
// for the rest of the minute (429 with Retry-After, the right token too,
// no session), logged with the address and never the token; the operator
// logging in from another address is not affected.
func TestLoginGuessingLimitedPerAddress(t *testing.T) {
	f := newFixture(t, 0)
	logs := &strings.Builder{}
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logs.Write(p)
	}), nil))
	srv := httptest.NewServer(New(f.st, testToken, log, f.clk))
	t.Cleanup(srv.Close)
	guesser, operator := newClientFrom(t, srv, "127.0.0.2"), newClientFrom(t, srv, "127.0.0.3")

	const guess = "guessed-secret-Zq8"
	for i := range authlimit.DefaultTries {
		if resp, _ := guesser.post("/login", url.Values{"token": {guess}}); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, resp.StatusCode)
		}
		f.clk.Advance(time.Second)
	}
	resp, body := guesser.post("/login", url.Values{"token": {testToken}})
	if resp.StatusCode != http.StatusTooManyRequests || len(resp.Cookies()) != 0 || resp.Header.Get("Retry-After") != "50" ||
		!strings.Contains(body, "50 seconds") {
		t.Fatalf("right token from the locked address: %d Retry-After %q cookies %v, want 429, 50 and no session",
			resp.StatusCode, resp.Header.Get("Retry-After"), resp.Cookies())
	}
	if resp, _ := operator.post("/login", url.Values{"token": {testToken}}); resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("right token from another address: %d, want 303 and a session", resp.StatusCode)
	}
	f.clk.Advance(50 * time.Second)
	if resp, _ := guesser.post("/login", url.Values{"token": {testToken}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("right token once the minute has passed: %d, want 303", resp.StatusCode)
	}
	mu.Lock()
	out := logs.String()
	mu.Unlock()
	if n := strings.Count(out, `msg="console: login refused: wrong admin token" client=127.0.0.2`); n != authlimit.DefaultTries {
		t.Errorf("%d wrong tokens logged with the address, want %d:\n%s", n, authlimit.DefaultTries, out)
	}
	if !strings.Contains(out, "client=127.0.0.2 tries=10 locked_for=51s") {
		t.Errorf("the lock-out is not logged:\n%s", out)
	}
	if strings.Contains(out, "Zq8") || strings.Contains(out, testToken) {
		t.Errorf("a token reached the log:\n%s", out)
	}
}

type writerFunc func(p []byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
