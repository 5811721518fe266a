package server

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/testdep"
)

// fastPoll makes the background loops look for due work often, so a test
// that advances the fake clock sees the outcome soon.
const fastPoll = `delivery:
  poll_interval: 20ms
processing:
  poll_interval: 20ms
`

// Sixteen requests with one Idempotency-Key and one payload, sent at once,
// publish one message: each answer is 202 with that message's id or 409
// (the first still in flight), one message is stored and the endpoint gets
// it once. On PostgreSQL the requests are shared between two processes on
// one database, where the store serialises the key.
func TestPublishConcurrentDuplicates(t *testing.T) { stores(t, testPublishConcurrentDuplicates) }

func testPublishConcurrentDuplicates(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	h := startWith(t, publishConfig(storeURL, rcv.srv.URL)+fastPoll)
	servers := []*harness{h}
	if strings.HasPrefix(storeURL, "postgres") {
		servers = append(servers, startWith(t, publishConfig(storeURL, rcv.srv.URL)+fastPoll))
	}
	const n = 16
	body := `{"type":"invoice.paid","data":{"id":"in_dup","amount":4200}}`
	type answer struct {
		code int
		body string
		err  error
	}
	answers := make([]answer, n)
	// A client of its own, whose spare connections (dialed for a request
	// that another connection served) are closed before the server stops:
	// the server's shutdown waits seconds for a connection that never sent
	// a request.
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: openapitest.Transport(t, tr)}
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("POST", servers[i%len(servers)].base+"/api/v1/messages", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+adminToken)
			req.Header.Set("Idempotency-Key", "dup-key")
			req.Header.Set("Content-Type", "application/json")
			<-gate
			resp, err := client.Do(req)
			if err != nil {
				answers[i] = answer{err: err}
				return
			}
			defer resp.Body.Close()
			var b bytes.Buffer
			_, _ = b.ReadFrom(resp.Body)
			answers[i] = answer{code: resp.StatusCode, body: b.String()}
		}()
	}
	close(gate)
	wg.Wait()

	id, accepted := "", 0
	for i, a := range answers {
		switch {
		case a.err != nil:
			t.Fatalf("request %d: %v", i, a.err)
		case a.code == 202:
			var m api.MessageJSON
			if err := json.Unmarshal([]byte(a.body), &m); err != nil || m.ID == "" {
				t.Fatalf("request %d: 202 %s: %v", i, a.body, err)
			}
			if id != "" && m.ID != id {
				t.Fatalf("request %d answered message %s, another answered %s: one key published twice", i, m.ID, id)
			}
			id = m.ID
			accepted++
		case a.code == 409:
		default:
			t.Fatalf("request %d: %d %s, want 202 or 409", i, a.code, a.body)
		}
	}
	if accepted == 0 {
		t.Fatal("no request was accepted")
	}
	if msgs := h.published(); len(msgs) != 1 || msgs[0].EventID != id {
		t.Fatalf("stored messages %+v, want exactly %s", msgs, id)
	}
	waitFor(t, "the delivery to be done", func() bool {
		effs := h.effectList("destination=endpoint:partner")
		return len(effs) == 1 && effs[0].State == "done"
	})
	got := rcv.deliveries()
	if len(got) != 1 || got[0].header.Get("webhook-id") != id {
		t.Fatalf("%d deliveries (%v), want exactly one of %s", len(got), got, id)
	}
	// A retry now, after the commit, replays the first answer.
	code, resp, hdr := h.publish("dup-key", body)
	if code != 202 || !strings.Contains(resp, id) || hdr.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry after the commit: %d %s %v, want a replay of %s", code, resp, hdr, id)
	}
}

// A 410 Gone disables the endpoint at once and parks its messages; later
// messages park too; enabling it delivers all of them, in publication
// order, once each.
func TestPublishGoneDisablesAndParks(t *testing.T) { stores(t, testPublishGoneDisablesAndParks) }

func testPublishGoneDisablesAndParks(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	rcv.setStatus(410)
	// One delivery at a time to the partner: the order its parked
	// messages are re-driven in is only kept then (publishing.md, Order).
	cfg := strings.Replace(publishConfig(storeURL, rcv.srv.URL), "    allow_private_networks: true\n",
		"    allow_private_networks: true\n    max_in_flight: 1\n", 1)
	h := startWith(t, cfg+fastPoll)
	// Another endpoint for the same types keeps receiving meanwhile.
	healthy := newReceiver(t)
	h.createEndpoint(fmt.Sprintf(`{"id":"healthy","url":%q,"allow_private_networks":true,"types":["invoice.*"]}`, healthy.srv.URL))

	ids := []string{h.publishID("gone-1", `{"type":"invoice.paid","data":{"n":1}}`)}
	waitFor(t, "the 410 to park the message", func() bool {
		return len(h.effectList("destination=endpoint:partner&state=dead")) == 1
	})
	e := h.endpoint("partner")
	if e.Enabled || !strings.Contains(e.DisabledReason, "410") {
		t.Fatalf("after a 410 the endpoint is %+v, want disabled with a reason naming 410", e)
	}
	dead := h.effectList("destination=endpoint:partner&state=dead")[0]
	if !strings.HasPrefix(dead.Reason, "parked") && !strings.Contains(dead.Reason, "410") {
		t.Fatalf("dead effect reason %q, want it parked or naming 410", dead.Reason)
	}
	if v := h.metric("hookledger_endpoints_disabled_total"); v != 1 {
		t.Fatalf("hookledger_endpoints_disabled_total = %v, want 1", v)
	}

	for i := 2; i <= 4; i++ {
		ids = append(ids, h.publishID(fmt.Sprint("gone-", i), fmt.Sprintf(`{"type":"invoice.paid","data":{"n":%d}}`, i)))
	}
	waitFor(t, "the later messages to park", func() bool {
		return len(h.effectList("destination=endpoint:partner&state=dead")) == 4
	})
	for _, f := range h.effectList("destination=endpoint:partner&state=dead") {
		if f.EpisodeKey != "publish:"+ids[0]+":partner" && !strings.HasPrefix(f.Reason, "parked") {
			t.Errorf("effect %s: reason %q, want parked", f.EpisodeKey, f.Reason)
		}
	}
	if n := len(rcv.deliveries()); n != 1 {
		t.Fatalf("the disabled endpoint got %d deliveries, want only the first one (answered 410)", n)
	}
	if p := h.endpoint("partner").Parked; p == nil || *p != 4 {
		t.Fatalf("parked = %v, want 4", p)
	}
	waitFor(t, "the healthy endpoint's deliveries", func() bool {
		return len(h.effectList("destination=endpoint:healthy&state=done")) == 4
	})
	if e := h.endpoint("healthy"); !e.Enabled || *e.Parked != 0 || len(healthy.deliveries()) != 4 {
		t.Fatalf("the other endpoint %+v got %d deliveries, want enabled with all 4", e, len(healthy.deliveries()))
	}

	rcv.setStatus(204)
	code, b, _ := h.call("PATCH", "/api/v1/endpoints/partner", `{"enabled":true}`, adminToken)
	if code != 200 || !strings.Contains(string(b), `"enabled":true`) {
		t.Fatalf("enable: %d %s", code, b)
	}
	waitFor(t, "the parked messages to be delivered", func() bool {
		return len(h.effectList("destination=endpoint:partner&state=done")) == 4
	})
	got := rcv.deliveries()[1:]
	var order []string
	for _, d := range got {
		order = append(order, d.header.Get("webhook-id"))
	}
	if !slices.Equal(order, ids) {
		t.Fatalf("delivered after enabling: %v, want each once in publication order %v", order, ids)
	}
	if p := h.endpoint("partner").Parked; p == nil || *p != 0 {
		t.Fatalf("parked after the re-drive = %v, want 0", p)
	}
}

