package deliver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
	"github.com/hookledger/hookledger/internal/tracing"
)

// ledgerDest is a destination on loopback that keeps what it was sent by
// episode key and answers lookups from that, with the faults a test sets:
// a record it lost, a record under another id, lookups that fail.
type ledgerDest struct {
	*httptest.Server
	clk *clock.Fake

	mu      sync.Mutex
	ids     map[string]string // episode key -> id
	n       int
	lookups []lookupCall
	fail    map[string]int // episode key -> lookups still to answer 503
}

type lookupCall struct {
	key string
	at  time.Time // on the fake clock
}

func newLedgerDest(t *testing.T, clk *clock.Fake) *ledgerDest {
	d := &ledgerDest{clk: clk, ids: map[string]string{}, fail: map[string]int{}}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		defer d.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/items":
			key := r.Header.Get("X-Episode-Key")
			if _, ok := d.ids[key]; !ok {
				d.n++
				d.ids[key] = fmt.Sprintf("obj_%d", d.n)
			}
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]string{"id": d.ids[key]})
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/items/"):
			key := strings.TrimPrefix(r.URL.Path, "/items/")
			d.lookups = append(d.lookups, lookupCall{key, d.clk.Now()})
			if d.fail[key] > 0 {
				d.fail[key]--
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			id, ok := d.ids[key]
			if !ok {
				w.WriteHeader(http.StatusNotFound)
				_, _ = io.WriteString(w, `{"error":"not found"}`)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]string{"id": id})
		default:
			w.WriteHeader(http.StatusMethodNotAllowed)
		}
	}))
	t.Cleanup(d.Close)
	return d
}

// lose makes the destination forget an effect, as a vendor that rolled
// back a write after answering 201 would.
func (d *ledgerDest) lose(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.ids, key)
}

// replace makes the destination hold an effect under another id.
func (d *ledgerDest) replace(key, id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ids[key] = id
}

func (d *ledgerDest) failLookups(key string, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fail[key] = n
}

func (d *ledgerDest) calls() []lookupCall {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.lookups)
}

func (d *ledgerDest) lookupsOf(key string) int {
	n := 0
	for _, c := range d.calls() {
		if c.key == key {
			n++
		}
	}
	return n
}

const verifyYAML = `sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    state: event.state
    effects:
      - name: charge
        destination: dest
        request:
          path: '"/items"'
          headers: {X-Episode-Key: '"orders:" + entity + ":r" + string(version) + ":charge"'}
          body: '{"order": entity}'
notifications:
  webhook_url: %s
  allow_private_networks: true
  timeout: 2s
delivery:
  lease: 30s
destinations:
  - name: dest
    base_url: %s
    allow_private_networks: true
    timeout: 10s
    owner: billing-team
    retry: {base: 1s, cap: 1m, factor: 2, attempts: 4}
    lookup:
      path: '"/items/" + pathEscape(episode_key)'
      found: status == 200
      ref: body.id
    verify: %s
`

// verifyWorld is a worker that delivers effects to a ledgerDest and the
// verifier that checks them, on a real SQLite ledger and one fake clock.
type verifyWorld struct {
	t    *testing.T
	ctx  context.Context
	clk  *clock.Fake
	st   *sqlite.Store
	eng  *flow.Engine
	w    *deliver.Worker
	v    *deliver.Verifier
	dest *ledgerDest
	hook *hookRecorder
	logs *lockedBuffer
	n    int
	// traceparent is stored with each event done commits.
	traceparent string
}

func newVerifyWorld(t *testing.T, verify string) *verifyWorld {
	t.Helper()
	return newTracedVerifyWorld(t, verify, nil)
}

