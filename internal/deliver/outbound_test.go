package deliver_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/store"
)

// recorder is a listener that must never be reached: it records every
// request with the credentials it carried.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.seen = append(r.seen, fmt.Sprintf("%s %s (Authorization %q)", req.Method, req.RequestURI, req.Header.Get("Authorization")))
		r.mu.Unlock()
		fmt.Fprint(w, `{"id":"obj_stolen"}`)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *recorder) requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.seen...)
}

// followingClient is an injected client that follows redirects, as
// http.DefaultClient does.
var followingClient = &http.Client{Timeout: 10 * time.Second}

// A redirect is an answer: permanent at once, with where it pointed (the
// query cut off) and the repair, and the credentials never follow it, even
// through an injected client that would follow.
func TestRedirectIsPermanentAndNeverFollowed(t *testing.T) {
	for _, status := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			other := newRecorder(t)
			target := other.URL + "/charges?token=s3cret"
			first := httptest.NewServer(http.RedirectHandler(target, status))
			defer first.Close()
			x := newWorld(t, setup{baseURL: first.URL, client: followingClient, dest: "auth: {bearer: api-token}"})
			e := x.order("o1", 1)
			x.drain()
			e = x.get(e.ID)
			x.wantState(e, store.EffectDead)
			if e.ErrorClass != store.ClassPermanent || !strings.Contains(e.Reason, fmt.Sprintf("HTTP %d", status)) ||
				!strings.Contains(e.Reason, "redirected to "+other.URL+"/charges") || strings.Contains(e.Reason, "s3cret") ||
				!strings.Contains(e.SuggestedRepair, "fix base_url") || !e.NextAttemptAt.IsZero() {
				t.Fatalf("dead: [%s] %q / %q next %v", e.ErrorClass, e.Reason, e.SuggestedRepair, e.NextAttemptAt)
			}
			if as := x.attempts(e.ID); len(as) != 1 || as[0].Status != status || strings.Contains(as[0].Error, "s3cret") {
				t.Fatalf("attempts %+v", as)
			}
			if texts := x.hook.all(); len(texts) != 1 || !strings.Contains(texts[0], "fix base_url") || strings.Contains(texts[0], "s3cret") {
				t.Fatalf("notifications %q", texts)
			}
			if got := other.requests(); len(got) != 0 {
				t.Fatalf("the redirect was followed: %q", got)
			}
		})
	}
}

// A lookup answered with a redirect has not looked: neither "found" (the
// redirect target may say anything) nor "not found" (a resend could do the
// work twice). A person decides, and is told.
func TestLookupRedirectGoesToAPerson(t *testing.T) {
	other := newRecorder(t)
	first := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusFound)
	}))
	defer first.Close()
	x := newWorld(t, setup{baseURL: first.URL, client: followingClient, dest: lookup + "\nauth: {bearer: api-token}"})
	e := x.order("o1", 1)
	// A worker took the effect and died during its call: the next claim
	// reconciles by lookup.
	if _, err := x.st.EffectClaim(x.ctx, &store.EffectClaimParams{Owner: "worker-dead", Now: x.clk.Now(),
		LeaseFor: 30 * time.Second, Limit: 10, Destinations: []string{"dest"}, MaxRedrives: 3}); err != nil {
		t.Fatal(err)
	}
	x.clk.Advance(31 * time.Second)
	x.drain()
	e = x.get(e.ID)
	x.wantState(e, store.EffectNeedsReconciliation)
	if !strings.Contains(e.Reason, "lookup") || !strings.Contains(e.Reason, "redirected to "+other.URL) ||
		!strings.Contains(e.SuggestedRepair, "base_url") || !e.NextAttemptAt.IsZero() {
		t.Fatalf("[%s] %q / %q next %v", e.ErrorClass, e.Reason, e.SuggestedRepair, e.NextAttemptAt)
	}
	if texts := x.hook.all(); len(texts) != 1 || !strings.Contains(texts[0], e.EpisodeKey) {
		t.Fatalf("notifications %q", texts)
	}
	if got := other.requests(); len(got) != 0 {
		t.Fatalf("the lookup's redirect was followed: %q", got)
	}
	// Nothing is scheduled: later steps neither look up again nor resend.
	x.clk.Advance(48 * time.Hour)
	x.drain()
	if got := x.get(e.ID); got.State != store.EffectNeedsReconciliation {
		t.Fatalf("state %s, want it left to a person", got.State)
	}
}