// An endpoint that fails every delivery for publish.disable_after is
// disabled, and a person is told which one.
func TestPublishFailingEndpointDisabled(t *testing.T) { stores(t, testPublishFailingEndpointDisabled) }

func testPublishFailingEndpointDisabled(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	rcv.setStatus(500)
	notes := newReceiver(t)
	h := startWith(t, publishConfig(storeURL, rcv.srv.URL)+fastPoll+fmt.Sprintf(`publish:
  disable_after: 1h
  schedule: [1m]
notifications:
  webhook_url: %s/notify
  allow_private_networks: true
`, notes.srv.URL))

	retryWaiting := func() bool {
		return len(h.effectList("destination=endpoint:partner&state=retry_wait")) == 1
	}
	// A success ends a run of failures: the run that disables is the
	// last one, not counted from the first failure ever.
	h.publishID("fail-0", `{"type":"invoice.paid","data":{"id":"in_early"}}`)
	waitFor(t, "an early failure", retryWaiting)
	if e := h.endpoint("partner"); e.FailingSince == nil || *e.FailingSince != t0.Format(time.RFC3339Nano) {
		t.Fatalf("after a failure failing_since = %v, want %s", e.FailingSince, t0)
	}
	rcv.setStatus(204)
	h.clk.Advance(50 * time.Minute)
	waitFor(t, "the early message to be delivered", func() bool {
		return len(h.effectList("destination=endpoint:partner&state=done")) == 1
	})
	waitFor(t, "the run of failures to end", func() bool { return h.endpoint("partner").FailingSince == nil })
	rcv.setStatus(500)

	id := h.publishID("fail-1", `{"type":"invoice.paid","data":{"id":"in_fail"}}`)
	waitFor(t, "the first attempt", func() bool { return len(rcv.deliveries()) == 3 })
	started := h.clk.Now()
	// Each step is past the retry's wait (1m + up to 20% jitter), so
	// each makes exactly one retry due.
	for attempts := 4; h.clk.Now().Sub(started) < time.Hour; attempts++ {
		waitFor(t, "the retry to be scheduled", retryWaiting)
		if e := h.endpoint("partner"); !e.Enabled {
			t.Fatalf("disabled after %s of failures, before disable_after (1h): %+v", h.clk.Now().Sub(started), e)
		}
		h.clk.Advance(10 * time.Minute)
		waitFor(t, fmt.Sprintf("attempt %d", attempts), func() bool { return len(rcv.deliveries()) == attempts })
	}
	waitFor(t, "the endpoint to be disabled", func() bool { return !h.endpoint("partner").Enabled })
	e := h.endpoint("partner")
	// The reason names when the run of failures began and the setting.
	if since := started.UTC().Format(time.RFC3339); !strings.Contains(e.DisabledReason, "since "+since) ||
		!strings.Contains(e.DisabledReason, "disable_after") {
		t.Fatalf("disabled reason %q, want it to name the failures since %s and disable_after", e.DisabledReason, since)
	}
	waitFor(t, "the notification", func() bool {
		for _, n := range notes.deliveries() {
			if strings.Contains(string(n.body), "endpoint partner") && strings.Contains(string(n.body), "disabled") {
				return true
			}
		}
		return false
	})
	// The message waiting for its next retry parks when it is next due.
	h.clk.Advance(10 * time.Minute)
	waitFor(t, "the message to park", func() bool {
		effs := h.effectList("destination=endpoint:partner&state=dead")
		return len(effs) == 1 && strings.HasPrefix(effs[0].Reason, "parked")
	})
	// Every attempt carries the message id, and its own timestamp.
	last := int64(0)
	for _, d := range rcv.deliveries()[2:] {
		if d.header.Get("webhook-id") != id {
			t.Fatalf("delivery of %s, want only %s", d.header.Get("webhook-id"), id)
		}
		var ts int64
		if _, err := fmt.Sscan(d.header.Get("webhook-timestamp"), &ts); err != nil || ts <= last {
			t.Fatalf("attempt timestamps %q after %d, want each attempt's own, increasing", d.header.Get("webhook-timestamp"), last)
		}
		last = ts
		if err := verifier(t, endpointSecret).VerifyIgnoringTimestamp(d.body, d.header); err != nil {
			t.Fatalf("a retry does not verify: %v", err)
		}
	}
	if v := h.metric("hookledger_endpoints_disabled_total"); v != 1 {
		t.Fatalf("hookledger_endpoints_disabled_total = %v, want 1", v)
	}
}

