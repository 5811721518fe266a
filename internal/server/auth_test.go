package server

import (
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// from is an HTTP client whose connections come from the loopback
// address ip (all of 127.0.0.0/8 is loopback on Linux); it does not
// follow redirects.
func from(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func send(t *testing.T, c *http.Client, req *http.Request) *http.Response {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	resp.Body.Close()
	return resp
}

// The admin API and the console share one count of wrong admin tokens
// per client: five wrong bearer tokens and five wrong logins from one
// address lock it out of both, while the right token from another address
// still works on both.
func TestWrongAdminTokensShareOneCountPerClient(t *testing.T) {
	h := start(t, sqliteURL(t))
	guesser, operator := from(t, "127.0.0.2"), from(t, "127.0.0.3")
	apiReq := func(tok string) *http.Request {
		req, _ := http.NewRequest("GET", h.base+"/api/v1/events", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		return req
	}
	loginReq := func(tok string) *http.Request {
		req, _ := http.NewRequest("POST", h.base+"/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return req
	}
	for range 5 {
		if resp := send(t, guesser, apiReq("guess")); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong bearer token: %d, want 401", resp.StatusCode)
		}
		if resp := send(t, guesser, loginReq("guess")); resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("wrong login: %d, want 401", resp.StatusCode)
		}
	}
	if resp := send(t, guesser, apiReq(adminToken)); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" {
		t.Errorf("API from the guesser's address: %d Retry-After %q, want 429 and 60", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if resp := send(t, guesser, loginReq(adminToken)); resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("login from the guesser's address: %d, want 429", resp.StatusCode)
	}
	if resp := send(t, operator, apiReq(adminToken)); resp.StatusCode != http.StatusOK {
		t.Errorf("API from another address: %d, want 200", resp.StatusCode)
	}
	if resp := send(t, operator, loginReq(adminToken)); resp.StatusCode != http.StatusSeeOther {
		t.Errorf("login from another address: %d, want 303", resp.StatusCode)
	}
	if logs := h.logs.String(); strings.Contains(logs, "guess") || strings.Contains(logs, adminToken) {
		t.Errorf("a token reached the log:\n%s", logs)
	}
}

// metricsConfig is the test config with a metrics block.
func metricsConfig(t *testing.T, block string) string {
	return testConfig(sqliteURL(t)) + block
}

// getMetrics reads base+/metrics with the bearer token tok (none when
// empty) and says whether the body is the Prometheus exposition.
func getMetrics(t *testing.T, base, tok string) (int, bool) {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/metrics", nil)
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s/metrics: %v", base, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.Contains(string(b), "hookledger_receive_requests_total") || strings.Contains(string(b), "# TYPE go_goroutines")
}

// /metrics answers as metrics: says: open on the main listener by
// default; behind admin.token with auth: token; on its own listener only
// with listen:, and there behind the token too when both are set.
func TestMetricsServedAsConfigured(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		h := startWith(t, metricsConfig(t, ""))
		if code, ok := getMetrics(t, h.base, ""); code != 200 || !ok {
			t.Errorf("/metrics without a token: %d, want 200 and the metrics", code)
		}
	})
	t.Run("auth token", func(t *testing.T) {
		h := startWith(t, metricsConfig(t, "metrics:\n  auth: token\n"))
		if code, ok := getMetrics(t, h.base, ""); code != http.StatusUnauthorized || ok {
			t.Errorf("/metrics without a token: %d, want 401 and no metrics", code)
		}
		if code, ok := getMetrics(t, h.base, "wrong"); code != http.StatusUnauthorized || ok {
			t.Errorf("/metrics with a wrong token: %d, want 401", code)
		}
		if code, ok := getMetrics(t, h.base, adminToken); code != 200 || !ok {
			t.Errorf("/metrics with the token: %d, want 200 and the metrics", code)
		}
		if !strings.Contains(h.logs.String(), `msg="metrics: refused a missing or wrong bearer token" client=127.0.0.1 method=GET path=/metrics`) {
			t.Errorf("the refused scrape is not logged:\n%s", h.logs.String())
		}
	})
	t.Run("own listener", func(t *testing.T) {
		h, maddr := startMetrics(t, metricsConfig(t, "metrics:\n  listen: 127.0.0.1:0\n"))
		if code, ok := getMetrics(t, h.base, adminToken); code != http.StatusNotFound || ok {
			t.Errorf("/metrics on the main listener: %d, want 404", code)
		}
		if code, ok := getMetrics(t, "http://"+maddr, ""); code != 200 || !ok {
			t.Errorf("/metrics on its own listener: %d, want 200 and the metrics", code)
		}
		for _, path := range []string{"/api/v1/events", "/", "/healthz", "/login"} {
			if code, _ := h.getAt("http://"+maddr, path, adminToken); code != http.StatusNotFound {
				t.Errorf("%s on the metrics listener: %d, want 404", path, code)
			}
		}
	})
	t.Run("own listener with token", func(t *testing.T) {
		_, maddr := startMetrics(t, metricsConfig(t, "metrics:\n  listen: 127.0.0.1:0\n  auth: token\n"))
		if code, _ := getMetrics(t, "http://"+maddr, ""); code != http.StatusUnauthorized {
			t.Errorf("/metrics on its own listener without a token: %d, want 401", code)
		}
		if code, ok := getMetrics(t, "http://"+maddr, adminToken); code != 200 || !ok {
			t.Errorf("/metrics on its own listener with the token: %d, want 200", code)
		}
	})
}

// startMetrics starts a server whose config has metrics.listen and
// returns it with the metrics listener's address.
func startMetrics(t *testing.T, yaml string) (*harness, string) {
	t.Helper()
	h := startWith(t, yaml)
	addr := h.srv.MetricsAddr()
	if addr == "" {
		t.Fatal("no metrics listener")
	}
	return h, addr
}

// getAt is get on another base URL, another listener than the admin
// API's: its answers are not the OpenAPI document's.
func (h *harness) getAt(base, path, token string) (int, []byte) {
	h.t.Helper()
	saved, savedClient := h.base, h.client
	defer func() { h.base, h.client = saved, savedClient }()
	h.base, h.client = base, http.DefaultClient
	return h.get(path, token)
}
