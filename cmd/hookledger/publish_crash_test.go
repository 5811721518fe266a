package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

const (
	pubCrashToken     = "pub-crash-admin"
	pubCrashEndpoints = 10
	pubCrashMessages  = 300
)

// fanoutReceiver stands for ten Standard Webhooks receivers on one
// listener: the endpoint is the first path segment. It records every
// delivery and answers 204 after a short pause, so that deliveries are in
// flight when the server is killed.
type fanoutReceiver struct {
	mu sync.Mutex
	// got[endpoint][webhook-id] lists the bodies of every delivery.
	got   map[string]map[string][]string
	total int
	srv   *httptest.Server
}

func newFanoutReceiver(t *testing.T) *fanoutReceiver {
	r := &fanoutReceiver{got: map[string]map[string][]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return // the sender hung up: not a delivery
		}
		ep := strings.Trim(req.URL.Path, "/")
		id := req.Header.Get("webhook-id")
		r.mu.Lock()
		if r.got[ep] == nil {
			r.got[ep] = map[string][]string{}
		}
		r.got[ep][id] = append(r.got[ep][id], string(body))
		r.total++
		r.mu.Unlock()
		// A receiver that takes a moment, as a real one does: the kill
		// finds calls in flight.
		time.Sleep(5 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// distinct is the number of (endpoint, webhook-id) pairs received.
func (r *fanoutReceiver) distinct() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, ids := range r.got {
		n += len(ids)
	}
	return n
}

// pairs is the set of (endpoint, webhook-id) pairs received so far.
func (r *fanoutReceiver) pairs() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for ep, ids := range r.got {
		for id := range ids {
			out[ep+"/"+id] = true
		}
	}
	return out
}

func (r *fanoutReceiver) calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

func publishCrashConfig(storeURL, receiver string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `listen: 127.0.0.1:0
store: %s
admin:
  token: %s
delivery:
  lease: 2s             # a call cut short by the kill is retried soon after the restart
  poll_interval: 50ms
publish:
  timeout: 1s
  schedule: [200ms]
  max_in_flight: 4
endpoints:
`, storeURL, pubCrashToken)
	for i := range pubCrashEndpoints {
		fmt.Fprintf(&b, "  - {id: e%d, url: %s/e%d, allow_private_networks: true}\n", i, receiver, i)
	}
	return b.String()
}

// publishLedger is what the clients know: the id each key was answered
// with, and the keys whose answer they never got.
type publishLedger struct {
	mu       sync.Mutex
	ids      map[string]string // key -> message id, once a 202 came
	replayed int               // 202s marked Idempotent-Replayed
	acked    atomic.Int64
}

func (l *publishLedger) record(t *testing.T, key, id string, replayed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if prev, ok := l.ids[key]; ok && prev != id {
		t.Errorf("key %s answered with %s and then %s", key, prev, id)
	}
	l.ids[key] = id
	if replayed {
		l.replayed++
	}
	l.acked.Add(1)
}

func pubCrashBody(i int) string {
	return fmt.Sprintf(`{"type":"invoice.paid","data":{"n":%d,"note":"message %d of the crash test"}}`, i, i)
}

func pubCrashKey(i int) string { return fmt.Sprintf("crash-key-%04d", i) }

// publishOnce sends one publish; ok reports a 202 (with its id).
func publishOnce(client *http.Client, base string, i int) (id string, replayed bool, status int, err error) {
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/messages", strings.NewReader(pubCrashBody(i)))
	if err != nil {
		return "", false, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+pubCrashToken)
	req.Header.Set("Idempotency-Key", pubCrashKey(i))
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", false, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", false, resp.StatusCode, err // the answer was cut off: unknown outcome
	}
	if resp.StatusCode != http.StatusAccepted {
		return "", false, resp.StatusCode, nil
	}
	var out api.MessageJSON
	if err := json.Unmarshal(b, &out); err != nil || !strings.HasPrefix(out.ID, "msg_") {
		return "", false, resp.StatusCode, fmt.Errorf("202 with %q: %v", b, err)
	}
	return out.ID, resp.Header.Get("Idempotent-Replayed") == "true", resp.StatusCode, nil
}

