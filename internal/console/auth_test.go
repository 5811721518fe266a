package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
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
