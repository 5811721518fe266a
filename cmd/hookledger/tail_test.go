package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/server"
)

// lockedBuffer is written by a verb running in another goroutine.
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

// startVerb runs a verb in the background until stop, which returns its
// exit code.
func startVerb(t *testing.T, env map[string]string, args ...string) (stdout, stderr *lockedBuffer, stop func() int) {
	t.Helper()
	stdout, stderr = &lockedBuffer{}, &lockedBuffer{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- Main(ctx, args, &Env{
			Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr,
			Getenv:    func(k string) string { return env[k] },
			LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok },
			Transport: openapitest.Transport(t, nil),
		})
	}()
	var code *int
	stop = func() int {
		if code == nil {
			cancel()
			c := <-done
			code = &c
		}
		return *code
	}
	t.Cleanup(func() { stop() })
	return stdout, stderr, stop
}

func TestTailFollowsEventsAndEffects(t *testing.T) {
	cfgPath, _ := writeOperatorConfig(t)
	base := startServer(t, cfgPath, serverSecrets)
	sendSigned(t, cfgPath, base, "before", `"order_id":"o0","rev":1`)
	waitDisposition(t, base, "before", "applied")
	env := map[string]string{adminTokenVar: "admin-tok"}

	out, errOut, stop := startVerb(t, env, "tail", "--server", base, "--interval", "5ms", "--last", "1")
	waitUntil(t, "tail to start", func() bool { return strings.Contains(errOut.String(), "following events and effects at "+base) })
	// --last 1 printed the newest stored event and effect.
	if s := out.String(); !tailLine(s, "event   shop/before  order.updated  ", "  applied") || !strings.Contains(s, "orders:o0:r1:sync") {
		t.Fatalf("tail --last 1 printed %q", s)
	}
	// An event id with a right-to-left override in it (the receiver takes
	// it: it is no control character) is printed escaped, so it cannot
	// make the line read backwards.
	sendSigned(t, cfgPath, base, "e1\u202edeliaf", `"order_id":"o1","rev":1`)
	waitUntil(t, "the event to be applied on tail", func() bool {
		return tailLine(out.String(), `event   shop/e1\u202edeliaf  order.updated  `, "  applied")
	})
	waitUntil(t, "the new effect on tail", func() bool { return strings.Contains(out.String(), "orders:o1:r1:sync") })
	if code := stop(); code != 0 {
		t.Fatalf("tail stopped with %d; stderr %q", code, errOut.String())
	}
	if s := out.String(); strings.Contains(s, "\u202e") || strings.Count(s, "shop/before") != 1 {
		t.Fatalf("tail output %q: want no raw override, and the event from before printed once", s)
	}

	// Filters: another source's events are not shown, a state is only
	// shown when reached.
	out, errOut, stop = startVerb(t, env, "tail", "--server", base, "--interval", "5ms", "--events", "--source", "other")
	out2, errOut2, stop2 := startVerb(t, env, "tail", "--server", base, "--interval", "5ms", "--events", "--disposition", "applied")
	out3, errOut3, stop3 := startVerb(t, env, "tail", "--server", base, "--interval", "5ms", "--effects", "--source", "shop")
	waitUntil(t, "the tails to start", func() bool {
		return strings.Contains(errOut.String(), "following events at") && strings.Contains(errOut2.String(), "following events at") &&
			strings.Contains(errOut3.String(), "following effects at")
	})
	sendSigned(t, cfgPath, base, "e2", `"order_id":"o2","rev":1`)
	waitUntil(t, "e2 applied on the --disposition tail", func() bool { return tailLine(out2.String(), "shop/e2  order.updated  ", "  applied") })
	waitUntil(t, "e2's effect on the --effects --source tail", func() bool { return strings.Contains(out3.String(), "orders:o2:r1:sync") })
	stop()
	stop2()
	stop3()
	if s := out3.String(); strings.Contains(s, "event ") {
		t.Errorf("tail --effects printed events: %q", s)
	}
	if s := out.String(); s != "" {
		t.Errorf("tail --source other printed %q", s)
	}
	if s := out2.String(); strings.Contains(s, "accepted") || strings.Contains(s, "effect") {
		t.Errorf("tail --events --disposition applied printed %q", s)
	}
}

// tailLine reports whether a line of out holds prefix and ends with
// suffix; the entity between them is the envelope's or, where the server
// shows it, the flow's.
func tailLine(out, prefix, suffix string) bool {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, prefix) && strings.HasSuffix(l, suffix) {
			return true
		}
	}
	return false
}