// newTracedVerifyWorld is newVerifyWorld whose worker records spans with
// p (nil: tracing off).
func newTracedVerifyWorld(t *testing.T, verify string, p *tracing.Provider) *verifyWorld {
	t.Helper()
	clk := clock.NewFake(t0)
	dest := newLedgerDest(t, clk)
	hook := &hookRecorder{}
	hook.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var m map[string]string
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &m); err != nil || m["text"] == "" {
			t.Errorf("notification is not a Slack message: %s", b)
		}
		hook.mu.Lock()
		hook.texts = append(hook.texts, m["text"])
		hook.mu.Unlock()
	}))
	t.Cleanup(hook.Close)
	yaml := fmt.Sprintf(verifyYAML, hook.URL, dest.URL, verify)
	cfg, err := config.Parse("hookledger.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yaml)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "verify.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	w, err := deliver.New(cfg, st, deliver.Options{Workers: 4, LeaseFor: cfg.Delivery.Lease.D(), Clock: clk,
		Rand: func() float64 { return jitter }, Owner: "worker-a", Logger: log, Tracing: p})
	if err != nil {
		t.Fatal(err)
	}
	v := deliver.NewVerifier(w, st, deliver.VerifierOptions{PageSize: 7})
	return &verifyWorld{t: t, ctx: context.Background(), clk: clk, st: st, w: w, v: v, dest: dest, hook: hook, logs: logs,
		eng: flow.New(cfg, st, flow.Options{Clock: clk, LeaseFor: 10 * time.Second})}
}

// done creates n effects through the flow and delivers them, all done at
// the fake clock's now.
func (x *verifyWorld) done(n int) []*store.Effect {
	x.t.Helper()
	var subs []*store.Submission
	for range n {
		x.n++
		body := fmt.Sprintf(`{"order_id":"o%d","rev":1,"state":"PAID"}`, x.n)
		subs = append(subs, &store.Submission{Deliveries: []*store.DeliveryInput{{RequestID: fmt.Sprint("req-", x.n), Source: "shop",
			EventID: fmt.Sprintf("evt_%d", x.n), Type: "order.paid", OccurredAt: x.clk.Now(), ReceivedAt: x.clk.Now(), Body: []byte(body),
			TraceContext: x.traceparent}}})
	}
	res, err := x.st.InboxCommit(x.ctx, &store.InboxCommitParams{Submissions: subs})
	if err != nil {
		x.t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			x.t.Fatal(r.Err)
		}
	}
	if err := x.eng.Drain(x.ctx); err != nil {
		x.t.Fatal(err)
	}
	if err := x.w.Drain(x.ctx); err != nil {
		x.t.Fatal(err)
	}
	es, err := x.st.EffectList(x.ctx, &store.EffectListParams{Flow: "orders", Limit: 1000})
	if err != nil {
		x.t.Fatal(err)
	}
	out := es[len(es)-n:]
	for _, e := range out {
		if e.State != store.EffectDone || !strings.HasPrefix(e.DestinationRef, "obj_") {
			x.t.Fatalf("effect %s is %s with reference %q, want done", e.EpisodeKey, e.State, e.DestinationRef)
		}
	}
	return out
}

func (x *verifyWorld) step() int {
	x.t.Helper()
	n, err := x.v.Step(x.ctx)
	if err != nil {
		x.t.Fatalf("verify: %v", err)
	}
	return n
}

func (x *verifyWorld) get(id int64) *store.Effect {
	x.t.Helper()
	e, err := x.st.EffectGet(x.ctx, id)
	if err != nil || e == nil {
		x.t.Fatalf("effect %d: %v", id, err)
	}
	return e
}

// pending is what the verifier still has to read for the destination
// once every effect is old enough.
func (x *verifyWorld) pending() []int64 {
	x.t.Helper()
	page, err := x.st.VerifyNext(x.ctx, &store.VerifyNextParams{Destination: "dest", Cutoff: x.clk.Now().Add(time.Hour), Limit: 1000})
	if err != nil {
		x.t.Fatal(err)
	}
	var ids []int64
	for _, e := range page.Effects {
		ids = append(ids, e.ID)
	}
	return ids
}

func (x *verifyWorld) mismatchAudits() []*store.AuditEntry {
	x.t.Helper()
	rows, err := x.st.AuditList(x.ctx, &store.AuditListParams{Action: "reconciliation_mismatch", Limit: 1000})
	if err != nil {
		x.t.Fatal(err)
	}
	return rows
}