// A destination whose calls fail with a token in base_url's query string:
// transport errors name the URL, and none of the places a reason goes
// (the effect, its attempts, the audit trail, the notification, the log)
// may show the token.
func TestFailedCallsNeverShowTheQueryString(t *testing.T) {
	const secret = "s3cret-api-key"
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // connection refused from now on
	for _, tc := range []struct {
		name  string
		base  string
		fault delivertest.Fault
		want  store.EffectState
	}{
		{"connection refused", closed.URL + "/?api_key=" + secret, delivertest.Success, store.EffectDead},
		{"timeout after sending", "{dest}/?api_key=" + secret, delivertest.TimeoutBeforeWork, store.EffectNeedsReconciliation},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newWorld(t, setup{baseURL: tc.base,
				dest: "retry: {base: 1s, cap: 1m, factor: 2, attempts: 2, redrive: []}"})
			e := x.order("o1", 1)
			x.dest.Script(e.EpisodeKey, tc.fault)
			e = x.until(e.ID, tc.want)
			texts := []string{e.Reason, e.SuggestedRepair, e.LastResponse}
			for _, a := range x.attempts(e.ID) {
				texts = append(texts, a.Error)
			}
			audit, err := x.st.AuditList(x.ctx, &store.AuditListParams{Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range audit {
				texts = append(texts, a.Detail)
			}
			texts = append(texts, x.hook.all()...)
			logs := x.logs.String()
			texts = append(texts, logs)
			for _, s := range texts {
				if strings.Contains(s, secret) {
					t.Errorf("the query string's token shows: %q", s)
				}
			}
			// The URL is still named, without its query.
			url := strings.ReplaceAll(tc.base, "{dest}", x.dest.URL)
			url = url[:strings.IndexByte(url, '?')]
			if !strings.Contains(e.Reason, `"`+url) || len(x.hook.all()) != 1 || !strings.Contains(logs, "effect needs a person") {
				t.Errorf("reason %q does not name %s, or %d notifications, or the log misses the effect:\n%s", e.Reason, url, len(x.hook.all()), logs)
			}
		})
	}
}

// In Slack's scheme the webhook URL's path is the secret: a failed
// notification is logged with its cause and no part of the URL.
func TestFailedNotificationNeverShowsTheWebhookURL(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	x := newWorld(t, setup{webhookURL: closed.URL + "/services/T000/B000/s3cretpath?token=s3cretquery"})
	e := x.order("o1", 1)
	x.dest.Script(e.EpisodeKey, delivertest.Fail400)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDead)
	out := x.logs.String()
	if !strings.Contains(out, "notification failed") || !strings.Contains(out, "connection refused") || strings.Contains(out, "s3cret") {
		t.Fatalf("log:\n%s", out)
	}
}

