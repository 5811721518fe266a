package server

import (
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
