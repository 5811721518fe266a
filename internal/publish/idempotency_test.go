package publish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// gatedStore is the real store whose next MessagePublish, once armed,
// waits until released: the first request of a key is then still being
// stored.
type gatedStore struct {
	store.Store
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func (g *gatedStore) arm() {
	g.entered, g.release = make(chan struct{}), make(chan struct{})
	g.armed.Store(true)
}

func (g *gatedStore) MessagePublish(ctx context.Context, p *store.MessagePublishParams) (*store.MessagePublishResult, error) {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return g.Store.MessagePublish(ctx, p)
}

// try publishes body under key and returns the result or the error.
func (e *env) try(ctx context.Context, key, body string) (*Result, error) {
	e.t.Helper()
	m, fp, err := DecodeMessage([]byte(body))
	if err != nil {
		e.t.Fatal(err)
	}
	return e.s.Publish(ctx, key, fp, m, "test")
}

// The Idempotency-Key of a publish goes new → in flight → stored: while
// its first request is being stored a second one is refused as in
// flight; once stored, the same payload (however written) replays the
// first message and another payload is a mismatch; a request that fails
// to store holds nothing, so the key stays new; and an expired key is new
// again.
func TestIdempotencyKeyStates(t *testing.T) { eachStore(t, testIdempotencyKeyStates) }

func testIdempotencyKeyStates(t *testing.T, storeURL string) {
	st, err := storeopen.Open(context.Background(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	gate := &gatedStore{Store: st}
	e := build(t, gate, clock.NewFake(t0), "publish:\n  idempotency_window: 1h\n")
	e.create("partner", "https://partner.example/hooks")
	outcome := func(name string) float64 { return e.counter(e.s.m.requests.WithLabelValues(name)) }
	const a = `{"type":"invoice.paid","data":{"id":"in_1","amount":4200}}`
	const aAgain = " {\"data\": {\"amount\": 4200, \"id\": \"in_1\"},\n \"type\": \"invoice.paid\"}"
	const b = `{"type":"invoice.paid","data":{"id":"in_1","amount":4300}}`

	// new → in flight: the first request is being stored.
	gate.arm()
	first := make(chan *Result, 1)
	go func() {
		res, err := e.try(e.ctx, "k", a)
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	<-gate.entered
	for _, body := range []string{a, b} {
		if _, err := e.try(e.ctx, "k", body); !errors.Is(err, ErrKeyInFlight) || !errors.Is(err, ErrConflict) {
			t.Fatalf("while the first is stored: %v, want ErrKeyInFlight (409)", err)
		}
	}
	// Another key is not held up by it.
	if res, err := e.try(e.ctx, "other", b); err != nil || res.Replayed {
		t.Fatalf("another key meanwhile: %+v, %v", res, err)
	}
	close(gate.release)
	orig := <-first
	if orig == nil || orig.Replayed || len(orig.Endpoints) != 1 {
		t.Fatalf("the first request: %+v, want a new message to partner", orig)
	}

	// stored: the same payload however written replays, another payload
	// is a mismatch; neither stores anything.
	res, err := e.try(e.ctx, "k", aAgain)
	if err != nil || !res.Replayed || res.ID != orig.ID || len(res.Endpoints) != 0 {
		t.Fatalf("the same payload again: %+v, %v; want a replay of %s", res, err, orig.ID)
	}
	if _, err := e.try(e.ctx, "k", b); !errors.Is(err, ErrKeyMismatch) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("another payload: %v, want ErrKeyMismatch (422)", err)
	}
	if n := len(e.messages()); n != 2 {
		t.Fatalf("%d messages stored, want 2 (k and other)", n)
	}
	if n := len(e.effects("partner")); n != 2 {
		t.Fatalf("%d deliveries, want 2", n)
	}

	// A request the store fails holds nothing: the key is new after it,
	// for any payload.
	gone, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := e.try(gone, "failing", a); err == nil || errors.Is(err, ErrInvalid) || errors.Is(err, ErrConflict) {
		t.Fatalf("a publish the store fails: %v, want a store error", err)
	}
	if res, err := e.try(e.ctx, "failing", b); err != nil || res.Replayed {
		t.Fatalf("the key after a failed store: %+v, %v; want a new message", res, err)
	}

	// Expired: new again, whatever the payload.
	e.clk.Advance(time.Hour + time.Second)
	if res, err := e.try(e.ctx, "k", b); err != nil || res.Replayed || res.ID == orig.ID {
		t.Fatalf("the key after its window: %+v, %v; want a new message", res, err)
	}
	for name, want := range map[string]float64{"published": 4, "replayed": 1, "key_mismatch": 1, "in_flight": 2} {
		if got := outcome(name); got != want {
			t.Errorf("hookledger_publish_requests_total{outcome=%q} = %v, want %v", name, got, want)
		}
	}
}

// On one database the store serialises a key between processes: the
// second process replays the first one's message, or refuses another
// payload, as the first process would.
func TestIdempotencyKeyAcrossProcesses(t *testing.T) { eachStore(t, testIdempotencyKeyAcrossProcesses) }

func testIdempotencyKeyAcrossProcesses(t *testing.T, storeURL string) {
	one := newEnv(t, storeURL, "{}")
	two := newEnvOn(t, one, "{}")
	res, err := one.try(one.ctx, "k", `{"type":"a.b","data":{"n":1}}`)
	if err != nil {
		t.Fatal(err)
	}
	again, err := two.try(two.ctx, "k", `{"data":{"n":1},"type":"a.b"}`)
	if err != nil || !again.Replayed || again.ID != res.ID {
		t.Fatalf("the other process: %+v, %v; want a replay of %s", again, err, res.ID)
	}
	if _, err := two.try(two.ctx, "k", `{"type":"a.b","data":{"n":2}}`); !errors.Is(err, ErrKeyMismatch) {
		t.Fatalf("the other process, another payload: %v", err)
	}
}

// A payload over publish.max_payload_bytes is refused and releases its
// key; one over publish.warn_payload_bytes is accepted with a warning.
func TestPayloadLimits(t *testing.T) {
	e := newEnv(t, sqliteURLOf(t), "publish:\n  warn_payload_bytes: 100\n  max_payload_bytes: 200\n")
	data := func(n int) string { return fmt.Sprintf(`{"type":"a.b","data":{"s":%q}}`, strings.Repeat("x", n)) }
	if _, err := e.try(e.ctx, "k", data(200)); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "over publish.max_payload_bytes (200)") {
		t.Fatalf("over the limit: %v", err)
	}
	res, err := e.try(e.ctx, "k", data(60))
	if err != nil || res.Replayed || len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "publish.warn_payload_bytes") {
		t.Fatalf("over the warning, same key: %+v, %v; want a new message with a warning", res, err)
	}
	if res, err := e.try(e.ctx, "small", data(1)); err != nil || len(res.Warnings) != 0 {
		t.Fatalf("a small payload: %+v, %v; want no warning", res, err)
	}
	if v := e.counter(e.s.m.oversize); v != 1 {
		t.Fatalf("hookledger_publish_oversize_total = %v, want 1", v)
	}
	if v := e.counter(e.s.m.requests.WithLabelValues("too_large")); v != 1 {
		t.Fatalf("too_large requests = %v, want 1", v)
	}
}

// A flow's effect sent to "endpoints" publishes once per episode: its
// message id and key come from the episode key, so a second call (after a
// lost answer) finds the first message; a body no message can be made of
// is refused for good (422), as is a payload too large (413).
func TestPublishAction(t *testing.T) { eachStore(t, testPublishAction) }

func testPublishAction(t *testing.T, storeURL string) {
	e := newEnv(t, storeURL, "publish:\n  max_payload_bytes: 300\n")
	e.create("partner", "https://partner.example/hooks", "order.*")
	act := e.s.Actions()[config.KindPublish]
	call := func(key, body string) (*deliver.Response, map[string]any) {
		t.Helper()
		resp, err := act.Do(e.ctx, &deliver.Call{EpisodeKey: key, Header: http.Header{}, Body: []byte(body)})
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		var out map[string]any
		if err := json.Unmarshal(resp.Body, &out); err != nil {
			t.Fatalf("%s: answer %s: %v", key, resp.Body, err)
		}
		return resp, out
	}
	resp, first := call("orders:o1:r1:tell", `{"type":"order.paid","data":{"id":"o1"}}`)
	if resp.Status != 202 || !resp.Sent || first["endpoints"] != 1.0 || first["replayed"] != false {
		t.Fatalf("publish: %d %v", resp.Status, first)
	}
	resp, again := call("orders:o1:r1:tell", `{"type":"order.paid","data":{"id":"o1"}}`)
	if resp.Status != 202 || again["id"] != first["id"] || again["replayed"] != true {
		t.Fatalf("the same effect again: %d %v, want a replay of %v", resp.Status, again, first["id"])
	}
	if _, other := call("orders:o1:r2:tell", `{"type":"order.paid","data":{"id":"o1"}}`); other["id"] == first["id"] {
		t.Fatal("another episode published under the same message id")
	}
	if resp, out := call("orders:o2:r1:tell", `{"type":"order.paid"}`); resp.Status != 422 || !resp.Sent || !strings.Contains(out["error"].(string), "data:") {
		t.Fatalf("a body without data: %d %v, want 422 naming data", resp.Status, out)
	}
	if resp, out := call("orders:o3:r1:tell", fmt.Sprintf(`{"type":"order.paid","data":{"s":%q}}`, strings.Repeat("x", 300))); resp.Status != 413 ||
		!strings.Contains(out["error"].(string), "max_payload_bytes") {
		t.Fatalf("a payload too large: %d %v, want 413", resp.Status, out)
	}
	if n := len(e.effects("partner")); n != 2 {
		t.Fatalf("%d deliveries to partner, want 2 (r1 and r2)", n)
	}
	// A failure to store is no answer: the worker retries the effect.
	gone, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := act.Do(gone, &deliver.Call{EpisodeKey: "orders:o4:r1:tell", Header: http.Header{}, Body: []byte(`{"type":"order.paid","data":{}}`)}); err == nil {
		t.Fatal("a publish the store failed answered as done")
	}
}
