package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// chaosMix is the destination's behaviour: mostly success, and every fault
// the worker must survive. Fail500Saved keys replay their 500 for good
// (Stripe's rule), so they exhaust attempts and every re-drive and end in
// the exception queue.
var chaosMix = []delivertest.Weighted{
	{Fault: delivertest.Success, Weight: 70},
	{Fault: delivertest.Fail500, Weight: 10},
	{Fault: delivertest.Fail429Seconds, Weight: 3},
	{Fault: delivertest.TimeoutBeforeWork, Weight: 4},
	{Fault: delivertest.TimeoutAfterWork, Weight: 4},
	{Fault: delivertest.HiddenFailure, Weight: 2},
	{Fault: delivertest.Fail400, Weight: 3},
	{Fault: delivertest.Fail500Saved, Weight: 1},
}

// chaosEffects is the number of effect names per entity: one event per
// entity applies revision 1 and approves one effect per name, so no effect
// supersedes another and every one of them is deliverable.
const chaosEffects = 20

func chaosConfig(db, dest string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `listen: 127.0.0.1:0
store: sqlite:%s
sources:
  - name: stripe
    kind: stripe
    secrets: [%s]
processing:
  workers: 4
  poll_interval: 50ms
delivery:
  workers: 64
  lease: 2s
  poll_interval: 50ms
destinations:
  - name: ledger
    base_url: %s
    allow_private_networks: true
    timeout: 1s
    retry: {base: 50ms, factor: 2, cap: 400ms, attempts: 5, redrive: [1s, 2s]}
    idempotency: {header: Idempotency-Key, window: 24h}
    lookup:
      path: '"/effects/" + episode_key'
      found: status == 200
      ref: body.id
    classify:
      - {status: 200, body_contains: '"success":false', class: hidden_failure, reason: the answer reports a failure}
flows:
  - name: accounts
    source: stripe
    events: ["customer.*"]
    entity: event.data.object.id
    version: {mode: revision, revision: event.data.object.rev}
    state: event.data.object.plan
    effects:
`, db, crashSecret, dest)
	for i := range chaosEffects {
		fmt.Fprintf(&b, `      - name: e%02d
        destination: ledger
        request: {path: '"/charges"', body: '{"customer": entity, "effect": "e%02d", "plan": state}'}
`, i, i)
	}
	return b.String()
}

// 10,000 effects (500 entities × 20) through a destination that fails in
// every way the worker classifies, with the process killed -9 in the middle
// of delivery and restarted on the same database: each episode key is
// executed at most once, every done effect was executed exactly once, every
// other effect waits in the exception queue with a reason, and no call that
// got a permanent error was ever retried.
func TestChaosDelivery(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level chaos test skipped in -short mode")
	}
	// Full size in the normal suite: about 50 s on two cores under -race,
	// most of it the destination's deliberate stalls and the lease the
	// restarted process waits out.
	const entities = 500
	total := entities * chaosEffects
	began := time.Now()

	dest := delivertest.New(delivertest.Options{Seed: 20261103, Mix: chaosMix, IdempotencyHeader: "Idempotency-Key",
		Window: 24 * time.Hour, RetryAfter: time.Second, Stall: 5 * time.Second,
		// Timeouts hang up at once: the unknown outcome without a short
		// client timeout that a busy machine could trip on a healthy call.
		HangUp: true})
	defer dest.Close()

	bin := buildBinary(t)
	dir := t.TempDir()
	db := filepath.Join(dir, "data", "chaos.db")
	cfg := filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfg, []byte(chaosConfig(db, dest.URL)), 0o600); err != nil {
		t.Fatal(err)
	}

	p := startBinary(t, bin, cfg)
	sendCustomers(t, "http://"+p.addr, entities)

	// Kill -9 in the middle of delivery: some calls are in flight, their
	// effects submitting under a lease the dead process never settles.
	killAt := int64(total * 2 / 5)
	deadline := time.Now().Add(2 * time.Minute)
	for int64(len(dest.Requests())) < killAt {
		if time.Now().After(deadline) {
			t.Fatalf("only %d calls after 2 min\n%s", len(dest.Requests()), tail(p.logText()))
		}
		time.Sleep(20 * time.Millisecond) // polling progress, not measuring time
	}
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	// The destination may read a call the dead process wrote just before
	// it died after the process is gone: wait until the dead process's
	// connections are closed, so every call it made is counted before
	// the next process starts.
	quietCtx, cancelQuiet := context.WithTimeout(context.Background(), time.Minute)
	defer cancelQuiet()
	if err := dest.Quiet(quietCtx); err != nil {
		t.Fatalf("the destination after the kill: %v", err)
	}
	callsAtKill := len(dest.Requests())

	p = startBinary(t, bin, cfg)
	reader, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	var effects []*store.Effect
	deadline = time.Now().Add(5 * time.Minute)
	for {
		effects = allEffects(t, reader)
		if len(effects) == total && settled(effects) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled after 5 min: %v\n%s", countStates(effects), tail(p.logText()))
		}
		time.Sleep(250 * time.Millisecond) // polling progress, not measuring time
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.done; err != nil {
		t.Errorf("SIGTERM: %v, want exit 0", err)
	}

	executed := dest.ExecutedKeys()
	inLedger := map[string]bool{}
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	for _, e := range effects {
		inLedger[e.EpisodeKey] = true
		n := executed[e.EpisodeKey]
		switch e.State {
		case store.EffectDone:
			if n != 1 {
				report("%s is done but was executed %d times", e.EpisodeKey, n)
			}
		case store.EffectDead, store.EffectNeedsReconciliation:
			if e.Reason == "" || e.ErrorClass == store.ClassNone {
				report("%s is %s without a class and reason", e.EpisodeKey, e.State)
			}
			if n > 1 {
				report("%s was executed %d times", e.EpisodeKey, n)
			}
			if e.State == store.EffectDead && n > 0 {
				report("%s is dead but the destination did the work", e.EpisodeKey)
			}
		default:
			report("%s ended %s (%s)", e.EpisodeKey, e.State, e.Reason)
		}
	}
	for k := range executed {
		if !inLedger[k] {
			report("the destination executed %s, which is not in the ledger", k)
		}
	}
	// A permanent answer is the last call of its key, unless the process
	// was killed before it could record it: then the ledger only knows the
	// outcome is unknown, and the next call must be a lookup, not a resend.
	reqs := dest.Requests()
	permanent, lostToKill := 0, 0
	last400 := map[string]int{} // key -> index of its 400
	for i, r := range reqs {
		j, after400 := last400[r.Key]
		if after400 {
			delete(last400, r.Key)
			if j < callsAtKill && i >= callsAtKill && r.Method == http.MethodGet {
				lostToKill++
			} else {
				report("%s was called again after a 400:%s", r.Key, trail(reqs, r.Key, callsAtKill))
			}
		}
		if r.Method == http.MethodPost && r.Status == http.StatusBadRequest {
			last400[r.Key] = i
			permanent++
		}
	}

	faults := map[delivertest.Fault]int{}
	posts, lookups, replays := 0, 0, 0
	for _, r := range reqs {
		switch {
		case r.Method != http.MethodPost:
			lookups++
		case r.Replayed:
			replays++
			posts++
		default:
			faults[r.Fault]++
			posts++
		}
	}
	var fs []string
	for f, n := range faults {
		fs = append(fs, fmt.Sprintf("%s=%d", f, n))
	}
	sort.Strings(fs)
	t.Logf("effects %d over %d entities in %s; states %v", len(effects), entities, time.Since(began).Round(time.Millisecond), countStates(effects))
	t.Logf("calls %d (replayed %d), lookups %d, calls at the kill -9: %d, kills 1; executed keys %d; 400s: %d (answered while the process died, then reconciled by lookup: %d)",
		posts, replays, lookups, callsAtKill, len(executed), permanent, lostToKill)
	t.Logf("faults applied: %s", strings.Join(fs, " "))
}

