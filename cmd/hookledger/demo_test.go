package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/cookiejar"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/store"
)

// The whole demo, in-process through the command line: the script plays
// to its end, the printed one-time link logs a browser in, every
// disposition and each of the nine signals has something to show, and
// Ctrl-C stops it with exit 0.
func TestDemoPlaysTheDossier(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "demo")
	var out, errb lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	exit := make(chan int, 1)
	go func() {
		exit <- Main(ctx, []string{"demo", "--listen", "127.0.0.1:0", "--dir", dir, "--speed", "20", "--no-open"},
			&Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" },
				LookupEnv: func(string) (string, bool) { return "", false }})
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(out.String(), "press Ctrl-C") {
		select {
		case code := <-exit:
			t.Fatalf("demo ended with %d before serving:\n%s\nstderr:\n%s", code, out.String(), errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the script did not finish within a minute:\n%s", out.String())
		}
		time.Sleep(20 * time.Millisecond) // waiting for the demo's output, not measuring time
	}
	text := out.String()
	for _, want := range []string{"applied; notify_created done", "stale;", "lookup found the contact",
		"Retry-After: 1s", "dead (permanent)", "dead (hidden_failure)", "loop_blocked", "resolved with a note",
		"unrouted", "The nine outcome signals"} {
		if !strings.Contains(text, want) {
			t.Errorf("the demo's output lacks %q:\n%s", want, text)
		}
	}
	pick := func(re string) string {
		m := regexp.MustCompile(re).FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no %s in:\n%s", re, text)
		}
		return m[1]
	}
	link := pick(`Log in once: (\S+)`)
	token := pick(`Admin token: (\S+)`)
	base := strings.TrimSuffix(pick(`Console:\s+(\S+)`), "/")

	// The link logs a browser in: a session cookie, then the overview.
	jar, _ := cookiejar.New(nil)
	browser := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	resp, err := browser.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/" {
		t.Fatalf("the login link led to %d at %s, want the overview", resp.StatusCode, resp.Request.URL)
	}
	if len(jar.Cookies(resp.Request.URL)) == 0 {
		t.Fatal("no session cookie after the login link")
	}
	resp, err = browser.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/" {
		t.Fatalf("GET / with the session: %d at %s", resp.StatusCode, resp.Request.URL)
	}

	apiGet := func(path string, v any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, resp.StatusCode)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	seen := map[string]int{}
	for cursor := ""; ; {
		var page struct {
			Events []struct {
				Disposition string `json:"disposition"`
			} `json:"events"`
			NextCursor string `json:"next_cursor"`
		}
		apiGet("/api/v1/events?limit=100&cursor="+cursor, &page)
		for _, e := range page.Events {
			seen[e.Disposition]++
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	// superseded is not listed: no flow of the demo makes an event
	// superseded (effects are, by newer versions).
	for _, d := range []store.Disposition{store.DispositionApplied, store.DispositionDuplicate, store.DispositionStale,
		store.DispositionUnrouted, store.DispositionDeadLettered, store.DispositionResolved, store.DispositionAccepted} {
		if seen[string(d)] == 0 {
			t.Errorf("no %s event after the demo (seen %v)", d, seen)
		}
	}
	// The exception queue lists every dead-lettered event beside the dead
	// effects, each with why, what to do and whose it is.
	var queue api.ExceptionListJSON
	apiGet("/api/v1/exceptions?limit=1000", &queue)
	kinds := map[string]int{}
	for _, x := range queue.Exceptions {
		kinds[x.Kind]++
		if x.Reason == "" || x.Repair == "" {
			t.Errorf("exception without a reason or a repair: %+v", x)
		}
		if x.Kind == "event" && x.Owner != "team-orders" && slices.Contains(x.Flows, "orders") {
			t.Errorf("an event the orders flow dead-lettered is not team-orders': %+v", x)
		}
		if x.Kind == "effect" && x.Destination == "warehouse" && x.Owner != "team-data" {
			t.Errorf("a warehouse effect is not team-data's: %+v", x)
		}
	}
	if kinds["event"] != seen[string(store.DispositionDeadLettered)] || kinds["effect"] == 0 {
		t.Errorf("the exception queue holds %v, want every one of the %d dead-lettered events and the dead effects",
			kinds, seen[string(store.DispositionDeadLettered)])
	}
	var sig struct {
		Signals []struct {
			Name  string `json:"name"`
			Value int64  `json:"value"`
		} `json:"signals"`
	}
	apiGet("/api/v1/signals", &sig)
	if len(sig.Signals) != len(store.SignalNames()) {
		t.Fatalf("signals %+v, want the nine", sig.Signals)
	}
	for _, s := range sig.Signals {
		if s.Value == 0 {
			t.Errorf("signal %s is 0 after the demo", s.Name)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "hookledger.db")); err != nil {
		t.Errorf("--dir holds no store: %v", err)
	}

	cancel()
	select {
	case code := <-exit:
		if code != exitOK {
			t.Fatalf("demo exit %d after Ctrl-C, want 0; stderr:\n%s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not stop within 30s of Ctrl-C")
	}
	if !strings.HasSuffix(out.String(), "stopped\n") {
		t.Errorf("the demo's last line is not 'stopped':\n%s", out.String())
	}
}

// An address in use is reported with the address, exit 1, before anything
// starts.
func TestDemoPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	code, out, errOut := run(t, "", nil, "demo", "--listen", addr, "--no-open")
	if code != exitFail || !strings.Contains(errOut, "cannot listen on "+addr) || !strings.Contains(errOut, "--listen 127.0.0.1:0") {
		t.Fatalf("demo on a used port: exit %d, stderr %q, want 1 naming %s", code, errOut, addr)
	}
	if out != "" {
		t.Errorf("demo on a used port printed %q", out)
	}
}

func TestDemoUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--speed", "0"},
		{"demo", "--speed", "fast"},
		{"demo", "extra"},
	} {
		if code, _, _ := run(t, "", nil, args...); code != exitUsage {
			t.Errorf("hookledger %v: exit %d, want 2", args, code)
		}
	}
	code, out, _ := run(t, "", nil, "demo", "--help")
	if code != exitOK || !strings.Contains(out, "--speed") || !strings.Contains(out, "Ctrl-C") {
		t.Errorf("demo --help: %d %s", code, out)
	}
}

// The script's event ids are fixed, so a directory that holds a store
// from an earlier run is refused rather than replayed into duplicates.
func TestDemoRefusesAUsedDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hookledger.db"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "", nil, "demo", "--listen", "127.0.0.1:0", "--dir", dir, "--no-open")
	if code != exitFail || !strings.Contains(errOut, "already holds a demo store") {
		t.Fatalf("demo on a used dir: exit %d, stderr %q", code, errOut)
	}
}