// secretsOf reads an endpoint's signing keys through the admin API.
func (h *harness) secretsOf(id string) []api.SecretJSON {
	h.t.Helper()
	code, b, _ := h.call("GET", "/api/v1/endpoints/"+id+"/secrets", "", adminToken)
	if code != 200 {
		h.t.Fatalf("secrets of %s: %d %s", id, code, b)
	}
	var out struct{ Secrets []api.SecretJSON }
	if err := json.Unmarshal(b, &out); err != nil {
		h.t.Fatalf("secrets JSON: %v: %s", err, b)
	}
	return out.Secrets
}

// createEndpoint makes an endpoint through the admin API (201) and
// returns it with its first key.
func (h *harness) createEndpoint(body string) api.EndpointJSON {
	h.t.Helper()
	code, b, _ := h.call("POST", "/api/v1/endpoints", body, adminToken)
	if code != 201 {
		h.t.Fatalf("create endpoint %s: %d %s", body, code, b)
	}
	var e api.EndpointJSON
	if err := json.Unmarshal(b, &e); err != nil || len(e.Secrets) != 1 || e.Secrets[0].Key == "" {
		h.t.Fatalf("created endpoint %s (%v): want one secret with its key", b, err)
	}
	return e
}

// rotate adds a generated key to an endpoint and returns it.
func (h *harness) rotate(id, body string) api.SecretJSON {
	h.t.Helper()
	code, b, _ := h.call("POST", "/api/v1/endpoints/"+id+"/rotate", body, adminToken)
	if code != 200 {
		h.t.Fatalf("rotate %s: %d %s", id, code, b)
	}
	var out struct{ Secret api.SecretJSON }
	if err := json.Unmarshal(b, &out); err != nil || out.Secret.Key == "" {
		h.t.Fatalf("rotate answer %s: %v", b, err)
	}
	return out.Secret
}

// verifier builds the reference library's verifier for one key.
func verifier(t *testing.T, key string) *standardwebhooks.Webhook {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(key)
	if err != nil {
		t.Fatal(err)
	}
	return wh
}

// entries returns a delivery's signature entries with the given label.
func entries(d received, label string) []string {
	var out []string
	for _, f := range strings.Fields(d.header.Get("webhook-signature")) {
		if strings.HasPrefix(f, label+",") {
			out = append(out, f)
		}
	}
	return out
}

// After a rotation every delivery is signed with both keys until the
// overlap ends, then with the new key only.
func TestPublishRotation(t *testing.T) { stores(t, testPublishRotation) }

func testPublishRotation(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	other := newReceiver(t)
	h := startWith(t, publishConfig(storeURL, other.srv.URL)+fastPoll)
	ep := h.createEndpoint(fmt.Sprintf(`{"id":"rot","url":%q,"allow_private_networks":true}`, rcv.srv.URL))
	oldKey := ep.Secrets[0].Key
	if !strings.HasPrefix(oldKey, "whsec_") {
		t.Fatalf("generated key %q, want whsec_", oldKey)
	}
	// deliver publishes the nth message and waits until the endpoint has
	// it and its effect is settled done: the clock moved on an hour while
	// a settle was still in flight would expire its lease, leave the
	// outcome to reconcile on a clock that stands still, and hold the
	// next message behind it.
	deliver := func(key string, n int) received {
		t.Helper()
		h.publishID(key, fmt.Sprintf(`{"type":"user.created","data":{"n":%d}}`, n))
		waitFor(t, "delivery "+key, func() bool {
			if len(rcv.deliveries()) == n {
				return true
			}
			// A claim round of the worker that read the clock before the
			// test moved it an hour leases with that reading: its lease
			// has run out when the round takes the new message, which then
			// waits for its retry as an unknown outcome. Let the clock
			// reach that retry, as a real one would.
			for _, e := range h.effectList("destination=endpoint:rot&state=retry_wait") {
				if at, err := time.Parse(time.RFC3339Nano, e.NextAttemptAt); err == nil && at.After(h.clk.Now()) {
					h.clk.Advance(at.Sub(h.clk.Now()))
				}
			}
			return false
		})
		waitFor(t, "delivery "+key+" settled done", func() bool {
			effs := h.effectList("destination=endpoint:rot")
			for _, e := range effs {
				if e.State != "done" {
					return false
				}
			}
			return len(effs) == n
		})
		return rcv.deliveries()[n-1]
	}

	d := deliver("rot-1", 1)
	if e := entries(d, "v1"); len(e) != 1 {
		t.Fatalf("signature %q, want one v1 entry", d.header.Get("webhook-signature"))
	}
	if err := verifier(t, oldKey).VerifyIgnoringTimestamp(d.body, d.header); err != nil {
		t.Fatalf("the created key does not verify: %v", err)
	}

	newKey := h.rotate("rot", `{"overlap":"1h"}`).Key
	if newKey == oldKey || !strings.HasPrefix(newKey, "whsec_") {
		t.Fatalf("rotated key %q, want a new whsec_ key", newKey)
	}
	d = deliver("rot-2", 2)
	sigs := entries(d, "v1")
	if len(sigs) != 2 {
		t.Fatalf("signature during the overlap %q, want two v1 entries", d.header.Get("webhook-signature"))
	}
	for name, key := range map[string]string{"old": oldKey, "new": newKey} {
		if err := verifier(t, key).VerifyIgnoringTimestamp(d.body, d.header); err != nil {
			t.Errorf("during the overlap the %s key does not verify: %v", name, err)
		}
	}
	// Each entry is one key's: with one entry only, one key verifies.
	verifiedBy := map[string]int{}
	for _, sig := range sigs {
		hdr := d.header.Clone()
		hdr.Set("webhook-signature", sig)
		for name, key := range map[string]string{"old": oldKey, "new": newKey} {
			if verifier(t, key).VerifyIgnoringTimestamp(d.body, hdr) == nil {
				verifiedBy[name]++
			}
		}
	}
	if verifiedBy["old"] != 1 || verifiedBy["new"] != 1 {
		t.Fatalf("entries verified by old/new key: %v, want one entry per key", verifiedBy)
	}

	h.clk.Advance(time.Hour + time.Minute)
	d = deliver("rot-3", 3)
	if e := entries(d, "v1"); len(e) != 1 {
		t.Fatalf("signature after the overlap %q, want one v1 entry", d.header.Get("webhook-signature"))
	}
	if err := verifier(t, newKey).VerifyIgnoringTimestamp(d.body, d.header); err != nil {
		t.Fatalf("after the overlap the new key does not verify: %v", err)
	}
	if err := verifier(t, oldKey).VerifyIgnoringTimestamp(d.body, d.header); err == nil {
		t.Fatal("after the overlap the old key still verifies")
	}
	if n := len(other.deliveries()); n != 0 {
		t.Fatalf("the config endpoint (types invoice.*) got %d user.created messages", n)
	}
}

