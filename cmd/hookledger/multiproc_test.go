package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/postgres"
)

// Two serve processes on one PostgreSQL share the work: each entity is
// processed by one of them at a time, in business order, and every effect
// exists once.
func TestTwoServeProcessesOnOnePostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	dbURL := pgtest.NewDatabase(t)
	bin := buildBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
sources:
  - name: shop
    kind: hmac
    secrets: [multi-secret]
    hmac: {header: X-Signature}
processing:
  workers: 4
  poll_interval: 10ms
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    state: event.state
    effects:
      - name: sync
        destination: crm
        request: {path: '"/orders/" + entity', body: '{"state": state}'}
destinations:
  - {name: crm, base_url: "http://127.0.0.1:1", allow_private_networks: true}  # refuses: effects wait to retry
`, dbURL)), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startBinary(t, bin, cfg)
	b := startBinary(t, bin, cfg)

	const entities, revisions = 40, 5
	type ev struct {
		entity string
		rev    int
	}
	var evs []ev
	for e := range entities {
		for r := 1; r <= revisions; r++ {
			evs = append(evs, ev{fmt.Sprintf("o%02d", e), r})
		}
	}
	rng := rand.New(rand.NewPCG(7, 7))
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })

	var wg sync.WaitGroup
	errs := make(chan error, len(evs))
	for i, e := range evs {
		addr := a.addr
		if i%2 == 1 {
			addr = b.addr
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"eventId":"%s-r%d","type":"order.updated","order_id":%q,"rev":%d,"state":"S%d"}`, e.entity, e.rev, e.entity, e.rev, e.rev)
			m := hmac.New(sha256.New, []byte("multi-secret"))
			m.Write([]byte(body))
			req, _ := http.NewRequest("POST", "http://"+addr+"/hooks/shop", bytes.NewReader([]byte(body)))
			req.Header.Set("X-Signature", hex.EncodeToString(m.Sum(nil)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				errs <- err
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- fmt.Errorf("POST %s: %d", body, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	ctx := context.Background()
	st, err := postgres.Open(ctx, dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := st.WorkCount(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d work items still pending after 60 s\nA:\n%s\nB:\n%s", n, a.logText(), b.logText())
		}
		time.Sleep(20 * time.Millisecond) // waiting for the processes, not measuring time
	}

	for e := range entities {
		id := fmt.Sprintf("o%02d", e)
		p, err := st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: "orders", Entity: id})
		if err != nil || p == nil || p.Version != fmt.Sprintf("r%d", revisions) || string(p.State) != fmt.Sprintf(`"S%d"`, revisions) {
			t.Fatalf("projection of %s = %+v (%v), want the newest revision r%d", id, p, err, revisions)
		}
	}
	seen := map[string]bool{}
	after := int64(0)
	for {
		effs, err := st.EffectList(ctx, &store.EffectListParams{Flow: "orders", AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(effs) == 0 {
			break
		}
		for _, e := range effs {
			if seen[e.EpisodeKey] {
				t.Fatalf("episode %s exists twice", e.EpisodeKey)
			}
			seen[e.EpisodeKey] = true
			after = e.ID
		}
	}
	if len(seen) < entities {
		t.Fatalf("%d effects for %d entities", len(seen), entities)
	}
	r, err := st.EventList(ctx, &store.EventListParams{Source: "shop", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Events {
		if e.Disposition == store.DispositionAccepted {
			t.Fatalf("event %s left pending", e.EventID)
		}
	}
	// Both processes took part.
	var rows []*store.AuditEntry
	for after := int64(0); ; {
		page, err := st.AuditList(ctx, &store.AuditListParams{Action: "work_settled", AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		rows = append(rows, page...)
		after = page[len(page)-1].ID
	}
	checkBusinessOrder(t, rows, revisions)
	actors := map[string]int{}
	for _, row := range rows {
		actors[strings.SplitN(row.Actor, ":", 2)[0]]++
	}
	t.Logf("work settled per worker: %v", actors)
	if len(actors) < 2 {
		t.Errorf("only %d worker(s) settled work; both processes should share it", len(actors))
	}
}

// checkBusinessOrder follows each entity's settlements in commit order (the
// lease serialises an entity's transactions, so audit ids follow it): the
// versions applied rise strictly, every revision settled stale was older
// than one already applied, and the newest revision ends applied.
func checkBusinessOrder(t *testing.T, rows []*store.AuditEntry, newest int) {
	t.Helper()
	applied := map[string]int{}
	for _, a := range rows {
		rest, ok := strings.CutPrefix(a.Detail, "flow orders entity ")
		if !ok {
			t.Fatalf("audit %d: unexpected work_settled detail %q", a.ID, a.Detail)
		}
		entity, outcome, _ := strings.Cut(rest, ": ")
		var rev int
		if _, err := fmt.Sscanf(strings.TrimPrefix(a.EventID, entity+"-"), "r%d", &rev); err != nil {
			t.Fatalf("audit %d: event id %q does not name a revision of %s", a.ID, a.EventID, entity)
		}
		switch {
		case strings.HasPrefix(outcome, "applied "):
			if rev <= applied[entity] {
				t.Errorf("%s: r%d applied after r%d (audit %d)", entity, rev, applied[entity], a.ID)
			}
			applied[entity] = rev
		case strings.HasPrefix(outcome, "stale"):
			if rev >= applied[entity] {
				t.Errorf("%s: r%d settled stale while only r%d was applied (audit %d)", entity, rev, applied[entity], a.ID)
			}
		case strings.HasPrefix(outcome, "duplicate"):
			if rev != applied[entity] {
				t.Errorf("%s: r%d settled duplicate while r%d is applied (audit %d)", entity, rev, applied[entity], a.ID)
			}
		default:
			t.Errorf("%s: r%d settled %s", entity, rev, outcome)
		}
	}
	for entity, rev := range applied {
		if rev != newest {
			t.Errorf("%s: newest applied r%d, want r%d", entity, rev, newest)
		}
	}
}

// recorder is a loopback destination that counts the calls for each
// episode key (sent in Idempotency-Key) and notices two calls for one key
// in flight at once.
type recorder struct {
	srv   *httptest.Server
	delay time.Duration // each call takes this long, so overlapping calls overlap

	mu         sync.Mutex
	calls      map[string]int
	inFlight   map[string]int
	overlapped []string
}

func newRecorder(t *testing.T, delay time.Duration) *recorder {
	r := &recorder{delay: delay, calls: map[string]int{}, inFlight: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		key := req.Header.Get("Idempotency-Key")
		r.mu.Lock()
		r.calls[key]++
		r.inFlight[key]++
		if r.inFlight[key] > 1 {
			r.overlapped = append(r.overlapped, key)
		}
		r.mu.Unlock()
		// A slow destination, so that a second claimer of the same effect
		// calls while the first call is still running.
		time.Sleep(r.delay)
		r.mu.Lock()
		r.inFlight[key]--
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) snapshot() (calls map[string]int, overlapped []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls = make(map[string]int, len(r.calls))
	for k, v := range r.calls {
		calls[k] = v
	}
	return calls, append([]string(nil), r.overlapped...)
}

// multiConfig is the configuration every node of a multi-process test
// shares: signed order events, one effect per applied revision, sent to
// dest. Short leases let the survivors take over a killed node's work
// within seconds.
func multiConfig(t *testing.T, dbURL, dest string) string {
	t.Helper()
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
sources:
  - name: shop
    kind: hmac
    secrets: [multi-secret]
    hmac: {header: X-Signature}
processing:
  workers: 4
  poll_interval: 10ms
  lease: 4s
delivery:
  workers: 16
  poll_interval: 20ms
  lease: 4s
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    state: event.state
    effects:
      - name: sync
        destination: crm
        request: {path: '"/orders/" + entity', body: '{"state": state}'}
destinations:
  - name: crm
    base_url: %s
    allow_private_networks: true
    timeout: 2s
    idempotency: {header: Idempotency-Key, window: 24h}
`, dbURL, dest)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg
}

type orderEvent struct {
	entity string
	rev    int
}

func (e orderEvent) id() string { return fmt.Sprintf("%s-r%d", e.entity, e.rev) }

// orderEvents is every revision of every entity, shuffled.
func orderEvents(entities, revisions int, seed uint64) []orderEvent {
	var evs []orderEvent
	for e := range entities {
		for r := 1; r <= revisions; r++ {
			evs = append(evs, orderEvent{fmt.Sprintf("o%02d", e), r})
		}
	}
	rng := rand.New(rand.NewPCG(seed, seed))
	rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
	return evs
}

// postOrder sends one signed order event to a node and returns the status
// (0 when the node could not be reached: not acknowledged).
func postOrder(client *http.Client, addr string, e orderEvent) int {
	body := fmt.Sprintf(`{"eventId":%q,"type":"order.updated","order_id":%q,"rev":%d,"state":"S%d"}`, e.id(), e.entity, e.rev, e.rev)
	m := hmac.New(sha256.New, []byte("multi-secret"))
	m.Write([]byte(body))
	req, _ := http.NewRequest("POST", "http://"+addr+"/hooks/shop", strings.NewReader(body))
	req.Header.Set("X-Signature", hex.EncodeToString(m.Sum(nil)))
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// orderEffects lists the flow's effects.
func orderEffects(t *testing.T, st store.Store) []*store.Effect {
	t.Helper()
	var out []*store.Effect
	for after := int64(0); ; {
		page, err := st.EffectList(context.Background(), &store.EffectListParams{Flow: "orders", AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return out
		}
		out = append(out, page...)
		after = page[len(page)-1].ID
	}
}

// allAudit lists the audit rows of one action.
func allAudit(t *testing.T, st store.Store, action string) []*store.AuditEntry {
	t.Helper()
	var rows []*store.AuditEntry
	for after := int64(0); ; {
		page, err := st.AuditList(context.Background(), &store.AuditListParams{Action: action, AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			return rows
		}
		rows = append(rows, page...)
		after = page[len(page)-1].ID
	}
}

// allEvents lists the source's events by event id.
func allEvents(t *testing.T, st store.Store) map[string]*store.Event {
	t.Helper()
	out := map[string]*store.Event{}
	for after := int64(0); ; {
		r, err := st.EventList(context.Background(), &store.EventListParams{Source: "shop", AfterPK: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Events {
			out[e.EventID] = e
		}
		if r.NextAfterPK == 0 {
			return out
		}
		after = r.NextAfterPK
	}
}

// settledEffect: done, or superseded by a newer revision's effect before
// it was sent; nothing else may remain once the traffic is processed.
func settledEffect(s store.EffectState) bool {
	return s == store.EffectDone || s == store.EffectSuperseded
}

// waitQuiet waits until no work is pending and every effect is settled.
func waitQuiet(t *testing.T, st store.Store, within time.Duration, procs ...*proc) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		n, err := st.WorkCount(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		notDone := 0
		states := map[store.EffectState]int{}
		var sample *store.Effect
		if n == 0 {
			for _, e := range orderEffects(t, st) {
				if !settledEffect(e.State) {
					notDone++
					states[e.State]++
					sample = e
				}
			}
			if notDone == 0 {
				return
			}
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for i, p := range procs {
				fmt.Fprintf(&logs, "node %d:\n%s\n", i, p.logText())
			}
			if sample != nil {
				fmt.Fprintf(&logs, "an effect not done: %s %s, next attempt %s, %s %s\n", sample.EpisodeKey, sample.State, sample.NextAttemptAt, sample.Reason, sample.LastResponse)
			}
			t.Fatalf("after %s: %d work items pending, effects not done by state %v\n%s", within, n, states, logs.String())
		}
		time.Sleep(50 * time.Millisecond) // waiting for the processes, not measuring time
	}
}

// checkOutcome asserts what every multi-process run must end with: each
// acknowledged event stored and settled, each entity's projection at its
// newest revision, business order in the settlements, one effect per
// episode key, each done (and then called at the destination) or
// superseded, and no call for anything else.
func checkOutcome(t *testing.T, st store.Store, acked map[string]bool, entities, revisions int, calls map[string]int) (settledBy map[string]int) {
	t.Helper()
	ctx := context.Background()
	events := allEvents(t, st)
	for id := range acked {
		e, ok := events[id]
		switch {
		case !ok:
			t.Errorf("acknowledged event %s is not stored", id)
		case e.Disposition == store.DispositionAccepted:
			t.Errorf("acknowledged event %s is still pending", id)
		}
	}
	for e := range entities {
		id := fmt.Sprintf("o%02d", e)
		p, err := st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: "orders", Entity: id})
		if err != nil || p == nil || p.Version != fmt.Sprintf("r%d", revisions) || string(p.State) != fmt.Sprintf(`"S%d"`, revisions) {
			t.Errorf("projection of %s = %+v (%v), want the newest revision r%d", id, p, err, revisions)
		}
	}
	rows := allAudit(t, st, "work_settled")
	checkBusinessOrder(t, rows, revisions)
	settledBy = map[string]int{}
	for _, row := range rows {
		settledBy[strings.SplitN(row.Actor, ":", 2)[0]]++
	}
	seen := map[string]bool{}
	for _, e := range orderEffects(t, st) {
		if seen[e.EpisodeKey] {
			t.Errorf("episode %s exists twice", e.EpisodeKey)
		}
		seen[e.EpisodeKey] = true
		if !settledEffect(e.State) {
			t.Errorf("effect %s is %s, want done or superseded", e.EpisodeKey, e.State)
		}
		if e.State == store.EffectDone && calls[e.EpisodeKey] == 0 {
			t.Errorf("effect %s is done but the destination never saw it", e.EpisodeKey)
		}
	}
	if len(seen) < entities {
		t.Errorf("%d effects for %d entities", len(seen), entities)
	}
	for key := range calls {
		if !seen[key] {
			t.Errorf("the destination was called with episode %q, which is no effect", key)
		}
	}
	return settledBy
}

// runCheckBinary runs `hookledger check` against the shared database.
func runCheckBinary(t *testing.T, bin, cfg string) {
	t.Helper()
	out, err := exec.Command(bin, "check", "--config", cfg).CombinedOutput()
	if err != nil {
		t.Errorf("hookledger check: %v\n%s", err, out)
	}
}

// Three serve processes on one PostgreSQL, one of them killed with SIGKILL
// mid-run and started again: shuffled, duplicated traffic spread over the
// live nodes (as a load balancer would, moving a request that failed to
// the next node) ends with every acknowledged event stored and settled,
// each entity's projection at its newest revision reached in business
// order, one effect per episode key, each done or superseded, and
// `hookledger check` clean.
func TestThreeServeProcessesSurviveKill(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	dbURL := pgtest.NewDatabase(t)
	bin := buildBinary(t)
	dest := newRecorder(t, 20*time.Millisecond)
	cfg := multiConfig(t, dbURL, dest.srv.URL)
	started := time.Now()

	nodes := []*proc{startBinary(t, bin, cfg), startBinary(t, bin, cfg), startBinary(t, bin, cfg)}
	var nodesMu sync.Mutex
	live := func(i int) string {
		nodesMu.Lock()
		defer nodesMu.Unlock()
		return nodes[i%len(nodes)].addr
	}

	const entities, revisions = 30, 5
	evs := orderEvents(entities, revisions, 13)
	// Every event is sent twice, the copy later in the stream.
	stream := append(append([]orderEvent(nil), evs...), evs...)
	rng := rand.New(rand.NewPCG(14, 14))
	rng.Shuffle(len(evs), func(i, j int) { stream[len(evs)+i], stream[len(evs)+j] = stream[len(evs)+j], stream[len(evs)+i] })

	var ackMu sync.Mutex
	acked := map[string]bool{}
	var sent atomic.Int64
	next := make(chan int)
	killAt := int64(len(stream) / 3)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for i := range next {
				e := stream[i]
				// Up to a few tries, each on the next node: a request to
				// the killed node fails and moves on.
				for try := 0; ; try++ {
					code := postOrder(client, live(i+try), e)
					if code == 200 {
						ackMu.Lock()
						acked[e.id()] = true
						ackMu.Unlock()
						break
					}
					if try > 20 {
						t.Errorf("event %s never acknowledged (last status %d)", e.id(), code)
						break
					}
				}
				sent.Add(1)
			}
		}()
	}
	killed := false
	var calledAtKill map[string]int
	for i := range stream {
		if !killed && sent.Load() >= killAt {
			killed = true
			victim := nodes[2]
			if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-victim.done
			calledAtKill, _ = dest.snapshot()
			t.Logf("node 2 killed after %d of %d requests", sent.Load(), len(stream))
			// Traffic goes on to the two survivors while the third restarts.
			restarted := startBinary(t, bin, cfg)
			nodesMu.Lock()
			nodes[2] = restarted
			nodesMu.Unlock()
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if !killed {
		t.Fatal("the run ended before the kill")
	}
	sendDone := time.Since(started)

	st, err := postgres.Open(context.Background(), dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	waitQuiet(t, st, 40*time.Second, nodes...)
	calls, _ := dest.snapshot()
	settledBy := checkOutcome(t, st, acked, entities, revisions, calls)
	repeated := 0
	for k, n := range calls {
		repeated += n - 1
		if n > 1 && calledAtKill[k] == 0 {
			t.Errorf("effect %s called %d times, first after the kill: a survivor repeated a call of its own", k, n)
		}
	}
	t.Logf("sent in %s, settled in %s; %d events acknowledged, %d effects, %d repeated calls (a call cut short by the kill is reconciled); work settled per worker: %v",
		sendDone.Round(time.Millisecond), time.Since(started).Round(time.Millisecond), len(acked), len(calls), repeated, settledBy)
	// Only calls the kill cut short are repeated (reconciled by a
	// survivor): those in flight (at most delivery.workers) and those
	// answered whose settle had not committed, which have no bound of
	// their own, since a successful call frees its slot before its
	// settle's commit. Each repeat's first call came before the kill
	// (checked above).
	if repeated > len(calledAtKill) {
		t.Errorf("%d repeated calls, more than the %d effects called before the kill", repeated, len(calledAtKill))
	}
	if len(acked) != len(evs) {
		t.Errorf("%d events acknowledged, want %d", len(acked), len(evs))
	}
	// The survivors share the work (whether the victim settled any
	// before it died depends on scheduling).
	if len(settledBy) < 2 {
		t.Errorf("only %d worker(s) settled work; the processes should share it", len(settledBy))
	}
	runCheckBinary(t, bin, cfg)
}

// skewWarnRe finds the offset a node measured against the database.
var skewWarnRe = regexp.MustCompile(`level=WARN msg="this host's clock differs from the database's[^"]*" offset=(\S+)`)

// Two serve processes on one PostgreSQL, the second on a host clock five
// minutes ahead (HOOKLEDGER_TEST_CLOCK_SKEW). Judged by each host's clock,
// the skewed node would see the other's entity and effect leases as long
// expired and take them over, calling the destination a second time while
// the first call runs, and the other node would see work stamped by the
// skewed one as due only in five minutes. Following the database's clock
// neither happens: no lease is lost, every episode is called exactly once
// and never twice at a time, and both nodes process and deliver. The test
// first proves the skew is real: the skewed node measured an offset of
// about -5m, and it stamps the database's time, not its own.
func TestSkewedNodeFollowsTheDatabaseClock(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level test skipped in -short mode")
	}
	const skew = 5 * time.Minute
	dbURL := pgtest.NewDatabase(t)
	bin := buildBinary(t)
	// Calls last long enough that a node taking over an effect still in
	// flight would be seen calling it at the same time.
	dest := newRecorder(t, 150*time.Millisecond)
	cfg := multiConfig(t, dbURL, dest.srv.URL)
	started := time.Now()

	st, err := postgres.Open(context.Background(), dbURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dbNow := func() time.Time {
		at, err := st.DatabaseNow(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return at
	}

	a := startBinary(t, bin, cfg)
	b := startBinary(t, bin, cfg, clockSkewEnv+"="+skew.String())
	nodes := []*proc{a, b}

	// The skew is real: the skewed node found its host clock five minutes
	// ahead of the database's, the other found no difference worth a word.
	m := skewWarnRe.FindStringSubmatch(b.logText())
	if m == nil {
		t.Fatalf("the skewed node did not warn about its clock:\n%s", b.logText())
	}
	offset, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	if d := offset + skew; d > 2*time.Second || d < -2*time.Second {
		t.Fatalf("the skewed node measured an offset of %v, want about %v", offset, -skew)
	}
	if strings.Contains(a.logText(), "host's clock differs") {
		t.Errorf("the node on a correct clock warned about it:\n%s", a.logText())
	}

	const entities, revisions = 30, 4
	evs := orderEvents(entities, revisions, 21)
	dbBefore := dbNow()
	var ackMu sync.Mutex
	ackedBy := map[string]int{} // event id -> node
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for i := range next {
				node := i % 2
				if code := postOrder(client, nodes[node].addr, evs[i]); code != 200 {
					t.Errorf("event %s to node %d: status %d", evs[i].id(), node, code)
					continue
				}
				ackMu.Lock()
				ackedBy[evs[i].id()] = node
				ackMu.Unlock()
			}
		}()
	}
	for i := range evs {
		next <- i
	}
	close(next)
	wg.Wait()
	dbAfter := dbNow()

	waitQuiet(t, st, 40*time.Second, nodes...)
	calls, overlapped := dest.snapshot()
	acked := map[string]bool{}
	for id := range ackedBy {
		acked[id] = true
	}
	settledBy := checkOutcome(t, st, acked, entities, revisions, calls)

	// Stamped by the database's clock: what the skewed node received
	// carries the database's time, not its host's five minutes ahead.
	events := allEvents(t, st)
	fromB, offClock := 0, 0
	for id, node := range ackedBy {
		e := events[id]
		if node != 1 || e == nil {
			continue
		}
		fromB++
		if e.ReceivedAt.Before(dbBefore.Add(-2*time.Second)) || e.ReceivedAt.After(dbAfter.Add(2*time.Second)) {
			if offClock++; offClock <= 3 {
				t.Errorf("event %s received by the skewed node at %v, outside the database's %v..%v", id, e.ReceivedAt, dbBefore, dbAfter)
			}
		}
	}
	if offClock > 0 {
		t.Errorf("%d of %d events received by the skewed node stamped off the database's clock", offClock, fromB)
	}
	if fromB == 0 {
		t.Error("the skewed node acknowledged nothing")
	}

	// No lease was taken from a live holder: every episode was called
	// once, never twice at a time, and no worker lost an entity.
	repeated := 0
	for key, n := range calls {
		if n != 1 {
			if repeated++; repeated <= 3 {
				t.Errorf("episode %s called %d times", key, n)
			}
		}
	}
	if repeated > 0 {
		t.Errorf("%d of %d episodes called more than once", repeated, len(calls))
	}
	if len(overlapped) > 0 {
		t.Errorf("%d calls of an episode while another call of it was in flight, e.g. %s", len(overlapped), overlapped[0])
	}
	for i, p := range nodes {
		if n := strings.Count(p.logText(), "lease lost"); n > 0 {
			t.Errorf("node %d lost %d entity leases to the other", i, n)
		}
	}

	// Both nodes made progress: each settled work and delivered effects.
	deliveredBy := map[string]int{}
	for _, row := range allAudit(t, st, "effect_done") {
		deliveredBy[strings.SplitN(row.Actor, ":", 2)[0]]++
	}
	t.Logf("sent and settled in %s; %d events (%d by the skewed node), %d effects called; work settled per worker %v, effects delivered per worker %v",
		time.Since(started).Round(time.Millisecond), len(acked), fromB, len(calls), settledBy, deliveredBy)
	if len(settledBy) < 2 {
		t.Errorf("work settled by %v: both nodes should process", settledBy)
	}
	if len(deliveredBy) < 2 {
		t.Errorf("effects delivered by %v: both nodes should deliver", deliveredBy)
	}
	runCheckBinary(t, bin, cfg)
}