// Sampled effects are looked up once they have been done for verify.after,
// not before; a destination that holds them leaves them done, and the
// cursor moves past them, so they are not looked up again.
func TestVerifyAfterTheDelay(t *testing.T) {
	x := newVerifyWorld(t, "{sample: 1.0, after: 5m}")
	es := x.done(10)
	if n := x.step(); n != 0 {
		t.Fatalf("%d lookups at once, want none before verify.after", n)
	}
	x.clk.Advance(5*time.Minute - time.Second)
	if n := x.step(); n != 0 || len(x.dest.calls()) != 0 {
		t.Fatalf("%d lookups a second before verify.after, want none", n)
	}
	x.clk.Advance(time.Second)
	// One lookup per second by default: advance a second per round.
	for range 20 {
		x.step()
		x.clk.Advance(time.Second)
	}
	for _, e := range es {
		if n := x.dest.lookupsOf(e.EpisodeKey); n != 1 {
			t.Errorf("effect %s looked up %d times, want once (sample 1.0 checks every one)", e.EpisodeKey, n)
		}
		if got := x.get(e.ID); got.State != store.EffectDone {
			t.Errorf("effect %s is %s (%s), want done", e.EpisodeKey, got.State, got.Reason)
		}
	}
	for _, c := range x.dest.calls() {
		if c.at.Before(t0.Add(5 * time.Minute)) {
			t.Errorf("effect %s looked up at %s, before verify.after", c.key, c.at)
		}
	}
	if p := x.pending(); len(p) != 0 {
		t.Errorf("cursor not past the verified effects: %v still to read", p)
	}
	if a := x.mismatchAudits(); len(a) != 0 || len(x.hook.all()) != 0 {
		t.Errorf("mismatches %d, notifications %v; want none", len(a), x.hook.all())
	}
	// A later effect is verified in its own time, the earlier ones never again.
	late := x.done(1)[0]
	x.clk.Advance(5*time.Minute + time.Second)
	if n := x.step(); n != 1 || x.dest.lookupsOf(late.EpisodeKey) != 1 {
		t.Fatalf("%d lookups, want just the new effect's", n)
	}
}