func TestTailErrors(t *testing.T) {
	// A server that refuses a filter: its message is shown as it is.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"type: unknown parameter; known: source, event_id, cursor, limit"}` + "\n"))
	}))
	defer api.Close()
	env := map[string]string{adminTokenVar: "tok"}
	code, _, errOut := run(t, "", env, "tail", "--server", api.URL, "--type", "invoice.paid")
	if code != 2 || !strings.Contains(errOut, "the server answered 400: type: unknown parameter; known: source, event_id, cursor, limit") {
		t.Errorf("refused filter: %d %q", code, errOut)
	}
	code, _, errOut = run(t, "", env, "tail", "--server", "http://127.0.0.1:1")
	if code != 1 || !strings.Contains(errOut, "cannot reach http://127.0.0.1:1") {
		t.Errorf("no server: %d %q", code, errOut)
	}
	for _, args := range [][]string{
		{"tail", "--events", "--effects"},
		{"tail", "extra"},
		{"tail", "--interval", "0s"},
		{"tail", "--server", "ftp://x"},
		{"tail", "--server", "http://u:p@127.0.0.1:1"},
	} {
		if code, _, errOut := run(t, "", env, args...); code != 2 {
			t.Errorf("%v: %d %q, want 2", args, code, errOut)
		}
	}
	// No token anywhere: a usage error that names the variable.
	if code, _, errOut := run(t, "", nil, "tail", "--server", api.URL, "--config", writeFile(t, "h.yaml", "listen: 127.0.0.1:1\n")); code != 2 || !strings.Contains(errOut, adminTokenVar) {
		t.Errorf("no token: %d %q", code, errOut)
	}
}

// position follows a list whose last page carries no cursor, as the admin
// API's lists do, without printing a row twice or missing one.
func TestPositionFollowsAList(t *testing.T) {
	var rows []int
	list := func(_ context.Context, cursor string, limit int) ([]int, string, error) {
		after := 0
		if cursor != "" {
			after, _ = strconv.Atoi(cursor)
		}
		var page []int
		for _, r := range rows {
			if r > after {
				page = append(page, r)
			}
		}
		if len(page) > limit {
			page = page[:limit]
			return page, strconv.Itoa(page[limit-1]), nil
		}
		return page, "", nil
	}
	var seen []int
	var p position[int]
	add := func(n int) {
		for i := 0; i < n; i++ {
			rows = append(rows, len(rows)+1)
		}
	}
	for _, n := range []int{0, 3, 0, 2, 2500, 1, 0} {
		add(n)
		if err := p.next(context.Background(), list, func(r int) { seen = append(seen, r) }); err != nil {
			t.Fatal(err)
		}
		if len(seen) != len(rows) {
			t.Fatalf("after adding %d: saw %d rows of %d", n, len(seen), len(rows))
		}
		for i, r := range seen {
			if r != i+1 {
				t.Fatalf("row %d seen as %d", i+1, r)
			}
		}
		if p.skip > 1 {
			t.Fatalf("position %+v: more than one row counted past the cursor", p)
		}
	}
}

