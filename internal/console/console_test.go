package console

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// client is a browser stand-in: a cookie jar, no redirect following (the
// tests read each redirect), and the CSRF token of the last page read.
type client struct {
	t    *testing.T
	base string
	hc   *http.Client
	csrf string
}

func newClient(t *testing.T, srv *httptest.Server) *client {
	jar, _ := cookiejar.New(nil)
	// A copy: srv.Client() is one client for the server, and each browser
	// stand-in needs a cookie jar of its own.
	hc := new(http.Client)
	*hc = *srv.Client()
	hc.Jar = jar
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{t: t, base: srv.URL, hc: hc}
}

// newClientFrom is a browser whose connections come from the loopback
// address ip (all of 127.0.0.0/8 is loopback on Linux).
func newClientFrom(t *testing.T, srv *httptest.Server, ip string) *client {
	c := newClient(t, srv)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	c.hc.Transport = tr
	return c
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (c *client) do(req *http.Request) (*http.Response, string) {
	c.t.Helper()
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if m := csrfInput.FindSubmatch(b); m != nil {
		c.csrf = string(m[1])
	}
	return resp, string(b)
}

func (c *client) get(path string, hdr ...string) (*http.Response, string) {
	c.t.Helper()
	req, _ := http.NewRequest("GET", c.base+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return c.do(req)
}

func (c *client) post(path string, form url.Values, hdr ...string) (*http.Response, string) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return c.do(req)
}

func (c *client) login() {
	c.t.Helper()
	resp, body := c.post("/login", url.Values{"token": {testToken}, "next": {"/events"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/events" {
		c.t.Fatalf("login: %d %s %s", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	if _, body := c.get("/events"); c.csrf == "" {
		c.t.Fatalf("no CSRF token on the events page: %s", body)
	}
}

func startConsole(t *testing.T, fillers int) (*fixture, *Console, *httptest.Server) {
	t.Helper()
	f := newFixture(t, fillers)
	con := New(f.st, testToken, slog.New(slog.DiscardHandler), f.clk)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	return f, con, srv
}

func TestConsoleOffWithoutToken(t *testing.T) {
	f := newFixture(t, 0)
	con := New(f.st, "", nil, f.clk)
	for _, path := range []string{"/", "/login", "/events", "/assets/console.css"} {
		rec := httptest.NewRecorder()
		con.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != http.StatusNotFound {
			t.Errorf("GET %s without admin.token: %d, want 404", path, rec.Code)
		}
	}
	if link := con.MintLoginLink(); link != "" {
		t.Errorf("MintLoginLink with the console off: %q, want none", link)
	}
}

func TestUnauthenticatedRefused(t *testing.T) {
	_, _, srv := startConsole(t, 0)
	c := newClient(t, srv)

	for _, path := range []string{"/", "/events?disposition=stale", "/effects/1", "/event?source=stripe&event_id=evt_1"} {
		resp, _ := c.get(path)
		want := "/login?next=" + url.QueryEscape(path)
		if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != want {
			t.Errorf("GET %s: %d to %q, want 303 to %q", path, resp.StatusCode, resp.Header.Get("Location"), want)
		}
	}
	for _, path := range []string{"/assets/console.css", "/assets/vendor/htmx/htmx.min.js", "/events/rows", "/effects/rows?state=any"} {
		if resp, body := c.get(path); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "{") {
			t.Errorf("GET %s: %d %.60q, want 401 and nothing of the asset", path, resp.StatusCode, body)
		}
	}
	if resp, _ := c.get("/events/rows", "HX-Request", "true"); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("HX-Refresh") != "true" {
		t.Errorf("htmx GET /events/rows: %d HX-Refresh %q, want 401 and a refresh of the page", resp.StatusCode, resp.Header.Get("HX-Refresh"))
	}
	if resp, _ := c.post("/effects/1/retry", url.Values{"csrf": {"x"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST retry without a session: %d, want 401", resp.StatusCode)
	}
	resp, body := c.get("/login")
	if resp.StatusCode != 200 || !strings.Contains(body, `name="token"`) {
		t.Fatalf("login page: %d %s", resp.StatusCode, body)
	}
	// The login page is the one page served before login; its only
	// inline style is the one the policy names by hash.
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, loginStyleHash) || strings.Contains(csp, "unsafe-inline") {
		t.Errorf("CSP %q: want the login style's hash and no unsafe-inline", csp)
	}
}

func TestLogin(t *testing.T) {
	f, _, srv := startConsole(t, 0)
	c := newClient(t, srv)

	resp, body := c.post("/login", url.Values{"token": {"wrong"}})
	if resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 || !strings.Contains(body, "Wrong token") {
		t.Fatalf("wrong token: %d cookies %v", resp.StatusCode, resp.Cookies())
	}
	if resp, _ := c.post("/login", url.Values{"token": {testToken + "x"}}); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("token with a suffix: %d, want 401", resp.StatusCode)
	}
	// A next that leaves the site is replaced by the overview.
	resp, _ = c.post("/login", url.Values{"token": {testToken}, "next": {"//evil.example/x"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login: %d to %q, want 303 to /", resp.StatusCode, resp.Header.Get("Location"))
	}
	cks := resp.Cookies()
	if len(cks) != 1 {
		t.Fatalf("cookies: %v", cks)
	}
	ck := cks[0]
	if ck.Name != cookieName || len(ck.Value) < 43 || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure || ck.Path != "/" {
		t.Errorf("session cookie over plain HTTP: %+v; want HttpOnly, SameSite=Strict, not Secure, 32 random bytes", ck)
	}
	if resp, _ := c.get("/events"); resp.StatusCode != 200 {
		t.Fatalf("events after login: %d", resp.StatusCode)
	}

	// The session ends after its lifetime, on the injected clock.
	f.clk.Advance(sessionLifetime - time.Second)
	if resp, _ := c.get("/events"); resp.StatusCode != 200 {
		t.Fatalf("events just before the session ends: %d", resp.StatusCode)
	}
	f.clk.Advance(time.Second)
	if resp, _ := c.get("/events"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("events after the session ended: %d, want a redirect to login", resp.StatusCode)
	}

	// Logging out ends the session on the server, not only in the browser.
	c.login()
	old := c.hc.Jar.Cookies(mustURL(t, srv.URL))
	if resp, _ := c.post("/logout", url.Values{"csrf": {c.csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %d", resp.StatusCode)
	}
	replay := newClient(t, srv)
	replay.hc.Jar.SetCookies(mustURL(t, srv.URL), old)
	if resp, _ := replay.get("/events"); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("the cookie of a logged-out session still works: %d", resp.StatusCode)
	}
}

func TestLoginCookieSecureOverTLS(t *testing.T) {
	f := newFixture(t, 0)
	srv := httptest.NewTLSServer(New(f.st, testToken, nil, f.clk))
	t.Cleanup(srv.Close)
	c := newClient(t, srv)
	resp, _ := c.post("/login", url.Values{"token": {testToken}})
	if cks := resp.Cookies(); len(cks) != 1 || !cks[0].Secure || !cks[0].HttpOnly || cks[0].SameSite != http.SameSiteStrictMode {
		t.Fatalf("session cookie over TLS: %+v, want Secure, HttpOnly, SameSite=Strict", cks)
	}
}

func TestLoginLinkOnce(t *testing.T) {
	f, con, srv := startConsole(t, 0)
	link := con.MintLoginLink()
	if !strings.HasPrefix(link, "/login?once=") {
		t.Fatalf("link %q", link)
	}
	c := newClient(t, srv)
	resp, _ := c.get(link)
	if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("first use: %d %v", resp.StatusCode, resp.Cookies())
	}
	if resp, _ := c.get("/events"); resp.StatusCode != 200 {
		t.Fatalf("events after the link: %d", resp.StatusCode)
	}
	other := newClient(t, srv)
	if resp, _ := other.get(link); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("second use: %d %v, want 401 and no session", resp.StatusCode, resp.Cookies())
	}
	late := con.MintLoginLink()
	f.clk.Advance(onceLifetime)
	if resp, _ := other.get(late); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("expired link: %d, want 401", resp.StatusCode)
	}
}

func TestCSRF(t *testing.T) {
	f, _, srv := startConsole(t, 0)
	c := newClient(t, srv)
	c.login()
	path := "/effects/" + strconv.FormatInt(f.deadID, 10) + "/retry"

	for name, form := range map[string]url.Values{"missing": {}, "wrong": {"csrf": {c.csrf + "x"}}, "empty": {"csrf": {""}}} {
		if resp, _ := c.post(path, form); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s CSRF token: %d, want 403", name, resp.StatusCode)
		}
	}
	if resp, _ := c.post(path, url.Values{"csrf": {c.csrf}}, "Origin", "https://evil.example"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("foreign origin: %d, want 403", resp.StatusCode)
	}
	if resp, _ := c.post("/logout", url.Values{}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout without a token: %d, want 403", resp.StatusCode)
	}
	if st := f.effect(t, f.deadID).State; st != store.EffectDead {
		t.Fatalf("a refused request changed the effect: %s", st)
	}

	// The header form (htmx) and the field form both work.
	resp, _ := c.post(path, url.Values{}, csrfHeader, c.csrf, "Origin", srv.URL)
	if resp.StatusCode != http.StatusSeeOther || !strings.HasSuffix(resp.Header.Get("Location"), "?done=retry") {
		t.Fatalf("retry with the right token: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	if st := f.effect(t, f.deadID).State; st != store.EffectApproved {
		t.Fatalf("after retry: %s, want approved", st)
	}
	rows, err := f.st.AuditList(context.Background(), &store.AuditListParams{Action: "effect_retry", Limit: 10})
	if err != nil || len(rows) != 1 || rows[0].Actor != actor {
		t.Fatalf("audit of the retry: %+v %v, want one row by %s", rows, err, actor)
	}
	_, body := c.get(resp.Header.Get("Location"))
	if !strings.Contains(body, "Retry requested") || !strings.Contains(body, `id="effect-state">approved<`) {
		t.Errorf("effect page after retry: no confirmation or state: %s", body)
	}
}

func TestOperateErrorsInline(t *testing.T) {
	f, _, srv := startConsole(t, 0)
	c := newClient(t, srv)
	c.login()
	base := "/effects/" + strconv.FormatInt(f.deadID, 10)

	resp, body := c.post(base+"/resolve", url.Values{"csrf": {c.csrf}, "note": {"  "}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Resolve needs a note") {
		t.Fatalf("resolve without a note: %d %s", resp.StatusCode, body)
	}
	resp, body = c.post(base+"/assign", url.Values{"csrf": {c.csrf}, "owner": {"<b>alice</b>"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("assign: %d %s", resp.StatusCode, body)
	}
	if e := f.effect(t, f.deadID); e.Owner != "<b>alice</b>" || e.State != store.EffectDead {
		t.Fatalf("after assign: owner %q state %s", e.Owner, e.State)
	}
	_, body = c.get(base)
	if !strings.Contains(body, "&lt;b&gt;alice&lt;/b&gt;") || strings.Contains(body, "<b>alice") {
		t.Errorf("owner not escaped on the effect page")
	}
	if resp, _ := c.post(base+"/resolve", url.Values{"csrf": {c.csrf}, "note": {"fixed the seats in the CRM"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("resolve: %d", resp.StatusCode)
	}
	// Resolved is final: a retry now is refused with the reason, inline.
	resp, body = c.post(base+"/retry", url.Values{"csrf": {c.csrf}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "Cannot retry an effect that is resolved") {
		t.Fatalf("retry of a resolved effect: %d %s", resp.StatusCode, body)
	}
	if resp, _ := c.post(base+"/explode", url.Values{"csrf": {c.csrf}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown action: %d, want 404", resp.StatusCode)
	}
}

func TestEventPageEscapesBody(t *testing.T) {
	_, _, srv := startConsole(t, 0)
	c := newClient(t, srv)
	c.login()
	resp, body := c.get("/event?source=stripe&event_id=evt_1")
	if resp.StatusCode != 200 {
		t.Fatalf("event page: %d", resp.StatusCode)
	}
	if strings.Contains(body, "<script>window.__pwned") {
		t.Fatal("the event body reached the page as markup")
	}
	if !strings.Contains(body, "&lt;script&gt;window.__pwned=1&lt;/script&gt;") {
		t.Errorf("the body is not shown as text: %s", body)
	}
	for _, want := range []string{`&#34;name&#34;: &#34;`, "User-Agent", "Stripe/1.0", "billing_to_crm", "upsert_deal", "applied", "disposition"} {
		if !strings.Contains(body, want) {
			t.Errorf("event page lacks %q", want)
		}
	}
	_, body = c.get("/event?source=stripe&event_id=evt_2")
	if !strings.Contains(body, `id="event-disposition">stale<`) || strings.Count(body, "<section class=\"delivery\"") != 2 {
		t.Errorf("evt_2: want stale with two deliveries: %s", body)
	}
	if resp, _ := c.get("/event?source=stripe&event_id=nope"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown event: %d, want 404", resp.StatusCode)
	}
}

var eventLinkRE = regexp.MustCompile(`href="/event\?event_id=(ping_\d+)&amp;source=app"`)
var nextLinkRE = regexp.MustCompile(`href="([^"]+)" rel="next"`)

func TestEventsPagingAndFilters(t *testing.T) {
	_, _, srv := startConsole(t, 60)
	c := newClient(t, srv)
	c.login()

	var seen []string
	path := "/events?type=ping&limit=25"
	for pages := 0; path != ""; pages++ {
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		resp, body := c.get(path)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		for _, m := range eventLinkRE.FindAllStringSubmatch(body, -1) {
			seen = append(seen, m[1])
		}
		path = ""
		if m := nextLinkRE.FindStringSubmatch(body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
			if !strings.Contains(path, "type=ping") || !strings.Contains(path, "limit=25") {
				t.Fatalf("next page lost the filters: %s", path)
			}
		}
	}
	if len(seen) != 60 || seen[0] != "ping_00" || seen[59] != "ping_59" {
		t.Fatalf("pages held %d events (%v), want ping_00..ping_59 once each", len(seen), seen)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("paging repeated or reordered: %s after %s", seen[i], seen[i-1])
		}
	}

	// A form sends every field, empty ones included, and times as
	// datetime-local; the list reads them as the API would.
	_, body := c.get("/events?source=&type=&disposition=stale&received_from=2026-11-03T08:00&received_to=")
	if !strings.Contains(body, "evt_2") || strings.Contains(body, ">evt_1<") || strings.Contains(body, "ping_") {
		t.Errorf("disposition=stale: want evt_2 alone: %s", body)
	}
	if !strings.Contains(body, `value="2026-11-03T08:00:00"`) {
		t.Errorf("the time filter is not shown back in its field")
	}
	if _, body := c.get("/events?received_from=2026-11-03T09:00:03"); strings.Contains(body, ">evt_1<") || !strings.Contains(body, "ping_00") {
		t.Errorf("received_from did not filter")
	}
	resp, body := c.get("/events?disposition=bogus")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Filter disposition") {
		t.Errorf("bad filter: %d, want 400 naming the parameter", resp.StatusCode)
	}
	if resp, _ := c.get("/events?colour=red"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("unknown filter: %d, want 400", resp.StatusCode)
	}

	// The rows fragment keeps the filters in its own refresh address.
	resp, body = c.get("/events/rows?disposition=stale")
	if resp.StatusCode != 200 || !strings.HasPrefix(body, `<tbody id="event-rows" hx-get="/events/rows?disposition=stale"`) || !strings.Contains(body, "evt_2") {
		t.Errorf("rows fragment: %d %s", resp.StatusCode, body)
	}
}

func TestEffectsListAndPage(t *testing.T) {
	f, _, srv := startConsole(t, 0)
	c := newClient(t, srv)
	c.login()
	id := strconv.FormatInt(f.deadID, 10)

	_, body := c.get("/effects")
	if !strings.Contains(body, `href="/effects/`+id+`"`) || !strings.Contains(body, "<title>Exception queue") {
		t.Errorf("the exception queue lacks the dead effect: %s", body)
	}
	if _, body := c.get("/effects?state=done"); strings.Contains(body, `href="/effects/`+id+`"`) {
		t.Errorf("state=done lists a dead effect")
	}
	if _, body := c.get("/effects?state=any&class=permanent&destination=crm"); !strings.Contains(body, `href="/effects/`+id+`"`) {
		t.Errorf("state=any&class=permanent lacks the effect")
	}
	if resp, _ := c.get("/effects?state=sleeping"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("bad state: %d, want 400", resp.StatusCode)
	}

	_, body = c.get("/effects/" + id)
	for _, want := range []string{"429", "422", ">120<", ">seconds<", "2m0s", "quota", "permanent",
		"Suggested repair", `id="retry"`, `name="note"`, `name="owner"`, "seats must be &lt;= 2"} {
		if !strings.Contains(body, want) {
			t.Errorf("effect page lacks %q", want)
		}
	}
	if resp, _ := c.get("/effects/999999"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown effect: %d, want 404", resp.StatusCode)
	}
}

func TestEntityPage(t *testing.T) {
	_, _, srv := startConsole(t, 0)
	c := newClient(t, srv)
	c.login()
	resp, body := c.get("/entity?flow=billing_to_crm&entity=sub_1")
	if resp.StatusCode != 200 {
		t.Fatalf("entity page: %d", resp.StatusCode)
	}
	if !strings.Contains(body, `id="projection-version">r2<`) || !strings.Contains(body, "seats") {
		t.Errorf("projection missing: %s", body)
	}
	// Business order is the flow's order key, not occurrence or receipt:
	// evt_1 (key 1) comes before evt_2 (key 2) although evt_2 occurred an
	// hour earlier; evt_2 is stale beside the applied evt_1, with its
	// reason, and evt_1 is the one the projection holds.
	i1, i2 := strings.Index(body, ">evt_1<"), strings.Index(body, ">evt_2<")
	if i2 < 0 || i1 < 0 || i1 > i2 {
		t.Errorf("business order: evt_1 at %d, evt_2 at %d", i1, i2)
	}
	if !strings.Contains(body, `>evt_1</a> <strong class="applied-mark">(current state)`) {
		t.Errorf("the applied event is not marked as the current state")
	}
	if strings.Count(body, "(current state)") != 1 || !strings.Contains(body, ">stale<") ||
		!strings.Contains(body, "version r1 is older than applied r2") || !strings.Contains(body, "upsert_deal") {
		t.Errorf("entity page lacks the single applied marker, the stale event with its reason or the effect: %s", body)
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