// An effect the destination lacks, or holds under another id, becomes a
// reconciliation mismatch: needs_reconciliation with the mark, an audit
// row, a notification naming it and a log line.
func TestVerifyMismatch(t *testing.T) {
	x := newVerifyWorld(t, "{sample: 1.0, after: 5m, per_second: 10}")
	es := x.done(4)
	lost, moved := es[1], es[3]
	x.dest.lose(lost.EpisodeKey)
	x.dest.replace(moved.EpisodeKey, "obj_999")
	x.clk.Advance(6 * time.Minute)
	if n := x.step(); n != 4 {
		t.Fatalf("%d lookups, want 4", n)
	}

	for _, e := range []*store.Effect{es[0], es[2]} {
		if got := x.get(e.ID); got.State != store.EffectDone {
			t.Errorf("held effect %s is %s, want done", e.EpisodeKey, got.State)
		}
	}
	got := x.get(lost.ID)
	if got.State != store.EffectNeedsReconciliation || got.ErrorClass != store.ClassUnknown || !got.NextAttemptAt.IsZero() ||
		!got.MismatchAt.Equal(x.clk.Now()) {
		t.Fatalf("lost effect is %s (%s, next %v, mismatch at %v), want needs_reconciliation with the mark, unscheduled",
			got.State, got.ErrorClass, got.NextAttemptAt, got.MismatchAt)
	}
	want := fmt.Sprintf("dest does not hold this effect: its lookup found nothing (HTTP 404) 6m0s after the effect was done with reference %s", lost.DestinationRef)
	if !strings.Contains(got.Reason, want) {
		t.Errorf("reason %q, want it to contain %q", got.Reason, want)
	}
	got = x.get(moved.ID)
	if got.State != store.EffectNeedsReconciliation || got.MismatchAt.IsZero() ||
		!strings.Contains(got.Reason, fmt.Sprintf("holds this effect under reference obj_999, but it was done with reference %s", moved.DestinationRef)) {
		t.Errorf("moved effect is %s: %q, want a mismatch naming both references", got.State, got.Reason)
	}

	audits := x.mismatchAudits()
	if len(audits) != 2 {
		t.Fatalf("%d reconciliation_mismatch audit rows, want 2", len(audits))
	}
	for i, e := range []*store.Effect{lost, moved} {
		if a := audits[i]; a.Actor != "verifier" || a.Entity != e.Entity || !strings.Contains(a.Detail, e.EpisodeKey) || !a.At.Equal(x.clk.Now()) {
			t.Errorf("audit row %+v, want the verifier's record of %s", a.AuditInsertParams, e.EpisodeKey)
		}
	}
	texts := x.hook.all()
	if len(texts) != 2 {
		t.Fatalf("notifications %q, want 2", texts)
	}
	for i, e := range []*store.Effect{lost, moved} {
		if !strings.Contains(texts[i], fmt.Sprintf("effect %d (%s) to dest is needs_reconciliation", e.ID, e.EpisodeKey)) ||
			!strings.Contains(texts[i], fmt.Sprintf("hookledger effects retry %d", e.ID)) || !strings.Contains(texts[i], "Owner: billing-team") {
			t.Errorf("notification %q does not name effect %d, its repair and its owner", texts[i], e.ID)
		}
	}
	if l := x.logs.String(); strings.Count(l, "verification mismatch") != 2 || !strings.Contains(l, "episode="+lost.EpisodeKey) {
		t.Errorf("log does not report both mismatches:\n%s", l)
	}
	if p := x.pending(); len(p) != 0 {
		t.Errorf("cursor not past the verified effects: %v", p)
	}

	// Both show in the reconciliation_mismatches signal until repaired:
	// resolved with a note, or sent again and done.
	if m := x.mismatchSignal(); m.Value != 2 || m.Breakdown["destination"]["dest"] != 2 {
		t.Fatalf("reconciliation_mismatches = %d %v, want 2 at dest", m.Value, m.Breakdown)
	}
	if _, err := x.st.EffectOperate(x.ctx, &store.EffectOperateParams{EffectID: moved.ID, Action: store.OperateResolve,
		Actor: "operator:alice", Note: "obj_999 is the merged record", Now: x.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.st.EffectOperate(x.ctx, &store.EffectOperateParams{EffectID: lost.ID, Action: store.OperateRetry,
		Actor: "operator:alice", Note: "lost in the CRM's rollback", Now: x.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := x.w.Drain(x.ctx); err != nil {
		t.Fatal(err)
	}
	if got := x.get(lost.ID); got.State != store.EffectDone || !got.MismatchAt.IsZero() {
		t.Fatalf("retried effect is %s with mismatch at %v, want done without the mark", got.State, got.MismatchAt)
	}
	if m := x.mismatchSignal(); m.Value != 0 {
		t.Fatalf("reconciliation_mismatches = %d after the repairs, want 0", m.Value)
	}
}

func (x *verifyWorld) mismatchSignal() *store.SignalMeasure {
	x.t.Helper()
	snap, err := x.st.SignalSnapshot(x.ctx, &store.SignalSnapshotParams{Now: x.clk.Now(), Window: time.Hour})
	if err != nil {
		x.t.Fatal(err)
	}
	for _, m := range snap.Measures {
		if m.Name == store.SignalReconciliationMismatches {
			return m
		}
	}
	x.t.Fatal("no reconciliation_mismatches signal")
	return nil
}

// A lookup that fails (503) is not a mismatch and does not move the
// cursor past the effect: the destination is held back for the backoff,
// then the same effect is looked up again, and the ones after it wait.
func TestVerifyLookupFailureIsRetried(t *testing.T) {
	x := newVerifyWorld(t, "{sample: 1.0, after: 5m, per_second: 100}")
	es := x.done(3)
	x.dest.failLookups(es[1].EpisodeKey, 2)
	x.clk.Advance(5*time.Minute + time.Second)

	if n := x.step(); n != 2 {
		t.Fatalf("%d lookups, want 2 (the first, then the failing one)", n)
	}
	if got := x.pending(); len(got) != 2 || got[0] != es[1].ID {
		t.Fatalf("still to verify %v, want the failed effect %d and the next", got, es[1].ID)
	}
	if x.dest.lookupsOf(es[2].EpisodeKey) != 0 {
		t.Fatal("an effect after the failed one was looked up before it")
	}
	// The backoff is the destination's retry policy: 1 s, then 2 s.
	if n := x.step(); n != 0 {
		t.Fatalf("%d lookups during the backoff", n)
	}
	x.clk.Advance(time.Second)
	if n := x.step(); n != 1 || x.dest.lookupsOf(es[1].EpisodeKey) != 2 {
		t.Fatalf("%d lookups after the first backoff, want the failed effect again", n)
	}
	x.clk.Advance(time.Second)
	if n := x.step(); n != 0 {
		t.Fatalf("%d lookups one second into a two-second backoff", n)
	}
	x.clk.Advance(time.Second)
	if n := x.step(); n != 2 {
		t.Fatalf("%d lookups after the second backoff, want the effect and the next", n)
	}
	for _, e := range es {
		if got := x.get(e.ID); got.State != store.EffectDone {
			t.Errorf("effect %s is %s, want done: a failed lookup is not a mismatch", e.EpisodeKey, got.State)
		}
	}
	if n := x.dest.lookupsOf(es[0].EpisodeKey); n != 1 {
		t.Errorf("the effect before the failure was looked up %d times, want once", n)
	}
	if p := x.pending(); len(p) != 0 {
		t.Errorf("cursor not past the verified effects: %v", p)
	}
	if l := x.logs.String(); strings.Count(l, "verification lookup failed") != 1 || !strings.Contains(l, "verification of dest recovered") {
		t.Errorf("want the repeated failure logged once and its recovery:\n%s", l)
	}
	if len(x.mismatchAudits()) != 0 || len(x.hook.all()) != 0 {
		t.Error("a failed lookup was reported as a mismatch")
	}
}

// The verifier never makes more than verify.per_second lookups a second
// at a destination (its bucket holds one second of them), however far
// behind it is.
func TestVerifyRateBound(t *testing.T) {
	x := newVerifyWorld(t, "{sample: 1.0, after: 1m, per_second: 2}")
	x.done(30)
	x.clk.Advance(time.Minute + time.Second)
	start := x.clk.Now()
	for range 20 {
		x.step()
		x.step() // a second round at the same instant finds the bucket empty
		x.clk.Advance(250 * time.Millisecond)
	}
	calls := x.dest.calls()
	// 5 s of rounds every 250 ms: the burst of 2, then 2 a second.
	if len(calls) != 2+2*4+1 && len(calls) != 2+2*5 {
		t.Errorf("%d lookups in 5 s at per_second 2, want 11 or 12", len(calls))
	}
	for i, c := range calls {
		// In any second, at most the burst plus what refills in it.
		n := 0
		for _, d := range calls[i:] {
			if d.at.Sub(c.at) < time.Second {
				n++
			}
		}
		if n > 2+2 {
			t.Errorf("%d lookups in the second from %s", n, c.at.Sub(start))
		}
	}
	seen := map[string]bool{}
	for _, c := range calls {
		if seen[c.key] {
			t.Errorf("effect %s looked up twice", c.key)
		}
		seen[c.key] = true
	}
}

// A small share checks exactly the deterministic subset the hash picks,
// and nothing else; the cursor passes over the rest.
func TestVerifySampleIsDeterministic(t *testing.T) {
	const share = 0.2
	x := newVerifyWorld(t, fmt.Sprintf("{sample: %g, after: 5m, per_second: 100}", share))
	es := x.done(40)
	var want []string
	for _, e := range es {
		if deliver.VerifySampled("dest", e.ID, share) {
			want = append(want, e.EpisodeKey)
		}
	}
	if len(want) == 0 || len(want) == len(es) {
		t.Fatalf("the sample picks %d of %d effects: the test needs a proper subset", len(want), len(es))
	}
	x.clk.Advance(5*time.Minute + time.Second)
	for range 10 {
		x.step()
	}
	var got []string
	for _, c := range x.dest.calls() {
		got = append(got, c.key)
	}
	if !slices.Equal(got, want) {
		t.Errorf("looked up %v, want the sampled %v", got, want)
	}
	if p := x.pending(); len(p) != 0 {
		t.Errorf("cursor not past the unsampled effects: %v", p)
	}
}

func TestVerifySampledShare(t *testing.T) {
	for _, share := range []float64{0.001, 0.01, 0.2, 0.5} {
		n := 0
		const total = 200000
		for id := int64(1); id <= total; id++ {
			if deliver.VerifySampled("crm", id, share) {
				n++
			}
		}
		if got := float64(n) / total; got < share*0.85 || got > share*1.15 {
			t.Errorf("share %g picks %.4f of sequential ids", share, got)
		}
	}
	same, differ := 0, 0
	for id := int64(1); id <= 1000; id++ {
		a := deliver.VerifySampled("crm", id, 0.5)
		if a == deliver.VerifySampled("crm", id, 0.5) {
			same++
		}
		if a != deliver.VerifySampled("mail", id, 0.5) {
			differ++
		}
	}
	if same != 1000 {
		t.Error("the draw is not deterministic")
	}
	if differ < 400 {
		t.Errorf("two destinations share %d of 1000 draws: the destination is not in the hash", 1000-differ)
	}
	if !deliver.VerifySampled("crm", 7, 1) {
		t.Error("share 1 does not pick every effect")
	}
}

// The background loop verifies on its own, starts once and stops cleanly;
// with no destination to verify it starts nothing.
func TestVerifierBackground(t *testing.T) {
	x := newVerifyWorld(t, "{sample: 1.0, after: 5m, per_second: 1000}")
	es := x.done(3)
	x.dest.lose(es[2].EpisodeKey)
	x.clk.Advance(5*time.Minute + time.Second)
	if got := x.v.Destinations(); !slices.Equal(got, []string{"dest"}) {
		t.Fatalf("verifies %v", got)
	}
	ctx := context.Background()
	if err := x.w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	v := deliver.NewVerifier(x.w, x.st, deliver.VerifierOptions{PollInterval: 10 * time.Millisecond})
	if err := v.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.Start(ctx); !errors.Is(err, loop.ErrStarted) {
		t.Fatalf("second Start: %v, want loop.ErrStarted", err)
	}
	waitUntil(t, "the lost effect to be a mismatch", func() bool { return x.get(es[2].ID).State == store.EffectNeedsReconciliation })
	waitUntil(t, "the notification", func() bool { return len(x.hook.all()) == 1 })
	stop, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := v.Stop(stop); err != nil {
		t.Fatal(err)
	}
	if err := v.Stop(stop); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := x.w.Stop(stop); err != nil {
		t.Fatal(err)
	}
	if len(x.dest.calls()) != 3 {
		t.Errorf("%d lookups, want 3", len(x.dest.calls()))
	}

	// A worker whose destinations do not verify gets a verifier that
	// starts nothing.
	cfg, err := config.Parse("h.yaml", []byte("destinations:\n  - name: plain\n    base_url: http://127.0.0.1:1\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	w, err := deliver.New(cfg, x.st, deliver.Options{Clock: x.clk})
	if err != nil {
		t.Fatal(err)
	}
	idle := deliver.NewVerifier(w, x.st, deliver.VerifierOptions{})
	if len(idle.Destinations()) != 0 {
		t.Fatalf("verifies %v", idle.Destinations())
	}
	if err := idle.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := idle.Stop(stop); err != nil {
		t.Fatal(err)
	}
}