// verifyCase is one case of scripts/publish-verify/verify.mjs.
type verifyCase struct {
	Name      string            `json:"name"`
	Headers   map[string]string `json:"headers"`
	Body      string            `json:"body"`
	Secret    *string           `json:"secret"`
	PublicKey *string           `json:"public_key"`
	Expect    string            `json:"expect"`
}

// publishVerifyDir finds scripts/publish-verify with its packages
// installed, skipping (or, in CI, failing) the test when it cannot run.
func publishVerifyDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "scripts", "publish-verify"))
	if err != nil {
		t.Fatal(err)
	}
	_, nodeErr := exec.LookPath("node")
	_, modErr := os.Stat(filepath.Join(dir, "node_modules"))
	if nodeErr == nil && modErr == nil {
		return dir
	}
	testdep.Missing(t, "the reference JavaScript verifier cannot run (node: %v; %s/node_modules: %v): published signatures are not checked "+
		"with the Standard Webhooks JavaScript library; install Node.js and run `npm ci --prefix scripts/publish-verify`", nodeErr, dir, modErr)
	return ""
}

// Published messages verify with the Standard Webhooks JavaScript library
// (v1) and an independent ed25519 implementation (v1a), for a v1 endpoint,
// a v1a endpoint and a rotated endpoint, and tampered copies do not. The
// verifier checks timestamps against the real time, so the server's fake
// clock starts at it. Signing does not depend on the store: SQLite only.
func TestPublishReferenceVerifier(t *testing.T) {
	dir := publishVerifyDir(t)
	rcv1, rcv1a, rcvRot, rcvMix := newReceiver(t), newReceiver(t), newReceiver(t), newReceiver(t)
	other := newReceiver(t)
	h := startAt(t, publishConfig(sqliteURL(t), other.srv.URL)+fastPoll, time.Now())

	v1 := h.createEndpoint(fmt.Sprintf(`{"id":"ep-v1","url":%q,"allow_private_networks":true,"types":["order.*"]}`, rcv1.srv.URL))
	v1a := h.createEndpoint(fmt.Sprintf(`{"id":"ep-v1a","url":%q,"allow_private_networks":true,"types":["order.*"],"secret_kind":"v1a"}`, rcv1a.srv.URL))
	rot := h.createEndpoint(fmt.Sprintf(`{"id":"ep-rot","url":%q,"allow_private_networks":true,"types":["order.*"]}`, rcvRot.srv.URL))
	rotNew := h.rotate("ep-rot", `{}`).Key
	rotOld := rot.Secrets[0].Key
	// A v1 endpoint moving to v1a signs with both kinds meanwhile.
	mix := h.createEndpoint(fmt.Sprintf(`{"id":"ep-mix","url":%q,"allow_private_networks":true,"types":["order.*"]}`, rcvMix.srv.URL))
	mixNew := h.rotate("ep-mix", `{"kind":"v1a"}`)
	if mixNew.Kind != "v1a" || !strings.HasPrefix(mixNew.PublicKey, "whpk_") {
		t.Fatalf("rotation to v1a made %+v", mixNew)
	}

	if s := v1a.Secrets[0]; s.Kind != "v1a" || !strings.HasPrefix(s.Key, "whsk_") || !strings.HasPrefix(s.PublicKey, "whpk_") {
		t.Fatalf("v1a endpoint secret %+v, want kind v1a, a whsk_ key and a whpk_ public key", s)
	}
	if s := h.secretsOf("ep-v1a"); len(s) != 1 || s[0].PublicKey != v1a.Secrets[0].PublicKey {
		t.Fatalf("GET secrets of the v1a endpoint: %+v, want its public key", s)
	}
	pub := v1a.Secrets[0].PublicKey
	// The endpoint itself shows the public key, never the signing key.
	if s := h.endpoint("ep-v1a").Secrets; len(s) != 1 || s[0].PublicKey != pub || s[0].Key != "" {
		t.Fatalf("GET the v1a endpoint: secrets %+v, want the public key only", s)
	}

	ids := []string{
		h.publishID("js-1", `{"type":"order.created","data":{"id":"ORD-1","total":"12.50","note":"caf\u00e9 \u2713"}}`),
		h.publishID("js-2", `{"type":"order.updated","data":{"id":"ORD-1","lines":[{"sku":"A","qty":2}]}}`),
	}
	for _, r := range []*receiver{rcv1, rcv1a, rcvRot, rcvMix} {
		waitFor(t, "both messages at each endpoint", func() bool { return len(r.deliveries()) == 2 })
	}
	for _, r := range []*receiver{rcv1, rcv1a, rcvRot, rcvMix} {
		for i, d := range r.deliveries() {
			if d.header.Get("webhook-id") != ids[i] {
				t.Fatalf("delivery %d is %s, want %s", i, d.header.Get("webhook-id"), ids[i])
			}
		}
	}
	for i, d := range rcv1a.deliveries() {
		if e := entries(d, "v1a"); len(e) != 1 || len(entries(d, "v1")) != 0 {
			t.Fatalf("v1a delivery %d signature %q, want one v1a entry", i, d.header.Get("webhook-signature"))
		}
	}
	for i, d := range rcvRot.deliveries() {
		if e := entries(d, "v1"); len(e) != 2 {
			t.Fatalf("rotated delivery %d signature %q, want two v1 entries", i, d.header.Get("webhook-signature"))
		}
	}

	str := func(s string) *string { return &s }
	headersOf := func(d received) map[string]string {
		return map[string]string{"webhook-id": d.header.Get("webhook-id"),
			"webhook-timestamp": d.header.Get("webhook-timestamp"), "webhook-signature": d.header.Get("webhook-signature")}
	}
	tamper := func(b []byte) string {
		return strings.Replace(string(b), `"ORD-1"`, `"ORD-2"`, 1)
	}
	otherPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	wrongPub := "whpk_" + base64.StdEncoding.EncodeToString(otherPub)
	wrongSecret := "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))

	var cases []verifyCase
	add := func(name string, d received, body string, secret, public *string, expect string) {
		cases = append(cases, verifyCase{Name: name, Headers: headersOf(d), Body: body, Secret: secret, PublicKey: public, Expect: expect})
	}
	for i := range 2 {
		d1, d1a, dr := rcv1.deliveries()[i], rcv1a.deliveries()[i], rcvRot.deliveries()[i]
		add(fmt.Sprintf("v1 message %d", i+1), d1, string(d1.body), str(v1.Secrets[0].Key), nil, "valid")
		add(fmt.Sprintf("v1a message %d", i+1), d1a, string(d1a.body), nil, str(pub), "valid")
		add(fmt.Sprintf("rotated message %d, old key", i+1), dr, string(dr.body), str(rotOld), nil, "valid")
		add(fmt.Sprintf("rotated message %d, new key", i+1), dr, string(dr.body), str(rotNew), nil, "valid")
		add(fmt.Sprintf("v1 message %d, body changed", i+1), d1, tamper(d1.body), str(v1.Secrets[0].Key), nil, "invalid")
		add(fmt.Sprintf("v1a message %d, body changed", i+1), d1a, tamper(d1a.body), nil, str(pub), "invalid")
		add(fmt.Sprintf("rotated message %d, body changed", i+1), dr, tamper(dr.body), str(rotNew), nil, "invalid")
		add(fmt.Sprintf("v1 message %d, wrong key", i+1), d1, string(d1.body), str(wrongSecret), nil, "invalid")
		add(fmt.Sprintf("v1 message %d, another endpoint's key", i+1), d1, string(d1.body), str(rotOld), nil, "invalid")
		add(fmt.Sprintf("v1a message %d, wrong public key", i+1), d1a, string(d1a.body), nil, str(wrongPub), "invalid")
		dm := rcvMix.deliveries()[i]
		if len(entries(dm, "v1")) != 1 || len(entries(dm, "v1a")) != 1 {
			t.Fatalf("v1 to v1a rotation: signature %q, want one v1 and one v1a entry", dm.header.Get("webhook-signature"))
		}
		add(fmt.Sprintf("v1 and v1a message %d, both keys", i+1), dm, string(dm.body), str(mix.Secrets[0].Key), str(mixNew.PublicKey), "valid")
		add(fmt.Sprintf("v1 and v1a message %d, wrong public key", i+1), dm, string(dm.body), str(mix.Secrets[0].Key), str(wrongPub), "invalid")
		add(fmt.Sprintf("v1 and v1a message %d, body changed", i+1), dm, tamper(dm.body), str(mix.Secrets[0].Key), str(mixNew.PublicKey), "invalid")
	}
	// Headers of one message over the body of the other.
	for _, r := range []struct {
		name           string
		rcv            *receiver
		secret, public *string
	}{{"v1", rcv1, str(v1.Secrets[0].Key), nil}, {"v1a", rcv1a, nil, str(pub)}, {"rotated", rcvRot, str(rotNew), nil}} {
		a, b := r.rcv.deliveries()[0], r.rcv.deliveries()[1]
		add(r.name+": headers of message 1 over the body of message 2", a, string(b.body), r.secret, r.public, "invalid")
		add(r.name+": headers of message 2 over the body of message 1", b, string(a.body), r.secret, r.public, "invalid")
	}
	if tamper(rcv1.deliveries()[0].body) == string(rcv1.deliveries()[0].body) {
		t.Fatal("the tampering changed nothing")
	}

	file := filepath.Join(t.TempDir(), "cases.json")
	data, err := json.MarshalIndent(map[string]any{"cases": cases}, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join(dir, "verify.mjs"), file)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	for _, l := range lines {
		if strings.Contains(l, `"ok":false`) {
			t.Errorf("reference verifier: %s", l)
		}
	}
	if runErr != nil {
		t.Fatalf("verify.mjs: %v\nstdout:\n%s\nstderr:\n%s", runErr, stdout.String(), stderr.String())
	}
	if len(lines) != len(cases) {
		t.Fatalf("verify.mjs printed %d lines for %d cases:\n%s", len(lines), len(cases), stdout.String())
	}
}