// startServerClock is startServer with the server telling time by clk.
func startServerClock(t *testing.T, cfgPath string, lookup map[string]string, clk clock.Clock) string {
	t.Helper()
	cfg, err := config.Load(cfgPath, func(k string) (string, bool) { v, ok := lookup[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	ln, base := listenLocal(t)
	srv := server.New(cfg, server.Options{Listener: ln, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	select {
	case <-srv.Ready():
	case err := <-done:
		cancel()
		t.Fatalf("server did not start: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server stopped with %v", err)
		}
	})
	return base
}

// tail follows a dead effect until it is final, printing its retry and
// its resolution, and stamps every line, --last's backlog too, with the
// time the store recorded for the change, never the time tail printed it.
func TestTailFollowsRepairsWithStoredTimes(t *testing.T) {
	tf := startTailFixture(t)
	refuse, cfgPath, t0, clk, base, r := tf.refuse, tf.cfgPath, tf.t0, tf.clk, tf.base, tf.r
	sendSigned(t, cfgPath, base, "a", `"order_id":"oa","rev":1`)
	sendSigned(t, cfgPath, base, "b", `"order_id":"ob","rev":1`)
	sendSigned(t, cfgPath, base, "c", `"rev":1`) // no order id: dead-lettered
	waitDisposition(t, base, "c", "dead_lettered")
	var dead struct{ Effects []api.EffectJSON }
	dead.Effects = waitDeadEffects(t, r, 2)
	ids := map[string]int64{}
	for _, e := range dead.Effects {
		ids[e.Entity] = e.ID
	}

	clk.Set(t0.Add(time.Hour)) // tail starts an hour later: its backlog keeps the stored times
	out, errOut, stop := startVerb(t, map[string]string{adminTokenVar: "admin-tok"}, "tail", "--server", base, "--interval", "5ms", "--last", "3")
	waitUntil(t, "tail to start", func() bool { return strings.Contains(errOut.String(), "following events and effects") })
	for _, want := range []string{
		"2026-01-02T03:04:05Z  event   shop/a  order.updated  oa  applied",
		"2026-01-02T03:04:05Z  event   shop/c  order.updated  -  dead_lettered",
		fmt.Sprintf("2026-01-02T03:04:05Z  effect  %d  orders:oa:r1:sync  crm  dead  permanent: HTTP 422", ids["oa"]),
		fmt.Sprintf("2026-01-02T03:04:05Z  effect  %d  orders:ob:r1:sync  crm  dead  permanent: HTTP 422", ids["ob"]),
	} {
		if !strings.Contains(out.String(), want+"\n") {
			t.Fatalf("tail --last 3 printed\n%s\nwant the line %q", out, want)
		}
	}

	// An operator's retry of a dead effect, which now succeeds.
	refuse.Store(false)
	clk.Set(t0.Add(2 * time.Hour))
	operate := func(id int64, action, note string) {
		t.Helper()
		body := map[string]string{"note": note}
		if err := r.call(context.Background(), http.MethodPost, fmt.Sprintf("/api/v1/effects/%d/%s", id, action), nil, body, nil); err != nil {
			t.Fatalf("%s effect %d: %v", action, id, err)
		}
	}
	operate(ids["oa"], "retry", "fixed the CRM's field")
	// tail may or may not see the effect approved before it is done; the
	// first line after dead says an operator retried it.
	retried := fmt.Sprintf("2026-01-02T05:04:05Z  effect  %d  orders:oa:r1:sync  crm  ", ids["oa"])
	waitUntil(t, "the retried effect done on tail", func() bool {
		return tailLine(out.String(), retried, "  done") || tailLine(out.String(), retried, "  done  retried")
	})
	if !tailLine(out.String(), retried, "  retried") {
		t.Fatalf("no line marks the retry:\n%s", out)
	}

	// A resolution, with its note.
	clk.Set(t0.Add(3 * time.Hour))
	operate(ids["ob"], "resolve", "created by hand")
	resolvedLine := fmt.Sprintf("2026-01-02T06:04:05Z  effect  %d  orders:ob:r1:sync  crm  resolved  note: created by hand\n", ids["ob"])
	waitUntil(t, "the resolution on tail", func() bool { return strings.Contains(out.String(), resolvedLine) })

	// A dead-lettered event is followed too: its resolution is printed
	// at the time the store recorded it.
	clk.Set(t0.Add(4 * time.Hour))
	if err := r.call(context.Background(), http.MethodPost, "/api/v1/events/resolve", nil,
		map[string]string{"source": "shop", "event_id": "c", "note": "a test order"}, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the event's resolution on tail", func() bool {
		return strings.Contains(out.String(), "2026-01-02T07:04:05Z  event   shop/c  order.updated  -  resolved\n")
	})
	if code := stop(); code != 0 {
		t.Fatalf("tail stopped with %d; stderr %q", code, errOut.String())
	}
	if s := out.String(); strings.Contains(s, "T04:04:05Z") {
		t.Errorf("a line is stamped with the time tail started rather than a stored time:\n%s", s)
	}
}

// effectChange names what moved an effect on where its state alone does
// not: a re-drive, an operator's retry, a resolution's note.
func TestTailEffectChange(t *testing.T) {
	dead := effectSeen{state: "dead", attempts: 5, redrives: 1, reason: "HTTP 401"}
	for _, c := range []struct {
		was  effectSeen
		now  api.EffectJSON
		want string
	}{
		{dead, api.EffectJSON{State: "submitting", Attempts: 6, Redrives: 2}, "re-drive 2"},
		{dead, api.EffectJSON{State: "approved", Attempts: 0, Redrives: 1}, "retried"},
		{dead, api.EffectJSON{State: "done", Attempts: 1, Redrives: 1}, "retried"},
		{dead, api.EffectJSON{State: "resolved", Attempts: 5, Redrives: 1, Note: "done by hand"}, "note: done by hand"},
		{dead, api.EffectJSON{State: "superseded", Attempts: 5, Redrives: 1}, ""},
		{effectSeen{state: "retry_wait", attempts: 2}, api.EffectJSON{State: "submitting", Attempts: 3}, ""},
		{effectSeen{state: "retry_wait", attempts: 4}, api.EffectJSON{State: "approved", Attempts: 0}, "retried"},
	} {
		if got := effectChange(c.was, c.now); got != c.want {
			t.Errorf("%+v -> %s/%d/%d: %q, want %q", c.was, c.now.State, c.now.Attempts, c.now.Redrives, got, c.want)
		}
	}
}

// tail follows the dead effects and dead-lettered events already stored
// when it starts, though it prints none of them without --last: an
// operator who starts tail and then repairs what waits sees the repair.
func TestTailFollowsWhatWaitedBeforeItStarted(t *testing.T) {
	tf := startTailFixture(t)
	refuse, cfgPath, t0, clk, base, r := tf.refuse, tf.cfgPath, tf.t0, tf.clk, tf.base, tf.r
	sendSigned(t, cfgPath, base, "a", `"order_id":"oa","rev":1`)
	sendSigned(t, cfgPath, base, "c", `"rev":1`) // no order id: dead-lettered
	waitDisposition(t, base, "c", "dead_lettered")
	var dead struct{ Effects []api.EffectJSON }
	dead.Effects = waitDeadEffects(t, r, 1)
	id := dead.Effects[0].ID

	out, errOut, stop := startVerb(t, map[string]string{adminTokenVar: "admin-tok"}, "tail", "--server", base, "--interval", "5ms")
	waitUntil(t, "tail to start", func() bool { return strings.Contains(errOut.String(), "following events and effects") })
	if s := out.String(); s != "" {
		t.Fatalf("tail without --last printed the stored rows:\n%s", s)
	}

	refuse.Store(false)
	clk.Set(t0.Add(time.Hour))
	if err := r.call(context.Background(), http.MethodPost, fmt.Sprintf("/api/v1/effects/%d/retry", id), nil,
		map[string]string{"note": "fixed the CRM's field"}, nil); err != nil {
		t.Fatal(err)
	}
	retried := fmt.Sprintf("2026-01-02T04:04:05Z  effect  %d  orders:oa:r1:sync  crm  ", id)
	waitUntil(t, "the retry of the effect that was dead before tail started", func() bool {
		return tailLine(out.String(), retried, "  done") || tailLine(out.String(), retried, "  done  retried")
	})
	if !tailLine(out.String(), retried, "  retried") {
		t.Fatalf("no line marks the retry:\n%s", out)
	}

	clk.Set(t0.Add(2 * time.Hour))
	if err := r.call(context.Background(), http.MethodPost, "/api/v1/events/resolve", nil,
		map[string]string{"source": "shop", "event_id": "c", "note": "a test order"}, nil); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the resolution of the event dead-lettered before tail started", func() bool {
		return strings.Contains(out.String(), "2026-01-02T05:04:05Z  event   shop/c  order.updated  -  resolved\n")
	})
	if code := stop(); code != 0 {
		t.Fatalf("tail stopped with %d; stderr %q", code, errOut.String())
	}
}