// adminGet reads an admin API resource into out.
func adminGet(t *testing.T, base, path string, q url.Values, out any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path+"?"+q.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+pubCrashToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s?%s: %d %s", path, q.Encode(), resp.StatusCode, b)
	}
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// storedMessages pages through GET /api/v1/events?source=publish and
// returns the deliveries stored per message id.
func storedMessages(t *testing.T, base string) map[string]int {
	t.Helper()
	out := map[string]int{}
	q := url.Values{"source": {"publish"}, "limit": {"200"}}
	for {
		var page api.EventListJSON
		adminGet(t, base, "/api/v1/events", q, &page)
		for _, e := range page.Events {
			out[e.EventID] += e.Deliveries
		}
		if page.NextCursor == "" {
			return out
		}
		q.Set("cursor", page.NextCursor)
	}
}

// endpointEffects pages through GET /api/v1/effects for one endpoint and
// returns each effect's state by message id (the effect's entity is the
// endpoint; the episode key is publish:{msg}:{endpoint}).
func endpointEffects(t *testing.T, base, endpoint string) (map[string][]string, error) {
	t.Helper()
	out := map[string][]string{}
	q := url.Values{"destination": {"endpoint:" + endpoint}, "state": {"any"}, "limit": {"200"}}
	for {
		var page struct {
			Effects    []api.EffectJSON `json:"effects"`
			NextCursor string           `json:"next_cursor"`
		}
		adminGet(t, base, "/api/v1/effects", q, &page)
		for _, e := range page.Effects {
			parts := strings.Split(e.EpisodeKey, ":")
			if len(parts) != 3 || parts[0] != "publish" || parts[2] != endpoint {
				return nil, fmt.Errorf("effect %d has episode key %q, want publish:{msg}:%s", e.ID, e.EpisodeKey, endpoint)
			}
			out[parts[1]] = append(out[parts[1]], e.State)
		}
		if page.NextCursor == "" {
			return out, nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

// A serve process killed with SIGKILL while messages are being published
// and fanned out to ten endpoints, restarted on the same store, with every
// publish whose answer was lost sent again under its key: each key ends as
// exactly one stored message (the ids the clients were answered with, and
// no other), every message reached every endpoint, and an endpoint saw a
// message twice only as a resend of the very same body under the same
// webhook-id (a call whose outcome the kill made unknown).
func TestPublishFanOutSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level crash test skipped in -short mode")
	}
	bin := buildBinary(t)
	t.Run("sqlite", func(t *testing.T) {
		testPublishFanOutSurvivesKill(t, bin, "sqlite:"+filepath.Join(t.TempDir(), "data", "publish.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		testPublishFanOutSurvivesKill(t, bin, pgtest.NewDatabase(t))
	})
}

func testPublishFanOutSurvivesKill(t *testing.T, bin, storeURL string) {
	began := time.Now()
	rcv := newFanoutReceiver(t)
	cfg := filepath.Join(t.TempDir(), "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(publishCrashConfig(storeURL, rcv.srv.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	led := &publishLedger{ids: map[string]string{}}

	// Round 1: eight clients publish until the server dies under them.
	p := startBinary(t, bin, cfg)
	base := "http://" + p.addr
	next := make(chan int)
	var wg sync.WaitGroup
	var lost atomic.Int64 // publishes whose outcome the kill made unknown
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for i := range next {
				id, replayed, status, err := publishOnce(client, base, i)
				switch {
				case err == nil && status == http.StatusAccepted:
					led.record(t, pubCrashKey(i), id, replayed)
				case err == nil && status != http.StatusServiceUnavailable:
					t.Errorf("publish %s before the kill: HTTP %d", pubCrashKey(i), status)
				default:
					lost.Add(1) // sent again after the restart
				}
			}
		}()
	}
	killAt := int64(pubCrashMessages / 3)
	deadline := time.Now().Add(time.Minute)
	i := 0
	for ; i < pubCrashMessages; i++ {
		if led.acked.Load() >= killAt && rcv.calls() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d publishes acknowledged in a minute\n%s", led.acked.Load(), p.logText())
		}
		next <- i
	}
	// Kill -9 with publishes in flight (the clients are still sending) and
	// deliveries in flight (the receiver pauses on each).
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	sentBeforeKill := i
	// The clients drain what is left against the dead server: refused.
	for ; i < pubCrashMessages && i < sentBeforeKill+8; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	ackedBefore := led.acked.Load()
	callsAtKill, pairsAtKill := rcv.calls(), rcv.pairs()
	distinctAtKill := len(pairsAtKill)
	t.Logf("killed after %d publishes sent, %d acknowledged, %d without an answer; receiver had %d calls (%d distinct)",
		sentBeforeKill, ackedBefore, lost.Load(), callsAtKill, distinctAtKill)
	if ackedBefore == 0 || callsAtKill == 0 {
		t.Fatal("the kill came before any publish was acknowledged or delivered")
	}

	// Round 2: the restarted process on the same store; every key without
	// an answer is sent again, as a client retrying would.
	p = startBinary(t, bin, cfg)
	base = "http://" + p.addr
	var pending []int
	led.mu.Lock()
	for k := range pubCrashMessages {
		if _, ok := led.ids[pubCrashKey(k)]; !ok {
			pending = append(pending, k)
		}
	}
	led.mu.Unlock()
	replayedBefore := led.replayed
	work := make(chan int, len(pending))
	for _, k := range pending {
		work <- k
	}
	close(work)
	wg = sync.WaitGroup{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for k := range work {
				for try := 0; ; try++ {
					id, replayed, status, err := publishOnce(client, base, k)
					if err == nil && status == http.StatusAccepted {
						led.record(t, pubCrashKey(k), id, replayed)
						break
					}
					if try == 20 {
						t.Errorf("publish %s after the restart: HTTP %d, %v", pubCrashKey(k), status, err)
						break
					}
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	replayedAfter := led.replayed - replayedBefore
	t.Logf("after the restart: %d keys sent again, %d of them answered as replays (stored before the kill, answer lost)",
		len(pending), replayedAfter)

	// Every key now has an answer, and distinct keys got distinct messages.
	msgKey := map[string]string{}
	for k, id := range led.ids {
		if other, ok := msgKey[id]; ok {
			t.Errorf("keys %s and %s were answered with the same message %s", other, k, id)
		}
		msgKey[id] = k
	}
	if len(led.ids) != pubCrashMessages {
		t.Fatalf("%d keys answered, want %d", len(led.ids), pubCrashMessages)
	}

	// The receiver gets every message at every endpoint.
	want := pubCrashMessages * pubCrashEndpoints
	deadline = time.Now().Add(40 * time.Second)
	for rcv.distinct() < want {
		if time.Now().After(deadline) {
			t.Fatalf("receiver has %d of %d (endpoint, message) pairs after 40 s\n%s", rcv.distinct(), want, p.logText())
		}
		time.Sleep(20 * time.Millisecond) // polling the receiver, not measuring time
	}

	// The store: one message per key, each with its one delivery row.
	stored := storedMessages(t, base)
	if len(stored) != pubCrashMessages {
		t.Errorf("%d messages stored for %d keys", len(stored), pubCrashMessages)
	}
	for id, n := range stored {
		if _, ok := msgKey[id]; !ok {
			t.Errorf("stored message %s was never the answer to a publish", id)
		}
		if n != 1 {
			t.Errorf("message %s has %d deliveries stored, want 1", id, n)
		}
	}
	for id, k := range msgKey {
		if stored[id] == 0 {
			t.Errorf("key %s was answered with %s, which is not stored", k, id)
		}
	}

	// Every effect settles done, once, before the receiver is read: a
	// call the kill cut short is sent again only once its lease runs out,
	// which can be after every pair has arrived, and a done effect is
	// never called again, so the receiver then holds every call.
	deadline = time.Now().Add(20 * time.Second)
	for e := 0; e < pubCrashEndpoints; e++ {
		ep := fmt.Sprintf("e%d", e)
		effects, err := endpointEffects(t, base, ep)
		if err != nil {
			t.Fatal(err)
		}
		notDone := 0
		for _, states := range effects {
			if len(states) != 1 || states[0] != "done" {
				notDone++
			}
		}
		if len(effects) != pubCrashMessages || notDone > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("endpoint %s: %d effects, %d not done once (want %d done)", ep, len(effects), notDone, pubCrashMessages)
			}
			e-- // settles trail the receiver's answers: look again
			time.Sleep(50 * time.Millisecond)
			continue
		}
		for id := range effects {
			if _, ok := msgKey[id]; !ok {
				t.Errorf("endpoint %s has an effect for %s, which is no message", ep, id)
			}
		}
	}

	// Per endpoint: the webhook-ids are exactly the message ids, and a
	// repeat carries the same body.
	rcv.mu.Lock()
	got := rcv.got
	dups, calls := 0, rcv.total
	for e := range pubCrashEndpoints {
		ep := fmt.Sprintf("e%d", e)
		ids := got[ep]
		if len(ids) != pubCrashMessages {
			t.Errorf("endpoint %s received %d distinct messages, want %d", ep, len(ids), pubCrashMessages)
		}
		for id, bodies := range ids {
			if _, ok := msgKey[id]; !ok {
				t.Errorf("endpoint %s received webhook-id %q, which is no message anyone was answered with", ep, id)
				continue
			}
			for _, b := range bodies[1:] {
				if b != bodies[0] {
					t.Errorf("endpoint %s got %s twice with different bodies:\n%s\n%s", ep, id, bodies[0], b)
				}
			}
			dups += len(bodies) - 1
			if len(bodies) > 1 && !pairsAtKill[ep+"/"+id] {
				t.Errorf("endpoint %s got %s %d times, first after the restart: the restarted process repeated a call of its own",
					ep, id, len(bodies))
			}
			var payload struct {
				Type string
				Data struct{ N int }
			}
			if err := json.Unmarshal([]byte(bodies[0]), &payload); err != nil || payload.Type != "invoice.paid" ||
				pubCrashKey(payload.Data.N) != msgKey[id] {
				t.Errorf("endpoint %s got %s with body %s, want the payload published under %s (%v)", ep, id, bodies[0], msgKey[id], err)
			}
		}
	}
	if len(got) != pubCrashEndpoints {
		t.Errorf("deliveries reached %d paths, want the %d endpoints", len(got), pubCrashEndpoints)
	}
	rcv.mu.Unlock()
	// Only calls the kill cut short are sent again: those in flight (at
	// most max_in_flight per endpoint) and those answered whose settle
	// had not committed. A successful call frees its slot before its
	// settle's commit, so the second kind has no bound of its own: each
	// repeat's first call was the killed process's (checked above), and
	// there are no more repeats than pairs it had called.
	if dups > distinctAtKill {
		t.Errorf("%d repeated deliveries, more than the %d the killed process had made", dups, distinctAtKill)
	}

	var repeated []string
	for ep, ids := range got {
		for id, bodies := range ids {
			if len(bodies) > 1 {
				repeated = append(repeated, fmt.Sprintf("%s/%s×%d", ep, id, len(bodies)))
			}
		}
	}
	sort.Strings(repeated)
	if len(repeated) > 8 {
		repeated = append(repeated[:8], "…")
	}
	t.Logf("%d keys → %d stored messages → %d endpoints: %d calls, %d repeated with the same body %v; %s",
		len(led.ids), len(stored), pubCrashEndpoints, calls, dups, repeated, time.Since(began).Round(time.Millisecond))
}