// A payload over publish.warn_payload_bytes is accepted with a warning; one
// over publish.max_payload_bytes is refused with 413 and stores nothing.
func TestPublishPayloadSize(t *testing.T) { stores(t, testPublishPayloadSize) }

func testPublishPayloadSize(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	h := startWith(t, publishConfig(storeURL, rcv.srv.URL)+fastPoll+"publish:\n  max_payload_bytes: 65536\n")
	big := func(n int) string {
		return fmt.Sprintf(`{"type":"invoice.paid","data":{"blob":%q}}`, strings.Repeat("x", n))
	}
	code, resp, _ := h.publish("size-warn", big(21*1024))
	var m api.MessageJSON
	if err := json.Unmarshal([]byte(resp), &m); code != 202 || err != nil || m.ID == "" || len(m.Warnings) != 1 ||
		!strings.Contains(m.Warnings[0], "warn_payload_bytes") {
		t.Fatalf("21 KiB payload: %d %s, want 202 with a warning naming warn_payload_bytes", code, resp)
	}
	if v := h.metric("hookledger_publish_oversize_total"); v != 1 {
		t.Fatalf("hookledger_publish_oversize_total = %v, want 1", v)
	}
	// A small message has no warnings key at all.
	code, resp, _ = h.publish("size-small", `{"type":"invoice.paid","data":{"id":"in_s"}}`)
	if code != 202 || strings.Contains(resp, "warnings") {
		t.Fatalf("small payload: %d %s, want 202 without warnings", code, resp)
	}

	// Over the limit as the request body, and (a body just under the
	// request limit) as the payload the endpoints would receive.
	for _, n := range []int{70 * 1024, 65536 - 20} {
		code, resp, hdr := h.publish(fmt.Sprint("size-", n), big(n))
		var p api.Problem
		if err := json.Unmarshal([]byte(resp), &p); code != 413 || err != nil || p.Status != 413 ||
			!strings.Contains(p.Detail, "max_payload_bytes") || hdr.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%d-byte data: %d %s %q, want 413 problem+json naming max_payload_bytes", n, code, resp, hdr.Get("Content-Type"))
		}
	}
	if v := h.metric("hookledger_publish_oversize_total"); v != 1 {
		t.Fatalf("hookledger_publish_oversize_total = %v after the refusals, want 1", v)
	}
	msgs := h.published()
	if len(msgs) != 2 || msgs[0].EventID != m.ID {
		t.Fatalf("stored messages %+v, want the two accepted only", msgs)
	}
	waitFor(t, "both deliveries", func() bool { return len(rcv.deliveries()) == 2 })
	if d := rcv.deliveries()[0]; len(d.body) < 21*1024 || d.header.Get("webhook-id") != m.ID {
		t.Fatalf("the large message arrived as %d bytes (%s)", len(d.body), d.header.Get("webhook-id"))
	}
}

