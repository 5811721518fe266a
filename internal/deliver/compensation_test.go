package deliver_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// compensationYAML charges a paid order and refunds the charge when the
// order is cancelled afterwards; the destination keeps idempotency keys,
// so a compensation sent twice would still be done once there: the test
// counts the calls as well.
const compensationYAML = `sources:
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
    state: '{"status": event.status}'
    effects:
      - name: charge
        when: state.status == "PAID"
        destination: pay
        request: {path: '"/charges"', body: '{"order": entity}'}
        compensate_when: state.status == "CANCELLED"
        compensation:
          path: '"/refunds"'
          body: '{"charge_key": original.episode_key, "order": entity}'
delivery:
  lease: 30s
destinations:
  - name: pay
    base_url: %s
    allow_private_networks: true
    timeout: 10s
    idempotency: {header: Idempotency-Key, window: 24h}
    retry: {base: 1s, cap: 1m, factor: 2, attempts: 4}
`

type compWorld struct {
	t     *testing.T
	ctx   context.Context
	clk   *clock.Fake
	st    *sqlite.Store
	eng   *flow.Engine
	w     *deliver.Worker
	dest  *delivertest.Server
	notes *noteRecorder
	n     int
}

// noteRecorder keeps the notifications: an effect settled dead tells a
// person.
type noteRecorder struct {
	mu  sync.Mutex
	all []deliver.Notification
}

func (r *noteRecorder) Notify(_ context.Context, n deliver.Notification) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, n)
	return nil
}

func (r *noteRecorder) keys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, n := range r.all {
		out = append(out, n.EpisodeKey)
	}
	return out
}

func newCompWorld(t *testing.T) *compWorld {
	t.Helper()
	clk := clock.NewFake(t0)
	dest := delivertest.New(delivertest.Options{IdempotencyHeader: "Idempotency-Key", Now: clk.Now, HangUp: true})
	t.Cleanup(dest.Close)
	cfg, err := config.Parse("hookledger.yaml", []byte(fmt.Sprintf(compensationYAML, dest.URL)), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "comp.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	notes := &noteRecorder{}
	w, err := deliver.New(cfg, st, deliver.Options{Workers: 2, LeaseFor: cfg.Delivery.Lease.D(), Clock: clk,
		Rand: func() float64 { return jitter }, Owner: "worker-a", Notifier: notes})
	if err != nil {
		t.Fatal(err)
	}
	return &compWorld{t: t, ctx: context.Background(), clk: clk, st: st, w: w, dest: dest, notes: notes,
		eng: flow.New(cfg, st, flow.Options{Clock: clk, LeaseFor: 10 * time.Second})}
}

func (x *compWorld) order(rev int, status string) {
	x.t.Helper()
	x.n++
	res, err := x.st.InboxCommit(x.ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{
		Deliveries: []*store.DeliveryInput{{RequestID: fmt.Sprint("req-", x.n), Source: "shop",
			EventID: fmt.Sprintf("evt_%d", rev), Type: "order.updated", OccurredAt: x.clk.Now(), ReceivedAt: x.clk.Now(),
			Body: []byte(fmt.Sprintf(`{"order_id":"o1","rev":%d,"status":%q}`, rev, status))}},
	}}})
	if err != nil || res[0].Err != nil {
		x.t.Fatalf("commit: %v %v", err, res)
	}
	if err := x.eng.Drain(x.ctx); err != nil {
		x.t.Fatal(err)
	}
}

func (x *compWorld) effect(key string) *store.Effect {
	x.t.Helper()
	es, err := x.st.EffectList(x.ctx, &store.EffectListParams{Flow: "orders", Limit: 100})
	if err != nil {
		x.t.Fatal(err)
	}
	for _, e := range es {
		if e.EpisodeKey == key {
			return e
		}
	}
	x.t.Fatalf("no effect %s", key)
	return nil
}

const (
	chargeKey = "orders:o1:r1:charge"
	refundKey = chargeKey + ":compensate"
)