// Payload data in a path cannot climb out of base_url's path, add query
// parameters, name another host or smuggle a header: the call is refused
// before anything is sent, permanently (never retried as a transport
// failure), and a person is told how to repair the flow.
func TestPayloadCannotEscapeThePath(t *testing.T) {
	const keyHeader = `X-Episode-Key: '"orders:" + entity + ":r" + string(version) + ":charge"'`
	for _, tc := range []struct {
		name, id, path, want string
	}{
		{"climb", "../../admin/secret", `'"/orders/" + entity'`, "dot segment"},
		{"climb, escaped", "../../admin/secret", `'"/orders/" + pathEscape(entity)'`, "dot segment"},
		{"climb, percent-encoded", "%2e%2e", `'"/orders/" + entity + "/admin"'`, "dot segment"},
		{"query", "x?admin=1&y=2", `'"/orders/" + entity'`, "query"},
		{"fragment", "x#y", `'"/orders/" + entity'`, "fragment"},
		{"another host", "/evil.example/x", `'"/" + entity'`, "another host"},
		{"absolute URL", "http://evil.example/x", `'entity'`, "URL"},
		{"credentials and host", "@evil.example/x", `'entity'`, "credentials"},
		{"backslash", `..\admin`, `'"/orders/" + entity'`, "backslash"},
		// An entity holds no control character (it is an identity), and a
		// header value with one is refused when the effect would be made
		// (TestCraftedPathsNeverReachAnotherListener); a path computed
		// from other data is refused here.
		{"CRLF in the path", "o1", `'"/orders/" + pathEscape(entity) + (entity == "o1" ? "\r\nX-Admin: 1" : "")'`, "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := newRecorder(t)
			x := newWorld(t, setup{baseURL: dest.URL + "/api", dest: "auth: {bearer: api-token}",
				request: "path: " + tc.path + "\nheaders: {" + keyHeader + "}"})
			id := strings.NewReplacer(`\r`, "\r", `\n`, "\n", `\\`, `\`).Replace(tc.id)
			e := x.order(id, 1)
			x.drain()
			e = x.get(e.ID)
			x.wantState(e, store.EffectDead)
			if e.ErrorClass != store.ClassPermanent || !strings.Contains(e.Reason, "refused before sending") || !strings.Contains(e.Reason, tc.want) ||
				!strings.Contains(e.SuggestedRepair, "pathEscape") || !strings.Contains(e.SuggestedRepair, "request.query") || !e.NextAttemptAt.IsZero() {
				t.Fatalf("[%s] %q / %q next %v", e.ErrorClass, e.Reason, e.SuggestedRepair, e.NextAttemptAt)
			}
			if strings.ContainsAny(e.Reason, "\r\n") {
				t.Fatalf("the reason carries a raw CR or LF: %q", e.Reason)
			}
			if texts := x.hook.all(); len(texts) != 1 || !strings.Contains(texts[0], e.EpisodeKey) {
				t.Fatalf("notifications %q", texts)
			}
			x.clk.Advance(7 * time.Hour)
			x.drain()
			if got := dest.requests(); len(got) != 0 {
				t.Fatalf("the destination was called: %q", got)
			}
		})
	}
}

// Escaped payload data stays one segment, and query parameters come from
// query:, escaped, after base_url's own query; the stored request keeps
// them for every attempt.
func TestEscapedPathAndQueryReachTheDestination(t *testing.T) {
	dest := newRecorder(t)
	x := newWorld(t, setup{baseURL: dest.URL + "/api?tenant=t1", request: `path: '"/orders/" + pathEscape(entity)'
query: '{"idProperty": "order_id", "note": entity}'
headers: {X-Episode-Key: '"orders:" + entity + ":r" + string(version) + ":charge"'}`})
	e := x.order("x?admin=1&y=2", 1)
	if !strings.Contains(string(e.Request), `"query":{"idProperty":["order_id"],"note":["x?admin=1\u0026y=2"]}`) &&
		!strings.Contains(string(e.Request), `"query":{"idProperty":["order_id"],"note":["x?admin=1&y=2"]}`) {
		t.Fatalf("stored request %s", e.Request)
	}
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDone)
	want := `POST /api/orders/x%3Fadmin=1&y=2?tenant=t1&idProperty=order_id&note=x%3Fadmin%3D1%26y%3D2 (Authorization "")`
	if got := dest.requests(); len(got) != 1 || got[0] != want {
		t.Fatalf("requests %q, want %q", got, want)
	}
}

// An embedding program calling the http action itself gets the same
// refusal, classified permanent, and nothing is sent.
func TestHTTPActionRefusesUncheckedCalls(t *testing.T) {
	dest := newRecorder(t)
	d := &config.Destination{Name: "d", BaseURL: dest.URL, Timeout: config.Duration(time.Second), AllowPrivateNetworks: true}
	for _, c := range []*deliver.Call{
		{Path: "/orders/../admin"},
		{Path: "/orders/x?admin=1"},
		{Path: "/orders/x", Header: http.Header{"X-Order": {"x\r\nX-Admin: 1"}}},
	} {
		c.Destination, c.Method = d, http.MethodPost
		resp, err := (&deliver.HTTPAction{Client: followingClient}).Do(context.Background(), c)
		class, reason := deliver.Classify(d, resp, err)
		if class != store.ClassPermanent || !strings.Contains(reason, "refused before sending") || resp.Sent {
			t.Errorf("%q %v: [%s] %s (sent %v)", c.Path, c.Header, class, reason, resp.Sent)
		}
	}
	if got := dest.requests(); len(got) != 0 {
		t.Fatalf("the destination was called: %q", got)
	}
}
