package api_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/authlimit"
	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// lockedBuffer is a log sink the server's goroutines write to while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type guessRig struct {
	h    *api.Handler
	srv  *httptest.Server
	clk  *clock.Fake
	logs *lockedBuffer
}

func newGuessRig(t *testing.T) *guessRig {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "api.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	g := &guessRig{clk: clock.NewFake(t0), logs: &lockedBuffer{}}
	g.h = api.New(st, token, slog.New(slog.NewTextHandler(g.logs, nil)), g.clk.Now)
	g.srv = httptest.NewServer(openapitest.Wrap(t, g.h))
	t.Cleanup(g.srv.Close)
	return g
}

// from is an HTTP client whose connections come from the loopback
// address ip (all of 127.0.0.0/8 is loopback on Linux).
func from(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// call sends GET path with the bearer token tok (none when empty) and
// the headers hdr, and returns the status and Retry-After.
func (g *guessRig) call(t *testing.T, c *http.Client, path, tok string, hdr ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", g.srv.URL+path, nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After")
}

// Ten wrong bearer tokens from one address are each answered 401 and
// logged with the address and path, never the token; then that address is
// answered 429 with Retry-After, the right token too, until the minute
// has passed. The operator's right token from another address is never
// affected.
func TestWrongTokensLimitedPerAddress(t *testing.T) {
	g := newGuessRig(t)
	guesser, operator := from(t, "127.0.0.2"), from(t, "127.0.0.3")
	const guess = "guessed-secret-Zq8"
	for i := range authlimit.DefaultTries {
		tok := guess
		if i == 0 {
			tok = "" // a missing token counts as a wrong one
		}
		if code, _ := g.call(t, guesser, "/api/v1/events", tok); code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, code)
		}
		g.clk.Advance(time.Second)
	}
	logs := g.logs.String()
	if n := strings.Count(logs, "level=WARN msg=\"admin API: refused a missing or wrong bearer token\" client=127.0.0.2 method=GET path=/api/v1/events"); n != authlimit.DefaultTries {
		t.Errorf("%d warnings naming the client and path, want %d:\n%s", n, authlimit.DefaultTries, logs)
	}
	if !strings.Contains(logs, "client=127.0.0.2 tries=10 locked_for=51s") {
		t.Errorf("the lock-out is not logged with its address:\n%s", logs)
	}
	if strings.Contains(logs, "Zq8") || strings.Contains(logs, "guessed") || strings.Contains(logs, token) {
		t.Errorf("a token reached the log:\n%s", logs)
	}

	if code, ra := g.call(t, guesser, "/api/v1/events", token); code != http.StatusTooManyRequests || ra != "50" {
		t.Fatalf("right token from the locked address: %d Retry-After %q, want 429 and 50", code, ra)
	}
	if code, _ := g.call(t, operator, "/api/v1/events", token); code != http.StatusOK {
		t.Fatalf("right token from another address: %d, want 200", code)
	}
	if code, _ := g.call(t, operator, "/api/v1/events", "typo"); code != http.StatusUnauthorized {
		t.Fatalf("one wrong token from the operator's address: %d, want 401", code)
	}
	g.clk.Advance(49*time.Second + 500*time.Millisecond)
	if code, ra := g.call(t, guesser, "/api/v1/audit", guess); code != http.StatusTooManyRequests || ra != "1" {
		t.Fatalf("half a second before the window ends: %d Retry-After %q, want 429 and 1", code, ra)
	}
	if strings.Contains(g.logs.String(), "path=/api/v1/audit") {
		t.Errorf("a request refused with 429 was logged: each lock-out is logged once")
	}
	g.clk.Advance(500 * time.Millisecond)
	if code, _ := g.call(t, guesser, "/api/v1/events", token); code != http.StatusOK {
		t.Fatalf("right token once the window has passed: %d, want 200", code)
	}
}

// Behind a reverse proxy listed in receive.trusted_proxies, the client
// named in X-Forwarded-For is counted, not the proxy: a guesser behind the
// proxy does not lock out the operator behind the same proxy, and cannot
// escape its count by naming another address itself.
func TestWrongTokensCountedPerClientBehindTrustedProxy(t *testing.T) {
	g := newGuessRig(t)
	g.h.LimitGuesses(authlimit.New(authlimit.Options{Now: g.clk.Now,
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}))
	proxy := from(t, "127.0.0.1")
	for range authlimit.DefaultTries {
		// The guesser writes its own X-Forwarded-For; the proxy appends
		// the address it saw.
		if code, _ := g.call(t, proxy, "/api/v1/events", "guess", "X-Forwarded-For", "192.0.2.77, 198.51.100.9"); code != http.StatusUnauthorized {
			t.Fatalf("wrong token through the proxy: %d, want 401", code)
		}
	}
	if code, _ := g.call(t, proxy, "/api/v1/events", token, "X-Forwarded-For", "192.0.2.78, 198.51.100.9"); code != http.StatusTooManyRequests {
		t.Fatalf("the guesser naming another address: %d, want 429", code)
	}
	if code, _ := g.call(t, proxy, "/api/v1/events", token, "X-Forwarded-For", "198.51.100.10"); code != http.StatusOK {
		t.Fatalf("the operator behind the same proxy: %d, want 200", code)
	}
	if !strings.Contains(g.logs.String(), "client=198.51.100.9 ") {
		t.Errorf("the log does not name the forwarded client:\n%s", g.logs.String())
	}
	// A peer that is not a trusted proxy names nobody.
	direct := from(t, "127.0.0.4")
	for range authlimit.DefaultTries {
		g.call(t, direct, "/api/v1/events", "guess", "X-Forwarded-For", "203.0.113.1")
	}
	if code, _ := g.call(t, direct, "/api/v1/events", token, "X-Forwarded-For", "203.0.113.2"); code != http.StatusTooManyRequests {
		t.Fatalf("an untrusted peer escaped its count with X-Forwarded-For: %d, want 429", code)
	}
}

// With the API off (no admin.token) nothing can be guessed: every request
// is 401 and nothing is counted or logged.
func TestNoTokenNothingCounted(t *testing.T) {
	logs := &lockedBuffer{}
	h := api.New(nil, "", slog.New(slog.NewTextHandler(logs, nil)), time.Now)
	for range 3 * authlimit.DefaultTries {
		rec := httptest.NewRecorder()
		openapitest.Wrap(t, h).ServeHTTP(rec, httptest.NewRequest("GET", "/api/v1/events", nil))
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("API off: %d, want 401", rec.Code)
		}
	}
	if logs.String() != "" {
		t.Errorf("the API off logged: %s", logs.String())
	}
}