// The refund of a charge whose call is still in flight (another worker
// holds it) waits, released for CompensationWait, and is sent exactly
// once after the charge is done. Its request was rendered when it was
// created, while the charge's id was not known yet: it names the charge
// by its episode key, the idempotency key the charge was sent with.
func TestCompensationWaitsForItsOriginal(t *testing.T) {
	x := newCompWorld(t)
	x.order(1, "PAID")
	// Another worker is calling the charge right now.
	held, err := x.st.EffectClaim(x.ctx, &store.EffectClaimParams{Owner: "worker-b", Now: x.clk.Now(), LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(held) != 1 || held[0].EpisodeKey != chargeKey {
		t.Fatalf("claim the charge: %v %v", held, err)
	}
	x.order(2, "CANCELLED")
	refund := x.effect(refundKey)
	if refund.Compensates != held[0].ID || refund.State != store.EffectApproved {
		t.Fatalf("refund %+v, want an approved compensation of effect %d", refund, held[0].ID)
	}

	if err := x.w.Drain(x.ctx); err != nil {
		t.Fatal(err)
	}
	if n := x.dest.Calls(refundKey); n != 0 {
		t.Fatalf("the refund was sent %d times while its charge was in flight", n)
	}
	refund = x.effect(refundKey)
	if refund.State != store.EffectApproved || !refund.NextAttemptAt.Equal(x.clk.Now().Add(deliver.CompensationWait)) || refund.Attempts != 0 {
		t.Fatalf("refund %s next %v attempts %d: want approved again, due in %v, no attempt", refund.State, refund.NextAttemptAt, refund.Attempts, deliver.CompensationWait)
	}

	// The other worker's call succeeds.
	if err := x.st.EffectSettle(x.ctx, &store.EffectSettleParams{EffectID: held[0].ID, Token: held[0].Token, Now: x.clk.Now(), Actor: "worker-b",
		State: store.EffectDone, AddAttempt: true, Attempt: &store.Attempt{Status: 201}, DestinationRef: "ch_1"}); err != nil {
		t.Fatal(err)
	}
	x.clk.Advance(deliver.CompensationWait)
	for range 3 {
		if err := x.w.Drain(x.ctx); err != nil {
			t.Fatal(err)
		}
		x.clk.Advance(time.Minute)
	}
	if calls, done := x.dest.Calls(refundKey), x.dest.Executions(refundKey); calls != 1 || done != 1 {
		t.Fatalf("refund: %d calls, done %d times; want exactly one", calls, done)
	}
	if refund = x.effect(refundKey); refund.State != store.EffectDone {
		t.Fatalf("refund is %s, want done", refund.State)
	}
	var sent string
	for _, r := range x.dest.Requests() {
		if r.Key == refundKey {
			sent = r.Method + " " + r.Path + " " + string(r.Body)
		}
	}
	if sent != `POST /refunds {"charge_key":"orders:o1:r1:charge","order":"o1"}` {
		t.Errorf("refund sent as %s", sent)
	}
}

// A charge that never took place (superseded after its call failed) is
// not refunded: the refund is settled dead, with the reason, and nothing
// is sent.
func TestCompensationOfAnOriginalThatNeverTookPlace(t *testing.T) {
	x := newCompWorld(t)
	x.order(1, "PAID")
	held, err := x.st.EffectClaim(x.ctx, &store.EffectClaimParams{Owner: "worker-b", Now: x.clk.Now(), LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(held) != 1 {
		t.Fatalf("claim the charge: %v %v", held, err)
	}
	x.order(2, "CANCELLED")
	// The in-flight call failed before any work; a newer payment then
	// supersedes the waiting charge.
	if err := x.st.EffectSettle(x.ctx, &store.EffectSettleParams{EffectID: held[0].ID, Token: held[0].Token, Now: x.clk.Now(), Actor: "worker-b",
		State: store.EffectRetryWait, AddAttempt: true, Class: store.ClassTransient, Attempt: &store.Attempt{Status: 503, Class: store.ClassTransient},
		NextAttemptAt: x.clk.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	x.order(3, "PAID")
	if c := x.effect(chargeKey); c.State != store.EffectSuperseded {
		t.Fatalf("charge r1 is %s, want superseded by r3's", c.State)
	}
	if err := x.w.Drain(x.ctx); err != nil {
		t.Fatal(err)
	}
	refund := x.effect(refundKey)
	if refund.State != store.EffectDead || !strings.Contains(refund.Reason, "never took place") || x.dest.Calls(refundKey) != 0 {
		t.Fatalf("refund %s (%s), %d calls; want dead without a call", refund.State, refund.Reason, x.dest.Calls(refundKey))
	}
	if got := x.notes.keys(); len(got) != 1 || got[0] != refundKey {
		t.Errorf("notifications %v, want one for the refund", got)
	}
}
