package deliver_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/store"
)

// hashedKey is the hashed idempotency key written out independently of
// the code under test: "hl1_" and the SHA-256 of the episode key in
// lower-case hex. Destinations dedupe on it, so its form is a contract.
func hashedKey(episodeKey string) string {
	sum := sha256.Sum256([]byte(episodeKey))
	return "hl1_" + hex.EncodeToString(sum[:])
}

// The form is pinned with a value computed outside Go (printf '%s' KEY |
// sha256sum): a change to it would make every destination that still
// keeps a key see a new request for an effect it already carried out.
func TestHashedKeyFormIsPinned(t *testing.T) {
	const want = "hl1_fa416da6010ee8e85343c8d189e43ac193ca51f61f0c6121bf48ebb570830342"
	if got := hashedKey("orders:ada@example.com:r1:charge"); got != want {
		t.Fatalf("test helper: %s, want %s", got, want)
	}
	x := newWorld(t, setup{dest: "preset: stripe", srv: delivertest.Options{IdempotencyHeader: "Idempotency-Key", Window: 24 * time.Hour}})
	e := x.order("ada@example.com", 1)
	x.drain()
	reqs := x.dest.Requests()
	if len(reqs) != 1 || reqs[0].Header.Get("Idempotency-Key") != want {
		t.Fatalf("sent %q, want %s", reqs[0].Header.Get("Idempotency-Key"), want)
	}
	x.wantState(x.get(e.ID), store.EffectDone)
}

// A Stripe destination gets a fixed-length digest of the episode key, not
// the key: an entity that is an e-mail address never reaches Stripe in the
// key, and a long entity never makes a key over Stripe's 255 characters
// (which Stripe refuses, whatever the retry). The key is the same on every
// attempt.
func TestStripeGetsHashedKeys(t *testing.T) {
	long := strings.Repeat("cus_", 70) // an episode key of 300 characters
	for _, entity := range []string{"ada@example.com", long} {
		t.Run(entity[:8], func(t *testing.T) {
			x := newWorld(t, setup{dest: "preset: stripe", srv: delivertest.Options{IdempotencyHeader: "Idempotency-Key", Window: 24 * time.Hour}})
			e := x.order(entity, 1)
			want := hashedKey(e.EpisodeKey)
			x.dest.Script(want, delivertest.Fail500)
			e = x.until(e.ID, store.EffectDone)
			reqs := x.dest.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want a failure and its retry", len(reqs))
			}
			for i, r := range reqs {
				got := r.Header.Get("Idempotency-Key")
				if got != want || len(got) != 68 || strings.Contains(got, entity) {
					t.Fatalf("request %d: Idempotency-Key %q, want %s (episode key %d characters)", i+1, got, want, len(e.EpisodeKey))
				}
			}
			if x.dest.Executions(want) != 1 {
				t.Fatalf("executed %d times under the key", x.dest.Executions(want))
			}
		})
	}
}

// key: episode asked for explicitly sends the episode key as it is, except
// when it cannot be: over the preset's documented limit (Stripe: 255
// characters) it is sent hashed, never as it is, and the config says so
// with a warning at load.
func TestExplicitEpisodeKeyNeverSentOverTheLimit(t *testing.T) {
	x := newWorld(t, setup{dest: "preset: stripe\nidempotency: {key: episode}",
		srv: delivertest.Options{IdempotencyHeader: "Idempotency-Key", Window: 24 * time.Hour}})
	if !strings.Contains(fmt.Sprint(x.cfg.Warnings), "idempotency.key: episode") {
		t.Errorf("no load-time warning about key: episode on a Stripe destination: %v", x.cfg.Warnings)
	}
	short := x.order("cus_1", 1)
	long := x.order(strings.Repeat("x", 250), 1)
	x.drain()
	sent := map[string]string{}
	for _, r := range x.dest.Requests() {
		sent[r.Key] = r.Header.Get("Idempotency-Key")
	}
	if got := sent[short.EpisodeKey]; got != short.EpisodeKey {
		t.Errorf("short key sent as %q, want the episode key %q", got, short.EpisodeKey)
	}
	if got := sent[hashedKey(long.EpisodeKey)]; got != hashedKey(long.EpisodeKey) {
		t.Errorf("episode key of %d characters: sent %v, want it hashed", len(long.EpisodeKey), sent)
	}
	for _, e := range []*store.Effect{short, long} {
		x.wantState(x.get(e.ID), store.EffectDone)
	}
}