// sendCustomers posts one signed customer event per entity.
func sendCustomers(t *testing.T, base string, n int) {
	t.Helper()
	scheme, err := signature.New(signature.Options{Kind: "stripe", Secrets: []string{crashSecret}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 8)
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			body := []byte(fmt.Sprintf(`{"id":"evt_chaos_%d","type":"customer.updated","created":1762160000,"data":{"object":{"id":"cus_%04d","rev":1,"plan":"pro"}}}`, i, i))
			h, err := scheme.Sign(&signature.Request{Method: "POST", Body: body}, time.Now(), "")
			if err != nil {
				errs <- err
				return
			}
			req, _ := http.NewRequest("POST", base+"/hooks/stripe", bytes.NewReader(body))
			req.Header = h
			resp, err := client.Do(req)
			if err != nil {
				errs <- err
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				errs <- fmt.Errorf("event %d: HTTP %d", i, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func allEffects(t *testing.T, s *sqlite.Store) []*store.Effect {
	t.Helper()
	var out []*store.Effect
	after := int64(0)
	for {
		page, err := s.EffectList(context.Background(), &store.EffectListParams{AfterID: after, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if len(page) < 1000 {
			return out
		}
		after = page[len(page)-1].ID
	}
}

// settled reports that nothing is due or scheduled any more: every effect
// is done or waits for a person.
func settled(es []*store.Effect) bool {
	for _, e := range es {
		switch e.State {
		case store.EffectDone:
		case store.EffectDead, store.EffectNeedsReconciliation:
			if !e.NextAttemptAt.IsZero() {
				return false
			}
		default:
			return false
		}
	}
	return true
}

func countStates(es []*store.Effect) map[store.EffectState]int {
	m := map[store.EffectState]int{}
	for _, e := range es {
		m[e.State]++
	}
	return m
}

// trail is a key's calls at the destination, for failure messages; the
// kill -9 is marked where it fell.
func trail(reqs []delivertest.Request, key string, killedAt int) string {
	var b strings.Builder
	for i, r := range reqs {
		if i == killedAt {
			b.WriteString(" [kill -9]")
		}
		if r.Key == key {
			fmt.Fprintf(&b, " %s %s→%d", r.Method, r.Fault, r.Status)
			if r.Replayed {
				b.WriteString(" (replayed)")
			}
		}
	}
	return b.String()
}

func tail(s string) string {
	if len(s) > 4000 {
		return "…" + s[len(s)-4000:]
	}
	return s
}
