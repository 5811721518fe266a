package demo

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Rules read back as they were written, and every mistake names its key.
func TestParseRule(t *testing.T) {
	for _, s := range []string{
		"path=/orders/ord_2 status=422",
		"body.customer.id=cus_9 status=503 times=2",
		"method=PUT path=/crm/deals/* status=410",
		"status=500",
	} {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatalf("%q: %v", s, err)
		}
		if r.String() != s {
			t.Errorf("%q reads back as %q", s, r.String())
		}
	}
	for s, want := range map[string]string{
		"":                           "status is missing",
		"path=/x":                    "status is missing",
		"path=x status=422":          `path "x": want a path starting with /`,
		"path=/[ status=422":         `path "/["`,
		"status=200":                 `status "200": want a failing HTTP status, 400 to 599`,
		"status=abc":                 `status "abc"`,
		"status=422 times=0":         `times "0": want a positive number`,
		"colour=red status=422":      `unknown key "colour"`,
		"path=/a path=/b status=422": "path is given twice",
		"body.=x status=422":         `"body.": want body.FIELD`,
		"body.a..b=x status=422":     `want body.FIELD`,
		"path status=422":            `"path": want key=value`,
	} {
		if _, err := ParseRule(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", s, err, want)
		}
	}
}

// syncBuffer is a bytes.Buffer the server's goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The dev destination answers 200 to every call no rule matches, the
// first matching rule's status to the others (only the first N with
// times=N), and records and prints each call with its control
// characters escaped.
func TestDevDestinationRules(t *testing.T) {
	var rules []*Rule
	for _, s := range []string{"path=/orders/ord_2 status=422", "body.customer.id=cus_9 status=503 times=2", "method=DELETE status=410", "body.tag=\x7f status=418"} {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	at := time.Date(2026, 12, 3, 9, 30, 0, 0, time.UTC)
	d := StartDevDestination(ln, DevOptions{Rules: rules, Out: out, Now: func() time.Time { return at }})
	defer d.Close()
	for i, c := range []struct {
		method, path, body string
		want               int
	}{
		{"POST", "/orders/ord_1", `{"order":"ord_1"}`, 200},
		{"POST", "/orders/ord_2", `{"order":"ord_2"}`, 422},
		{"PUT", "/crm", `{"customer":{"id":"cus_9"}}`, 503},
		{"PUT", "/crm", `{"customer":{"id":"cus_9"}}`, 503},
		{"PUT", "/crm", `{"customer":{"id":"cus_9"}}`, 200}, // times=2 spent
		{"PUT", "/crm", `{"customer":{"id":42}}`, 200},
		{"PUT", "/crm", "not json", 200},
		{"DELETE", "/orders/ord_1", "", 410},
		{"GET", "/anything?q=1", "", 200},
		{"POST", "/echo", "\x1b[2Jhidden", 200},
		{"POST", "/tagged", `{"tag":"\u007f"}`, 418}, // the answer naming the rule is still JSON
	} {
		req, _ := http.NewRequest(c.method, d.URL()+c.path, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer s3cret")
		req.Header.Set("Webhook-Id", "msg_1")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var answer map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&answer)
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("call %d %s %s: %d, want %d", i+1, c.method, c.path, resp.StatusCode, c.want)
		}
		if c.want == 200 && answer["call"] != float64(i+1) {
			t.Errorf("call %d answered %v, want its number", i+1, answer)
		}
		if msg, _ := answer["error"].(string); c.want != 200 && !strings.Contains(msg, "rule") {
			t.Errorf("call %d failed without naming the rule: %v", i+1, answer)
		}
	}
	resp, err := http.Get(d.URL() + CallsPath)
	if err != nil {
		t.Fatal(err)
	}
	var listed struct{ Calls []Call }
	if err := json.NewDecoder(resp.Body).Decode(&listed); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if len(listed.Calls) != 11 || listed.Calls[1].Status != 422 || listed.Calls[1].Rule != "path=/orders/ord_2 status=422" ||
		listed.Calls[8].Query != "q=1" || listed.Calls[0].Headers["Webhook-Id"] != "msg_1" || listed.Calls[0].Headers["Authorization"] != "[redacted]" || listed.Calls[0].Body != `{"order":"ord_1"}` || !listed.Calls[0].At.Equal(at) {
		t.Fatalf("calls listed: %+v", listed.Calls)
	}
	log := out.String()
	for _, want := range []string{
		"09:30:00 #2 POST /orders/ord_2 -> 422 (path=/orders/ord_2 status=422) {\"order\":\"ord_2\"}\n",
		"#9 GET /anything?q=1 -> 200\n",
		`#10 POST /echo -> 200 \x1b[2Jhidden`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, "\x1b") {
		t.Errorf("a control character reached the terminal")
	}
}

// The demo's scripted destination keeps its script: a call no rule
// matches that the script does not know is a 404, not the dev mode's 200.
func TestScriptedDestinationIsNotDevMode(t *testing.T) {
	d, err := startDestination()
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	resp, err := http.Post(d.URL()+"/nowhere", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || len(d.Recorded()) != 1 || d.Recorded()[0].Status != 404 {
		t.Fatalf("status %d, recorded %+v", resp.StatusCode, d.Recorded())
	}
}
