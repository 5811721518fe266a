package main

import (
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var devDestURLRe = regexp.MustCompile(`dev-destination listening on (http://\S+)`)

// dev-destination prints its URL, answers 200 to calls no rule matches
// and a rule's status to the calls it matches, prints each call, and
// stops with exit 0.
func TestDevDestinationServesAndFailsOnCue(t *testing.T) {
	out, errOut, stop := startVerb(t, nil, "dev-destination", "--listen", "127.0.0.1:0",
		"--fail", "path=/orders/ord_2 status=422", "--fail", "body.customer=cus_unknown status=503 times=1")
	var url string
	waitUntil(t, "the URL", func() bool {
		m := devDestURLRe.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	post := func(path, body string) (int, string) {
		t.Helper()
		resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := post("/orders/ord_1", `{"order":"ord_1"}`); code != 200 || body != `{"ok":true,"call":1}` {
		t.Errorf("ord_1: %d %s", code, body)
	}
	if code, body := post("/orders/ord_2", `{"order":"ord_2"}`); code != 422 || !strings.Contains(body, "path=/orders/ord_2 status=422") {
		t.Errorf("ord_2: %d %s, want 422 naming the rule", code, body)
	}
	if code, _ := post("/crm", `{"customer":"cus_unknown"}`); code != 503 {
		t.Errorf("first cus_unknown call: %d, want 503", code)
	}
	if code, _ := post("/crm", `{"customer":"cus_unknown"}`); code != 200 {
		t.Errorf("second cus_unknown call: %d, want 200 (times=1)", code)
	}
	if code := stop(); code != exitOK {
		t.Fatalf("exit %d after stop, want 0; stderr %s", code, errOut)
	}
	s := out.String()
	for _, want := range []string{"rule 1: path=/orders/ord_2 status=422", "#1 POST /orders/ord_1 -> 200 ",
		"#2 POST /orders/ord_2 -> 422 (path=/orders/ord_2 status=422)", "#4 POST /crm -> 200 ", "stopped"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
}

// Bad rules, arguments and addresses are refused with the flag and the
// key at fault.
func TestDevDestinationErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--fail", "path=/x"}, exitUsage, `--fail "path=/x": status is missing`},
		{[]string{"--fail", "path=/x status=201"}, exitUsage, `status "201": want a failing HTTP status, 400 to 599`},
		{[]string{"--fail", "colour=red status=500"}, exitUsage, `unknown key "colour"`},
		{[]string{"path=/x", "status=422"}, exitUsage, `unexpected argument "path=/x" (a rule goes after --fail, quoted)`},
		{[]string{"--listen", "nonsense"}, exitFail, "cannot listen on nonsense"},
	} {
		code, _, errOut := run(t, "", nil, append([]string{"dev-destination"}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", c.args, code, errOut, c.code, c.want)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	code, _, errOut := run(t, "", nil, "dev-destination", "--listen", ln.Addr().String())
	if code != exitFail || !strings.Contains(errOut, "--listen 127.0.0.1:0 for a free port") {
		t.Errorf("address in use: exit %d, stderr %q", code, errOut)
	}
}