// The lookup that settles an unknown outcome (and continuous
// verification, which uses it) can search by the key the destination was
// sent: idempotency_key is that key, hashed or not.
func TestLookupSearchesByTheSentKey(t *testing.T) {
	x := newWorld(t, setup{dest: "preset: stripe\nlookup:\n  path: '\"/effects/\" + idempotency_key'\n  found: status == 200\n  ref: body.id",
		srv: delivertest.Options{IdempotencyHeader: "Idempotency-Key", Window: 24 * time.Hour}})
	e := x.order("ada@example.com", 1)
	key := hashedKey(e.EpisodeKey)
	x.dest.Script(key, delivertest.TimeoutAfterWork)
	x.drain()
	e = x.get(e.ID)
	x.wantState(e, store.EffectDone)
	if !strings.Contains(e.Reason, "reconciled") || x.dest.Lookups(key) != 1 || x.dest.Executions(key) != 1 || x.dest.Calls(key) != 1 {
		t.Fatalf("%s: lookups %d executions %d calls %d", e.Reason, x.dest.Lookups(key), x.dest.Executions(key), x.dest.Calls(key))
	}
}

// Without a lookup, an unknown outcome inside the key's window is resent
// under the same hashed key, and the destination answers from its saved
// result instead of doing the work again.
func TestUnknownOutcomeResentUnderTheSameHashedKey(t *testing.T) {
	x := newWorld(t, setup{dest: "preset: stripe", srv: delivertest.Options{IdempotencyHeader: "Idempotency-Key", Window: 24 * time.Hour}})
	e := x.order("ada@example.com", 1)
	key := hashedKey(e.EpisodeKey)
	x.dest.Script(key, delivertest.TimeoutAfterWork)
	if e = x.until(e.ID, store.EffectDone); e.DestinationRef == "" {
		t.Fatal("done without the destination's id")
	}
	reqs := x.dest.Requests()
	if len(reqs) != 2 || !reqs[1].Replayed || reqs[0].Header.Get("Idempotency-Key") != key || reqs[1].Header.Get("Idempotency-Key") != key {
		t.Fatalf("requests %+v", reqs)
	}
	if x.dest.Executions(key) != 1 {
		t.Fatalf("executed %d times", x.dest.Executions(key))
	}
}

// orderEvent commits one order event under the given event id (which
// names the effects' causation) and processes it.
func (x *world) orderEvent(eventID, id string) *store.Effect {
	x.t.Helper()
	x.events++
	body, _ := json.Marshal(map[string]any{"order_id": id, "rev": 1, "state": "PAID"})
	res, err := x.st.InboxCommit(x.ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{
		Deliveries: []*store.DeliveryInput{{RequestID: fmt.Sprint("req-", x.events), Source: "shop",
			EventID: eventID, Type: "order.paid", OccurredAt: x.clk.Now(), ReceivedAt: x.clk.Now(), Body: body}},
	}}})
	if err != nil || res[0].Err != nil {
		x.t.Fatalf("commit: %v %v", err, res)
	}
	if err := x.eng.Drain(x.ctx); err != nil {
		x.t.Fatalf("process: %v", err)
	}
	for _, e := range x.effects() {
		if e.Entity == id {
			return e
		}
	}
	x.t.Fatalf("no effect for %s", id)
	return nil
}

// An effect whose causation id holds characters no HTTP header may carry
// (a C1 control such as U+0085, ESC, DEL, a tab) or text beyond ASCII is
// delivered, not sent to the exception queue: the causation header is
// percent-encoded, and decodes back to the causation id.
func TestCausationHeaderIsEncoded(t *testing.T) {
	x := newWorld(t, setup{})
	ids := []string{"ctl\u0085id", "esc\x1bid", "del\x7fid tab\tid", "café-€-id", "100%-plain"}
	var effects []*store.Effect
	for i, id := range ids {
		effects = append(effects, x.orderEvent(id, fmt.Sprint("o", i)))
	}
	x.drain()
	got := map[string]string{}
	for _, r := range x.dest.Requests() {
		got[r.Key] = r.Header.Get("X-Hookledger-Causation")
	}
	for i, e := range effects {
		x.wantState(x.get(e.ID), store.EffectDone)
		want := "shop/" + ids[i]
		if e.CausationID != want {
			t.Fatalf("effect causation %q, want %q", e.CausationID, want)
		}
		h := got[e.EpisodeKey]
		for _, c := range h {
			if c <= 0x20 || c >= 0x7f {
				t.Errorf("%q: header %q holds %q", want, h, c)
			}
		}
		dec, err := decodePercent(h)
		if err != nil || dec != want {
			t.Errorf("header %q decodes to %q (%v), want %q", h, dec, err, want)
		}
	}
	if h := got[effects[4].EpisodeKey]; h != "shop/100%25-plain" {
		t.Errorf("a %% is encoded too, so decoding is exact: %q", h)
	}
}