// The endpoints API refuses bad requests precisely.
func TestPublishEndpointsAPIErrors(t *testing.T) { stores(t, testPublishEndpointsAPIErrors) }

func testPublishEndpointsAPIErrors(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	h := startWith(t, publishConfig(storeURL, rcv.srv.URL))
	cases := []struct {
		name, method, path, body, token string
		code                            int
		want                            string
	}{
		{"create without url", "POST", "/api/v1/endpoints", `{"id":"nourl"}`, adminToken, 400, `"param":"url"`},
		{"create with a bad url", "POST", "/api/v1/endpoints", `{"url":"ftp://x"}`, adminToken, 400, `"param":"url"`},
		{"create with a bad types glob", "POST", "/api/v1/endpoints", `{"url":"https://a.example/h","types":["["]}`, adminToken, 400, `"param":"types[0]"`},
		{"create with an unknown field", "POST", "/api/v1/endpoints", `{"url":"https://a.example/h","colour":"red"}`, adminToken, 400, "colour"},
		{"create with a bad id", "POST", "/api/v1/endpoints", `{"id":"no spaces","url":"https://a.example/h"}`, adminToken, 400, `"param":"id"`},
		{"create with a bad secret kind", "POST", "/api/v1/endpoints", `{"url":"https://a.example/h","secret_kind":"v2"}`, adminToken, 400, "kind"},
		{"create over a config endpoint", "POST", "/api/v1/endpoints", `{"id":"partner","url":"https://a.example/h"}`, adminToken, 409, "partner"},
		{"change a config endpoint's url", "PATCH", "/api/v1/endpoints/partner", `{"url":"https://other.example/h"}`, adminToken, 409, "config"},
		{"delete a config endpoint", "DELETE", "/api/v1/endpoints/partner", "", adminToken, 409, "config"},
		{"rotate a config endpoint", "POST", "/api/v1/endpoints/partner/rotate", `{}`, adminToken, 409, "config"},
		{"get an unknown id", "GET", "/api/v1/endpoints/nosuch", "", adminToken, 404, "no such endpoint"},
		{"patch an unknown id", "PATCH", "/api/v1/endpoints/nosuch", `{"enabled":false}`, adminToken, 404, "no such endpoint"},
		{"delete an unknown id", "DELETE", "/api/v1/endpoints/nosuch", "", adminToken, 404, "no such endpoint"},
		{"rotate an unknown id", "POST", "/api/v1/endpoints/nosuch/rotate", `{}`, adminToken, 404, "no such endpoint"},
		{"secrets of an unknown id", "GET", "/api/v1/endpoints/nosuch/secrets", "", adminToken, 404, "no such endpoint"},
		{"list without a token", "GET", "/api/v1/endpoints", "", "", 401, ""},
		{"get without a token", "GET", "/api/v1/endpoints/partner", "", "", 401, ""},
		{"secrets without a token", "GET", "/api/v1/endpoints/partner/secrets", "", "", 401, ""},
		{"create without a token", "POST", "/api/v1/endpoints", `{"url":"https://a.example/h"}`, "", 401, ""},
		{"publish without a token", "POST", "/api/v1/messages", `{"type":"a.b","data":{}}`, "", 401, ""},
		{"secrets with a wrong token", "GET", "/api/v1/endpoints/partner/secrets", "", "wrong", 401, ""},
		{"list with a parameter", "GET", "/api/v1/endpoints?enabled=true", "", adminToken, 400, "enabled"},
	}
	for _, tc := range cases {
		code, b, _ := h.call(tc.method, tc.path, tc.body, tc.token)
		if code != tc.code || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %d %s, want %d naming %q", tc.name, code, b, tc.code, tc.want)
		}
		if code == 401 && strings.Contains(string(b), endpointSecret) {
			t.Errorf("%s: a refused request sees the secret: %s", tc.name, b)
		}
	}
	if _, b, _ := h.call("GET", "/api/v1/endpoints", "", adminToken); strings.Contains(string(b), endpointSecret) || strings.Contains(string(b), "nourl") {
		t.Errorf("endpoint list shows a key, or a refused create was stored: %s", b)
	}
	if e := h.endpoint("partner"); len(e.Secrets) != 1 || e.Secrets[0].Key != "" || e.Origin != "config" {
		t.Errorf("GET endpoint %+v: want its one secret listed without the key", e)
	}
	if s := h.secretsOf("partner"); len(s) != 1 || s[0].Key != endpointSecret || s[0].Kind != "v1" {
		t.Errorf("secrets of partner %+v, want the configured key", s)
	}
	// A config endpoint takes enabled.
	if code, b, _ := h.call("PATCH", "/api/v1/endpoints/partner", `{"enabled":false}`, adminToken); code != 200 || !strings.Contains(string(b), `"enabled":false`) {
		t.Errorf("disable a config endpoint: %d %s, want 200", code, b)
	}

	// An API endpoint: deleted only once disabled.
	ep := h.createEndpoint(`{"url":"https://a.example/h","description":"d","owner":"team-x"}`)
	if !strings.HasPrefix(ep.ID, "ep_") || !ep.Enabled || ep.Origin != "api" {
		t.Fatalf("created endpoint %+v, want a generated id, enabled, origin api", ep)
	}
	if code, b, _ := h.call("DELETE", "/api/v1/endpoints/"+ep.ID, "", adminToken); code != 409 || !strings.Contains(string(b), "enabled") {
		t.Errorf("delete an enabled endpoint: %d %s, want 409 naming enabled", code, b)
	}
	if code, b, _ := h.call("POST", "/api/v1/endpoints", fmt.Sprintf(`{"id":%q,"url":"https://a.example/h"}`, ep.ID), adminToken); code != 409 {
		t.Errorf("create a second endpoint %s: %d %s, want 409", ep.ID, code, b)
	}
	if code, b, _ := h.call("PATCH", "/api/v1/endpoints/"+ep.ID, `{"types":["["]}`, adminToken); code != 400 || !strings.Contains(string(b), "types") {
		t.Errorf("patch a bad glob: %d %s, want 400 naming types", code, b)
	}
	if code, b, _ := h.call("PATCH", "/api/v1/endpoints/"+ep.ID, `{"secret":"whsec_AAAA"}`, adminToken); code != 400 || !strings.Contains(string(b), "rotate") {
		t.Errorf("patch a secret: %d %s, want 400 pointing at rotate", code, b)
	}
	if code, b, _ := h.call("POST", "/api/v1/endpoints/"+ep.ID+"/rotate", `{"overlap":"soon"}`, adminToken); code != 400 || !strings.Contains(string(b), "overlap") {
		t.Errorf("rotate with a bad overlap: %d %s, want 400 naming overlap", code, b)
	}
	if code, b, _ := h.call("PATCH", "/api/v1/endpoints/"+ep.ID, `{"enabled":false,"owner":"team-y"}`, adminToken); code != 200 || !strings.Contains(string(b), `"owner":"team-y"`) {
		t.Fatalf("disable: %d %s", code, b)
	}
	if code, b, _ := h.call("DELETE", "/api/v1/endpoints/"+ep.ID, "", adminToken); code != 204 {
		t.Fatalf("delete a disabled endpoint: %d %s, want 204", code, b)
	}
	if code, b, _ := h.call("GET", "/api/v1/endpoints/"+ep.ID, "", adminToken); code != 404 {
		t.Fatalf("GET a deleted endpoint: %d %s, want 404", code, b)
	}
}