// tailFixture is a server whose crm destination refuses (422) until
// refuse is cleared, on a fake clock at t0, with an admin API client.
type tailFixture struct {
	refuse  *atomic.Bool
	cfgPath string
	t0      time.Time
	clk     *clock.Fake
	base    string
	r       *remote
}

func startTailFixture(t *testing.T) *tailFixture {
	t.Helper()
	tf := &tailFixture{refuse: &atomic.Bool{}, t0: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	tf.refuse.Store(true)
	crm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if tf.refuse.Load() {
			w.WriteHeader(http.StatusUnprocessableEntity)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(crm.Close)
	tf.cfgPath, _ = writeOperatorConfigTo(t, crm.URL)
	tf.clk = clock.NewFake(tf.t0)
	tf.base = startServerClock(t, tf.cfgPath, serverSecrets, tf.clk)
	tf.r = &remote{base: mustURL(t, tf.base), token: "admin-tok", client: http.DefaultClient}
	return tf
}

// waitDeadEffects waits until n effects are dead and returns them.
func waitDeadEffects(t *testing.T, r *remote, n int) []api.EffectJSON {
	t.Helper()
	var dead struct {
		Effects []api.EffectJSON `json:"effects"`
	}
	waitUntil(t, fmt.Sprintf("%d effects to be dead", n), func() bool {
		if err := r.call(context.Background(), http.MethodGet, "/api/v1/effects", url.Values{"state": {"dead"}}, nil, &dead); err != nil {
			t.Fatal(err)
		}
		return len(dead.Effects) == n
	})
	return dead.Effects
}