// decodePercent is a receiver's decoder, written from the documented rule.
func decodePercent(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("truncated escape at %d", i)
		}
		v, err := hex.DecodeString(s[i+1 : i+3])
		if err != nil {
			return "", err
		}
		b.WriteByte(v[0])
		i += 2
	}
	return b.String(), nil
}

// An episode key that cannot go in a header as it is (an entity with a
// control character, stored before entities were held to the identity
// rules) is sent hashed under key: episode, never refused: a refusal
// would be permanent, a dead effect no retry could fix. A flow can no
// longer compute such an entity, so the rule is shown on the key alone.
func TestUnsendableEpisodeKeyIsSentHashed(t *testing.T) {
	d := &config.Destination{Idem: &config.Idempotency{Header: "Idempotency-Key", Key: config.IdempotencyKeyEpisode}}
	for _, k := range []string{"orders:o\x1b[31m1:r1:charge", "orders:o\r\nX: 1:r1:charge", "orders:o\u00851:r1:charge"} {
		if got := deliver.IdempotencyKey(d, k); got != hashedKey(k) {
			t.Errorf("%q sent as %q, want it hashed", k, got)
		}
	}
	if got := deliver.IdempotencyKey(d, "orders:o1:r1:charge"); got != "orders:o1:r1:charge" {
		t.Errorf("a sendable key was sent as %q", got)
	}
}

// A person sent to look for an effect at a destination that knows it by a
// hashed key is told that key; a block that names only the window takes
// the rest (header, key) from the preset.
func TestRepairNamesTheSentKey(t *testing.T) {
	x := newWorld(t, setup{dest: "preset: stripe\nidempotency: {window: 1m}",
		srv: delivertest.Options{IdempotencyHeader: "Idempotency-Key", Window: time.Minute}})
	e := x.order("ada@example.com", 1)
	key := hashedKey(e.EpisodeKey)
	x.dest.Script(key, delivertest.TimeoutAfterWork)
	x.clk.Advance(2 * time.Minute) // past the key's window: no resend
	x.drain()
	e = x.get(e.ID)
	x.wantState(e, store.EffectNeedsReconciliation)
	if !strings.Contains(e.SuggestedRepair, "episode "+e.EpisodeKey+" (sent as Idempotency-Key "+key+")") {
		t.Fatalf("repair %q does not name the key sent", e.SuggestedRepair)
	}
}

// An effect that went dead before the causation header was encoded (its
// reason "value contains a control character") is delivered when a person
// retries it: its stored causation id is sent encoded now.
func TestEffectDeadForItsCausationDeliversOnRetry(t *testing.T) {
	x := newWorld(t, setup{})
	e := x.orderEvent("ctl\u0085id", "o1")
	claims, err := x.st.EffectClaim(x.ctx, &store.EffectClaimParams{Owner: "old-worker", Now: x.clk.Now(), LeaseFor: 30 * time.Second,
		Limit: 10, Destinations: []string{"dest"}, MaxRedrives: 3})
	if err != nil || len(claims) != 1 {
		t.Fatalf("claim: %v %v", claims, err)
	}
	if err := x.st.EffectSettle(x.ctx, &store.EffectSettleParams{EffectID: e.ID, Token: claims[0].Token, Now: x.clk.Now(), Actor: "old-worker",
		State: store.EffectDead, Class: store.ClassPermanent,
		Reason: "request refused before sending: header X-Hookledger-Causation: value contains a control character (such as CR or LF), which would start another header"}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.st.EffectOperate(x.ctx, &store.EffectOperateParams{EffectID: e.ID, Action: store.OperateRetry, Actor: "operator:alice",
		Note: "causation header fixed", Now: x.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDone)
	if reqs := x.dest.Requests(); len(reqs) != 1 || reqs[0].Header.Get("X-Hookledger-Causation") != "shop/ctl%C2%85id" {
		t.Fatalf("requests %+v", reqs)
	}
}