// A flow's effect sent to "endpoints" publishes the flow's state as a
// message, once per episode: a duplicate inbound event publishes nothing.
func TestPublishFromFlow(t *testing.T) { stores(t, testPublishFromFlow) }

func testPublishFromFlow(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	h := startWith(t, fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
admin:
  token: %s
sources:
  - name: app
    kind: standard-webhooks
    secrets: [%s]
flows:
  - name: orders
    source: app
    events: ["order.*"]
    entity: event.data.id
    version: {mode: revision, revision: event.data.revision}
    state: event.data
    effects:
      - name: tell_partners
        destination: endpoints
        type: order.updated
        data: 'state'
endpoints:
  - id: partner
    url: %s
    types: ["order.*"]
    secrets: [%s]
    allow_private_networks: true
`, storeURL, adminToken, swSecret, rcv.srv.URL, endpointSecret)+fastPoll)

	wh := verifier(t, swSecret)
	send := func(msgID string, body []byte) {
		t.Helper()
		sig, err := wh.Sign(msgID, t0, body)
		if err != nil {
			t.Fatal(err)
		}
		hdr := http.Header{"Webhook-Id": {msgID}, "Webhook-Timestamp": {fmt.Sprint(t0.Unix())}, "Webhook-Signature": {sig}}
		if code, resp, _ := h.post("/hooks/app", body, hdr); code != 200 {
			t.Fatalf("inbound %s: %d %s", msgID, code, resp)
		}
	}
	settled := func(id string) string {
		ev := h.events("app", id)
		if len(ev) != 1 {
			return ""
		}
		return ev[0].Disposition
	}
	body := []byte(`{"type":"order.paid","timestamp":"2026-11-03T08:59:00Z","data":{"id":"ORD-7","revision":3,"status":"paid","total":1250}}`)
	send("in_1", body)
	waitFor(t, "the flow's effect to be done", func() bool {
		effs := h.effectList("destination=endpoints")
		return len(effs) == 1 && effs[0].State == "done"
	})
	if d := settled("in_1"); d != "applied" {
		t.Fatalf("inbound event %s, want applied", d)
	}
	waitFor(t, "the published message", func() bool { return len(rcv.deliveries()) == 1 })
	got := rcv.deliveries()[0]
	if err := verifier(t, endpointSecret).VerifyIgnoringTimestamp(got.body, got.header); err != nil {
		t.Fatalf("the published message does not verify: %v", err)
	}
	var payload struct {
		Type string
		Data json.RawMessage
	}
	if err := json.Unmarshal(got.body, &payload); err != nil {
		t.Fatal(err)
	}
	var data, want map[string]any
	_ = json.Unmarshal(payload.Data, &data)
	_ = json.Unmarshal([]byte(`{"id":"ORD-7","revision":3,"status":"paid","total":1250}`), &want)
	if payload.Type != "order.updated" || fmt.Sprint(data) != fmt.Sprint(want) {
		t.Fatalf("published %s, want type order.updated with the flow's state as data", got.body)
	}
	msgs := h.published()
	if len(msgs) != 1 || msgs[0].EventID != got.header.Get("webhook-id") || msgs[0].Type != "order.updated" {
		t.Fatalf("stored messages %+v, want the one delivered", msgs)
	}

	// The same delivery again, and the same event under another id (the
	// same entity and revision): neither publishes.
	send("in_1", body)
	send("in_2", body)
	waitFor(t, "the second event to settle", func() bool { d := settled("in_2"); return d != "" && d != "accepted" })
	if d := settled("in_2"); d != "duplicate" {
		t.Errorf("the same order revision under another id: %s, want duplicate", d)
	}
	if ev := h.events("app", "in_1"); len(ev) != 1 || ev[0].Deliveries != 2 {
		t.Errorf("in_1 = %+v, want one event with two deliveries", ev)
	}
	if effs := h.effectList("destination=endpoints"); len(effs) != 1 {
		t.Fatalf("%d effects to endpoints, want 1", len(effs))
	}
	if msgs := h.published(); len(msgs) != 1 {
		t.Fatalf("%d messages published, want 1", len(msgs))
	}
	if effs := h.effectList("destination=endpoint:partner"); len(effs) != 1 || effs[0].State != "done" {
		t.Fatalf("deliveries to partner %+v, want one done", effs)
	}
	if n := len(rcv.deliveries()); n != 1 {
		t.Fatalf("%d deliveries, want 1", n)
	}
}

// An endpoint on a loopback address without allow_private_networks gets
// nothing: the delivery is refused before any byte is sent.
func TestPublishRefusesPrivateAddress(t *testing.T) { stores(t, testPublishRefusesPrivateAddress) }

func testPublishRefusesPrivateAddress(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	h := startWith(t, fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
admin:
  token: %s
endpoints:
  - id: inside
    url: %s/hooks
    secrets: [%s]
`, storeURL, adminToken, rcv.srv.URL, endpointSecret)+fastPoll)
	h.publishID("ssrf-1", `{"type":"invoice.paid","data":{"id":"in_1"}}`)
	waitFor(t, "the delivery to be refused", func() bool {
		return len(h.effectList("destination=endpoint:inside&state=dead")) == 1
	})
	dead := h.effectList("destination=endpoint:inside&state=dead")[0]
	if !strings.Contains(dead.Reason, "not a public address") || !strings.Contains(dead.Reason, "127.0.0.1") {
		t.Fatalf("dead reason %q, want it to name the non-public address", dead.Reason)
	}
	if n := len(rcv.deliveries()); n != 0 {
		t.Fatalf("the loopback receiver got %d requests, want none", n)
	}
	// The same from an endpoint made through the API.
	h.createEndpoint(fmt.Sprintf(`{"id":"inside2","url":%q}`, rcv.srv.URL))
	h.publishID("ssrf-2", `{"type":"invoice.paid","data":{"id":"in_2"}}`)
	waitFor(t, "the second delivery to be refused", func() bool {
		return len(h.effectList("destination=endpoint:inside2&state=dead")) == 1
	})
	if n := len(rcv.deliveries()); n != 0 {
		t.Fatalf("the loopback receiver got %d requests, want none", n)
	}
}

