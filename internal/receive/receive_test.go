package receive_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the second connection that holds the write lock

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/inbox"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/receive"
	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

const baseConfig = `listen: 127.0.0.1:0
store: sqlite:unused
sources:
  - name: app
    kind: standard-webhooks
    secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]
  - name: loop
    kind: standard-webhooks
    secrets: [whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw]
  - name: crm
    kind: hubspot
    version: v3
    secrets: [hubspot-client-secret]
`

// rig is one receiver over a real SQLite file and the real group-commit
// writer, served over loopback HTTP.
type rig struct {
	t    *testing.T
	cfg  *config.Config
	st   *sqlite.Store
	path string
	srv  *httptest.Server
	logs *bytes.Buffer
}

func newRig(t *testing.T, yaml string, configure func(*http.Server)) *rig {
	t.Helper()
	return newRigAt(t, yaml, configure, t0)
}

// newRigAt is newRig with the receiver's fake clock at now.
func newRigAt(t *testing.T, yaml string, configure func(*http.Server), now time.Time) *rig {
	t.Helper()
	cfg, err := config.Parse("receive.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	path := filepath.Join(t.TempDir(), "receive.db")
	ctx := context.Background()
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	w := inbox.New(st, inbox.Options{})
	w.Start()
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	logs := &bytes.Buffer{}
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h, err := receive.New(cfg, receive.Options{Writer: w, Store: st, Clock: clock.NewFake(now), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /hooks/{source}", h)
	srv := httptest.NewUnstartedServer(mux)
	if configure != nil {
		configure(srv.Config)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return &rig{t: t, cfg: cfg, st: st, path: path, srv: srv, logs: logs}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (r *rig) source(name string) config.Source {
	for _, s := range r.cfg.Sources {
		if s.Name == name {
			return s
		}
	}
	r.t.Fatalf("no source %s", name)
	return config.Source{}
}

// signed builds a request the named source's sender would make.
func (r *rig) signed(name, eventID string, body []byte, extra http.Header) *http.Request {
	r.t.Helper()
	src := r.source(name)
	scheme, err := signature.New(src.SchemeOptions())
	if err != nil {
		r.t.Fatal(err)
	}
	url := r.srv.URL + "/hooks/" + name
	h, err := scheme.Sign(&signature.Request{Method: "POST", URL: url, Body: body}, t0, eventID)
	if err != nil {
		r.t.Fatal(err)
	}
	req, err := http.NewRequest("POST", url, bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	for k, vs := range h {
		req.Header[k] = vs
	}
	for k, vs := range extra {
		req.Header[k] = vs
	}
	req.Header.Set("Content-Type", "application/json")
	return req
}

func do(t *testing.T, req *http.Request) (int, string, http.Header) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", req.URL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func swBody(id, typ string) []byte {
	return []byte(fmt.Sprintf(`{"id":%q,"type":%q,"timestamp":"2026-11-03T08:59:00Z","data":{"id":"obj_1"}}`, id, typ))
}

func (r *rig) events() []*store.Event {
	r.t.Helper()
	res, err := r.st.EventList(context.Background(), &store.EventListParams{Limit: 1000})
	if err != nil {
		r.t.Fatal(err)
	}
	return res.Events
}

func (r *rig) deliveries(source, eventID string) []*store.Delivery {
	r.t.Helper()
	ds, err := r.st.DeliveryList(context.Background(), &store.DeliveryListParams{Source: source, EventID: eventID, Limit: 100})
	if err != nil {
		r.t.Fatal(err)
	}
	return ds
}

func TestStoresSignedEventAndAnswers200(t *testing.T) {
	r := newRig(t, baseConfig, nil)
	code, body, _ := do(t, r.signed("app", "msg_1", swBody("msg_1", "order.created"), nil))
	if code != 200 {
		t.Fatalf("got %d %s, want 200", code, body)
	}
	evs := r.events()
	if len(evs) != 1 || evs[0].EventID != "msg_1" || evs[0].Type != "order.created" {
		t.Fatalf("stored events = %+v", evs)
	}
}

// Identities are capped: a 1 MiB event id once made a single API page
// 60 MB and could overflow a PostgreSQL index entry.
func TestIdentityLengthCap(t *testing.T) {
	yaml := strings.Replace(baseConfig, "listen:", "receive: {max_body_bytes: 65536}\nlisten:", 1)
	r := newRig(t, yaml, nil)
	long := strings.Repeat("e", store.MaxIdentityBytes+1)
	code, body, _ := do(t, r.signed("app", long, swBody(long, "order.created"), nil))
	if code != 400 || !strings.Contains(body, "event id: is 513 bytes long; the limit is 512") {
		t.Fatalf("long event id: got %d %s, want 400 naming the event id and the limit", code, body)
	}
	longType := strings.Repeat("t", store.MaxIdentityBytes+1)
	code, body, _ = do(t, r.signed("app", "msg_2", swBody("msg_2", longType), nil))
	if code != 400 || !strings.Contains(body, "type: is 513 bytes long") {
		t.Fatalf("long type: got %d %s, want 400 naming the type", code, body)
	}
	if n := len(r.events()); n != 0 {
		t.Fatalf("%d events stored, want none", n)
	}
	// Exactly at the limit is accepted.
	ok := strings.Repeat("k", store.MaxIdentityBytes)
	if code, body, _ := do(t, r.signed("app", ok, swBody(ok, "order.created"), nil)); code != 200 {
		t.Fatalf("id at the limit: got %d %s, want 200", code, body)
	}
}

// An identity must be text every driver stores and every header can
// carry: NUL, invalid UTF-8 and control characters in the event id or the
// type are refused at the door with 400 naming the field, and nothing is
// stored (an event id with U+0085 used to be stored, and every effect of
// it went dead on its causation header).
func TestIdentityTextRules(t *testing.T) {
	yaml := baseConfig + "  - name: pay\n    kind: stripe\n    secrets: [whsec_test_secret]\n"
	r := newRig(t, yaml, nil)
	stripeBody := func(id, typ string) []byte {
		return []byte(fmt.Sprintf(`{"id":"%s","object":"event","type":"%s","created":1793696340,"data":{"object":{"id":"cus_1"}}}`, id, typ))
	}
	rawSW := func(typ string) []byte { return []byte(`{"type":"` + typ + `","data":{}}`) }
	for _, tc := range []struct {
		name string
		req  *http.Request
		want string
	}{
		// The id header may carry UTF-8 (obs-text), so U+0085 reaches the
		// receiver in a Standard Webhooks id.
		{"C1 in the id header", r.signed("app", "ctl\u0085id", swBody("x", "order.created"), nil), "event id: holds the control character U+0085"},
		{"ESC in a body id", r.signed("pay", "", stripeBody(`esc\u001bid`, "customer.updated"), nil), "event id: holds the control character U+001B"},
		{"NUL in a body id", r.signed("pay", "", stripeBody(`nul\u0000id`, "customer.updated"), nil), "event id: holds a NUL character"},
		{"NUL in the type", r.signed("app", "msg_t", rawSW(`order\u0000created`), nil), "type: holds a NUL character"},
		{"DEL in the type", r.signed("app", "msg_u", rawSW(`order\u007fcreated`), nil), "type: holds the control character U+007F"},
	} {
		code, resp, _ := do(t, tc.req)
		if code != 400 || !strings.Contains(resp, tc.want) {
			t.Errorf("%s: got %d %s, want 400 with %q", tc.name, code, resp, tc.want)
		}
	}
	if n := len(r.events()); n != 0 {
		t.Fatalf("%d events stored, want none", n)
	}
	// A line separator is text, not a control character.
	if code, resp, _ := do(t, r.signed("pay", "", stripeBody(`sep\u2028id`, "customer.updated"), nil)); code != 200 {
		t.Fatalf("U+2028 in an id: got %d %s, want 200", code, resp)
	}
}

// Causation headers are unsigned: only a trusted source may set them, so a
// forged causation id cannot settle a real event as a loop duplicate.
func TestCausationHeadersOnlyFromTrustedSources(t *testing.T) {
	yaml := baseConfig + "causation:\n  trusted_sources: [loop]\n"
	r := newRig(t, yaml, nil)
	hdr := http.Header{"X-Hookledger-Causation": {"cause-7"}, "X-Hookledger-Hop": {"3"}}
	if code, body, _ := do(t, r.signed("app", "msg_a", swBody("msg_a", "x"), hdr)); code != 200 {
		t.Fatalf("got %d %s", code, body)
	}
	if code, body, _ := do(t, r.signed("loop", "msg_b", swBody("msg_b", "x"), hdr)); code != 200 {
		t.Fatalf("got %d %s", code, body)
	}
	a := r.deliveries("app", "msg_a")
	b := r.deliveries("loop", "msg_b")
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("deliveries: %d and %d, want 1 each", len(a), len(b))
	}
	if a[0].CausationID != "" || a[0].Hop != 0 {
		t.Errorf("untrusted source: causation %q hop %d stored, want them ignored", a[0].CausationID, a[0].Hop)
	}
	if b[0].CausationID != "cause-7" || b[0].Hop != 3 {
		t.Errorf("trusted source: causation %q hop %d, want cause-7 and 3", b[0].CausationID, b[0].Hop)
	}
	// A malformed hop from a trusted source is still refused, precisely.
	bad := http.Header{"X-Hookledger-Causation": {"cause-8"}, "X-Hookledger-Hop": {"many"}}
	if code, body, _ := do(t, r.signed("loop", "msg_c", swBody("msg_c", "x"), bad)); code != 400 || !strings.Contains(body, "X-Hookledger-Hop") {
		t.Fatalf("bad hop: got %d %s, want 400 naming the header", code, body)
	}
}

// The delivery worker sends the causation id percent-encoded; a trusted
// source that passes it back gets the chain's own id stored, so a loop
// through it is recognised whatever characters the id holds.
func TestCausationHeaderIsDecoded(t *testing.T) {
	r := newRig(t, baseConfig+"causation:\n  trusted_sources: [loop]\n", nil)
	long := strings.Repeat("é", 100) // 200 bytes: at the limit once decoded, 600 as sent
	for i, tc := range []struct{ sent, want string }{
		{"app/ctl%C2%85id", "app/ctl\u0085id"},
		{"app/caf%C3%A9%20%1B%25", "app/café \x1b%"},
		{outbound.EncodeHeaderValue(long), long},
		{"50% off", "50% off"}, // not an encoding: kept as written
	} {
		id := fmt.Sprint("msg_", i)
		hdr := http.Header{"X-Hookledger-Causation": {tc.sent}, "X-Hookledger-Hop": {"1"}}
		if code, body, _ := do(t, r.signed("loop", id, swBody(id, "x"), hdr)); code != 200 {
			t.Fatalf("%q: got %d %s", tc.sent, code, body)
		}
		if d := r.deliveries("loop", id); len(d) != 1 || d[0].CausationID != tc.want {
			t.Errorf("sent %q: stored %+v, want causation %q", tc.sent, d, tc.want)
		}
	}
	// Decoded to more than 200 bytes, or to something that is not text,
	// it is refused as before, naming the header.
	for i, sent := range []string{outbound.EncodeHeaderValue(long + "x"), "app/%FF%FE", "app/%00"} {
		id := fmt.Sprint("bad_", i)
		hdr := http.Header{"X-Hookledger-Causation": {sent}}
		if code, body, _ := do(t, r.signed("loop", id, swBody(id, "x"), hdr)); code != 400 || !strings.Contains(body, "X-Hookledger-Causation") {
			t.Errorf("%q: got %d %s, want 400 naming the header", sent, code, body)
		}
	}
}

func TestCausationTrustedSourceMustExist(t *testing.T) {
	_, err := config.Parse("c.yaml", []byte(baseConfig+"causation:\n  trusted_sources: [nope]\n"), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), `c.yaml:15:`) || !strings.Contains(err.Error(), `no source named "nope"`) {
		t.Fatalf("err = %v, want the line of the unknown trusted source", err)
	}
}

// hubspotRequest signs for signedURL and sends to the rig, with Host and
// forwarding headers as a proxy would leave them.
func (r *rig) hubspotRequest(signedURL string, hdr http.Header, host string) *http.Request {
	r.t.Helper()
	body := []byte(`[{"eventId":1,"subscriptionId":2,"portalId":3,"occurredAt":1762160340000,"subscriptionType":"contact.creation","objectId":42,"attemptNumber":0}]`)
	src := r.source("crm")
	scheme, err := signature.New(src.SchemeOptions())
	if err != nil {
		r.t.Fatal(err)
	}
	sig, err := scheme.Sign(&signature.Request{Method: "POST", URL: signedURL, Body: body}, t0, "")
	if err != nil {
		r.t.Fatal(err)
	}
	req, err := http.NewRequest("POST", r.srv.URL+"/hooks/crm", bytes.NewReader(body))
	if err != nil {
		r.t.Fatal(err)
	}
	for k, vs := range sig {
		req.Header[k] = vs
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if host != "" {
		req.Host = host
	}
	return req
}

func TestForwardedHeadersOnlyFromTrustedProxies(t *testing.T) {
	fwd := http.Header{"X-Forwarded-Proto": {"https"}, "X-Forwarded-Host": {"hooks.example.com"}}
	const public = "https://hooks.example.com/hooks/crm"

	// Without trusted_proxies, the forwarding headers are ignored: the
	// signature over the public URL does not verify, and the log says
	// which URL was used and where it came from.
	r := newRig(t, baseConfig, nil)
	if code, body, _ := do(t, r.hubspotRequest(public, fwd, "")); code != 401 {
		t.Fatalf("untrusted proxy: got %d %s, want 401", code, body)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, "signed_url=http://127.0.0.1:") || !strings.Contains(logs, `url_from="Host header"`) {
		t.Errorf("refusal log does not say which URL was checked: %s", logs)
	}
	if strings.Contains(logs, "hubspot-client-secret") {
		t.Errorf("log contains the secret: %s", logs)
	}
	if !strings.Contains(logs, `level=WARN msg="webhook refused" source=crm`) {
		t.Errorf("a refused webhook is not logged at WARN: %s", logs)
	}

	// With the peer (loopback) trusted, they are believed.
	r2 := newRig(t, strings.Replace(baseConfig, "listen:", "receive: {trusted_proxies: [127.0.0.0/8]}\nlisten:", 1), nil)
	if code, body, _ := do(t, r2.hubspotRequest(public, fwd, "")); code != 200 {
		t.Fatalf("trusted proxy, X-Forwarded-*: got %d %s, want 200", code, body)
	}
	rfc := http.Header{"Forwarded": {`for=192.0.2.60;proto=https;host="hooks.example.com", for=10.0.0.1`}}
	if code, body, _ := do(t, r2.hubspotRequest(public, rfc, "")); code != 200 {
		t.Fatalf("trusted proxy, Forwarded: got %d %s, want 200", code, body)
	}

	// A trusted range that does not hold the peer changes nothing.
	r3 := newRig(t, strings.Replace(baseConfig, "listen:", "receive: {trusted_proxies: [10.0.0.1]}\nlisten:", 1), nil)
	if code, _, _ := do(t, r3.hubspotRequest(public, fwd, "")); code != 401 {
		t.Fatalf("peer outside trusted_proxies: got %d, want 401", code)
	}
}

func TestURLSigningSourceWithoutPublicURLWarns(t *testing.T) {
	cfg, err := config.Parse("w.yaml", []byte(baseConfig), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range cfg.Warnings {
		if strings.Contains(w.Error(), `source "crm"`) && strings.Contains(w.Error(), "public_url is not set") {
			found = true
		}
	}
	if !found {
		t.Fatalf("no public_url warning for the hubspot source: %v", cfg.Warnings)
	}
}

// A store whose write lock another process holds must still answer every
// request with 503 and Retry-After before the connection's write deadline:
// once, the first request got its 503 after 10 s and the next ones an empty,
// closed connection.
func TestLockedStoreAnswers503BeforeWriteDeadline(t *testing.T) {
	yaml := strings.Replace(baseConfig, "listen:", "receive: {write_timeout: 3s, commit_timeout: 1s, retry_after: 7s}\nlisten:", 1)
	var writeTimeout time.Duration
	r := newRig(t, yaml, func(s *http.Server) {
		writeTimeout = 3 * time.Second
		s.WriteTimeout = writeTimeout
	})
	// Another process's writer: a separate connection holding the write lock.
	other, err := sql.Open("sqlite", "file:"+r.path+"?_pragma=busy_timeout(100)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatalf("take the write lock: %v", err)
	}

	const n = 6
	type result struct {
		code       int
		retryAfter string
		err        error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			req := r.signed("app", fmt.Sprintf("locked_%d", i), swBody(fmt.Sprintf("locked_%d", i), "x"), nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				results <- result{err: err}
				return
			}
			defer resp.Body.Close()
			_, err = io.ReadAll(resp.Body)
			results <- result{code: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), err: err}
		}()
	}
	for range n {
		res := <-results
		if res.err != nil {
			t.Errorf("request failed without an answer: %v", res.err)
			continue
		}
		if res.code != http.StatusServiceUnavailable || res.retryAfter != "7" {
			t.Errorf("got %d Retry-After %q, want 503 with Retry-After 7", res.code, res.retryAfter)
		}
	}

	// Once the lock is gone the same events are accepted.
	if _, err := conn.ExecContext(context.Background(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	if code, body, _ := do(t, r.signed("app", "locked_0", swBody("locked_0", "x"), nil)); code != 200 {
		t.Fatalf("after the lock: got %d %s, want 200", code, body)
	}
}

func TestCommitTimeoutMustBeBelowWriteTimeout(t *testing.T) {
	yaml := strings.Replace(baseConfig, "listen:", "receive:\n  write_timeout: 5s\n  commit_timeout: 5s\nlisten:", 1)
	_, err := config.Parse("c.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "c.yaml:3:") || !strings.Contains(err.Error(), "must be below receive.write_timeout") {
		t.Fatalf("err = %v, want commit_timeout refused at its line", err)
	}
	cfg, err := config.Parse("c.yaml", []byte(strings.Replace(baseConfig, "listen:", "receive: {write_timeout: 4s}\nlisten:", 1)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Receive.CommitTimeout.D(); got != 2*time.Second {
		t.Fatalf("default commit_timeout with write_timeout 4s = %s, want 2s", got)
	}
}

// A delivery the store refuses for its values (a rule planted in the
// database stands in for a value no check foresaw) is the sender's
// problem, not the store's: 400, nothing stored, and a retry of the same
// bytes would never help. Other deliveries are stored as usual.
func TestStoreRefusalIsAClientError(t *testing.T) {
	r := newRig(t, baseConfig, nil)
	db, err := sql.Open("sqlite", "file:"+r.path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TRIGGER refuse BEFORE INSERT ON events WHEN NEW.event_id = 'msg_refused'
		BEGIN SELECT RAISE(ABORT, 'refused by rule'); END`); err != nil {
		t.Fatal(err)
	}
	code, body, hdr := do(t, r.signed("app", "msg_refused", swBody("msg_refused", "order.created"), nil))
	if code != 400 || !strings.Contains(body, "the store refused a value of this event") || hdr.Get("Retry-After") != "" {
		t.Fatalf("refused delivery: got %d %s (Retry-After %q), want 400 without Retry-After", code, body, hdr.Get("Retry-After"))
	}
	if code, body, _ := do(t, r.signed("app", "msg_ok", swBody("msg_ok", "order.created"), nil)); code != 200 {
		t.Fatalf("healthy delivery after it: %d %s", code, body)
	}
	if evs := r.events(); len(evs) != 1 || evs[0].EventID != "msg_ok" {
		t.Fatalf("stored %+v, want msg_ok alone", evs)
	}
}

// A refused webhook is a warning (someone sends with a wrong secret, or an
// attacker probes), and the URL is named only for the kinds that sign it:
// for the others it is noise that suggests the URL is the problem.
func TestRefusedWebhookLogNamesTheURLOnlyWhenSigned(t *testing.T) {
	r := newRig(t, baseConfig, nil)
	req, err := http.NewRequest("POST", r.srv.URL+"/hooks/app", strings.NewReader(`{"type":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Webhook-Id", "msg_1")
	req.Header.Set("Webhook-Timestamp", fmt.Sprint(t0.Unix()))
	req.Header.Set("Webhook-Signature", "v1,bm90IGEgc2lnbmF0dXJl")
	if code, body, _ := do(t, req); code != 401 {
		t.Fatalf("bad signature: %d %s, want 401", code, body)
	}
	logs := r.logs.String()
	if !strings.Contains(logs, `level=WARN msg="webhook refused" source=app`) {
		t.Errorf("refusal not logged at WARN: %s", logs)
	}
	if strings.Contains(logs, "signed_url=") || strings.Contains(logs, "url_from=") {
		t.Errorf("refusal of a kind that does not sign the URL names the URL: %s", logs)
	}
}