// A change made through the admin API applies to the next message: a new
// url receives it, and a type no longer matched is not sent.
func TestPublishEndpointChangesApply(t *testing.T) { stores(t, testPublishEndpointChangesApply) }

func testPublishEndpointChangesApply(t *testing.T, storeURL string) {
	before, after, other := newReceiver(t), newReceiver(t), newReceiver(t)
	h := startWith(t, publishConfig(storeURL, other.srv.URL)+fastPoll)
	h.createEndpoint(fmt.Sprintf(`{"id":"moving","url":%q,"allow_private_networks":true,"types":["user.*"]}`, before.srv.URL))
	first := h.publishID("move-1", `{"type":"user.created","data":{"id":"u1"}}`)
	waitFor(t, "the first message", func() bool { return len(before.deliveries()) == 1 })

	// The clock stands still: the change must be seen all the same.
	code, b, _ := h.call("PATCH", "/api/v1/endpoints/moving", fmt.Sprintf(`{"url":%q,"types":["user.deleted"]}`, after.srv.URL), adminToken)
	if code != 200 || !strings.Contains(string(b), after.srv.URL) {
		t.Fatalf("PATCH url and types: %d %s", code, b)
	}
	h.publishID("move-2", `{"type":"user.created","data":{"id":"u2"}}`)
	second := h.publishID("move-3", `{"type":"user.deleted","data":{"id":"u1"}}`)
	waitFor(t, "the message to the new url", func() bool { return len(after.deliveries()) == 1 })
	if id := after.deliveries()[0].header.Get("webhook-id"); id != second {
		t.Fatalf("the new url got %s, want %s", id, second)
	}
	effs := h.effectList("destination=endpoint:moving")
	if len(effs) != 2 || effs[0].EpisodeKey != "publish:"+first+":moving" || effs[1].EpisodeKey != "publish:"+second+":moving" {
		t.Fatalf("deliveries to the endpoint %+v, want the first and the user.deleted message only", effs)
	}
	if n := len(before.deliveries()); n != 1 {
		t.Fatalf("the old url got %d messages, want 1", n)
	}
	if n := len(other.deliveries()); n != 0 {
		t.Fatalf("the invoice endpoint got %d user messages", n)
	}
}
