package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// pub is one publishing test's store.
type pub struct {
	t   *testing.T
	ctx context.Context
	s   store.Store
}

func newPub(t *testing.T, o Opener) *pub {
	return &pub{t: t, ctx: context.Background(), s: o.Open(t)}
}

func spec(url string, types ...string) store.EndpointSpec {
	return store.EndpointSpec{
		URL:   url,
		Types: types,
		Secrets: []store.EndpointSecret{{ID: "sec_1", Kind: store.SecretHMAC,
			Key: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", CreatedAt: t0}},
	}
}

func (f *pub) put(p *store.EndpointPutParams) *store.Endpoint {
	f.t.Helper()
	if p.Origin == "" {
		p.Origin = store.OriginAPI
	}
	if p.Now.IsZero() {
		p.Now = t0
	}
	if p.Actor == "" {
		p.Actor = "operator:alice"
	}
	ep, err := f.s.EndpointPut(f.ctx, p)
	if err != nil {
		f.t.Fatalf("EndpointPut %s: %v", p.ID, err)
	}
	return ep
}

func (f *pub) get(id string) *store.Endpoint {
	f.t.Helper()
	ep, err := f.s.EndpointGet(f.ctx, id)
	if err != nil {
		f.t.Fatalf("EndpointGet %s: %v", id, err)
	}
	return ep
}

func (f *pub) list() []string {
	f.t.Helper()
	eps, err := f.s.EndpointList(f.ctx)
	if err != nil {
		f.t.Fatalf("EndpointList: %v", err)
	}
	var ids []string
	for _, ep := range eps {
		ids = append(ids, ep.ID)
	}
	return ids
}

func (f *pub) setState(p *store.EndpointStateParams) *store.Endpoint {
	f.t.Helper()
	if p.Now.IsZero() {
		p.Now = t0.Add(time.Minute)
	}
	ep, err := f.s.EndpointSetState(f.ctx, p)
	if err != nil {
		f.t.Fatalf("EndpointSetState %s: %v", p.ID, err)
	}
	return ep
}

func msg(id, key, typ string, now time.Time) *store.MessagePublishParams {
	return &store.MessagePublishParams{
		ID: id, Key: key, Fingerprint: "fp-" + id, KeyExpiresAt: now.Add(24 * time.Hour), Type: typ,
		Payload: []byte(`{"type":"` + typ + `","timestamp":"2026-11-03T09:30:15Z","data":{"id":"` + id + `","n":1.50}}`),
		Headers: map[string]string{"Content-Type": "application/json"},
		Actor:   "api:key_1", Now: now,
	}
}

func (f *pub) publish(p *store.MessagePublishParams) *store.MessagePublishResult {
	f.t.Helper()
	r, err := f.s.MessagePublish(f.ctx, p)
	if err != nil {
		f.t.Fatalf("MessagePublish %s: %v", p.ID, err)
	}
	return r
}

// publishAtOnce publishes n messages, the i-th made by m(i), all let go
// at the same moment, and returns each one's result and error.
func (f *pub) publishAtOnce(n int, m func(i int) *store.MessagePublishParams) ([]*store.MessagePublishResult, []error) {
	results := make([]*store.MessagePublishResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = f.s.MessagePublish(f.ctx, m(i))
		})
	}
	close(start)
	wg.Wait()
	return results, errs
}

func (f *pub) effects() []*store.Effect {
	f.t.Helper()
	es, err := f.s.EffectList(f.ctx, &store.EffectListParams{Flow: store.PublishFlow, Limit: 1000})
	if err != nil {
		f.t.Fatalf("EffectList: %v", err)
	}
	return es
}

func (f *pub) messages() []*store.Event {
	f.t.Helper()
	return events(f.t, f.s, &store.EventListParams{Source: store.PublishSource, Limit: 1000})
}

func (f *pub) audit(action string) []*store.AuditEntry {
	f.t.Helper()
	rows, err := f.s.AuditList(f.ctx, &store.AuditListParams{Action: action, Limit: 1000})
	if err != nil {
		f.t.Fatalf("AuditList: %v", err)
	}
	return rows
}

func testEndpointPutGetList(t *testing.T, o Opener) {
	f := newPub(t, o)
	if ep := f.get("ep_missing"); ep != nil {
		t.Fatalf("missing endpoint: %+v", ep)
	}
	b := f.put(&store.EndpointPutParams{ID: "ep_b", Spec: spec("https://b.example/hook", "invoice.*"), Enabled: true})
	f.put(&store.EndpointPutParams{ID: "ep_a", Origin: store.OriginConfig, Spec: spec("https://a.example/hook"), Enabled: true})
	if got := f.list(); !slices.Equal(got, []string{"ep_a", "ep_b"}) {
		t.Fatalf("list %v, want id order", got)
	}
	got := f.get("ep_b")
	if got == nil || got.URL != "https://b.example/hook" || !slices.Equal(got.Types, []string{"invoice.*"}) || !got.Enabled ||
		got.Origin != store.OriginAPI || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(t0) || got.Deleted ||
		len(got.Secrets) != 1 || got.Secrets[0].Key != b.Secrets[0].Key || !got.Secrets[0].CreatedAt.Equal(t0) {
		t.Fatalf("get ep_b: %+v", got)
	}
	if a := f.audit(store.ActionEndpointCreated); len(a) != 2 || a[0].Entity != "ep_b" || a[1].Entity != "ep_a" {
		t.Fatalf("created audit rows: %+v", a)
	}
	for _, a := range f.audit("") {
		if strings.Contains(a.Detail, "whsec_") {
			t.Fatalf("audit detail holds a secret: %q", a.Detail)
		}
	}
	// A replace keeps the state it did not set.
	fail := t0.Add(30 * time.Second)
	f.setState(&store.EndpointStateParams{ID: "ep_b", FailingSince: &fail})
	f.setState(&store.EndpointStateParams{ID: "ep_b", Enabled: new(false), Reason: "410 Gone from the receiver", Actor: "worker"})
	later := t0.Add(time.Hour)
	r := f.put(&store.EndpointPutParams{ID: "ep_b", Origin: store.OriginConfig, Spec: spec("https://b2.example/hook"), Enabled: true, Now: later})
	got = f.get("ep_b")
	for _, ep := range []*store.Endpoint{r, got} {
		if ep.URL != "https://b2.example/hook" || len(ep.Types) != 0 || ep.Enabled || ep.Origin != store.OriginAPI ||
			ep.DisabledReason != "410 Gone from the receiver" || !ep.FailingSince.Equal(fail) ||
			!ep.CreatedAt.Equal(t0) || !ep.UpdatedAt.Equal(later) {
			t.Fatalf("replace lost state: %+v", ep)
		}
	}
	if a := f.audit(store.ActionEndpointUpdated); len(a) != 1 || a[0].Entity != "ep_b" || !a[0].At.Equal(later) {
		t.Fatalf("updated audit rows: %+v", a)
	}
	// The config disabling an enabled endpoint.
	f.put(&store.EndpointPutParams{ID: "ep_a", Origin: store.OriginConfig, Spec: spec("https://a.example/hook"), Enabled: true,
		ForceDisabled: true, Now: later})
	if got := f.get("ep_a"); got.Enabled || got.DisabledReason != store.ReasonConfigDisabled || !got.DisabledAt.Equal(later) {
		t.Fatalf("force disabled: %+v", got)
	}
	if a := f.audit(store.ActionEndpointDisabled); len(a) != 2 || a[1].Entity != "ep_a" || a[1].Detail != store.ReasonConfigDisabled {
		t.Fatalf("disabled audit rows: %+v", a)
	}
	if _, err := f.s.EndpointPut(f.ctx, &store.EndpointPutParams{ID: "ep_x", Origin: "elsewhere", Now: t0}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("unknown origin: %v, want ErrInvalidArgument", err)
	}
	if _, err := f.s.EndpointPut(f.ctx, &store.EndpointPutParams{ID: "ep_x", Origin: store.OriginAPI, Spec: spec("https://x.example/", "invoice.[a"),
		Now: t0}); !errors.Is(err, store.ErrInvalidArgument) || f.get("ep_x") != nil {
		t.Fatalf("malformed type pattern: %v, want ErrInvalidArgument and nothing stored", err)
	}
}

func testEndpointSetState(t *testing.T, o Opener) {
	f := newPub(t, o)
	f.put(&store.EndpointPutParams{ID: "ep_a", Spec: spec("https://a.example/hook"), Enabled: true})
	at := t0.Add(time.Minute)
	ep := f.setState(&store.EndpointStateParams{ID: "ep_a", Enabled: new(false), Reason: "failing since 09:31", Actor: "worker", Now: at})
	if ep.Enabled || ep.DisabledReason != "failing since 09:31" || !ep.DisabledAt.Equal(at) || !ep.UpdatedAt.Equal(at) {
		t.Fatalf("disable: %+v", ep)
	}
	// No change of Enabled: no audit row.
	f.setState(&store.EndpointStateParams{ID: "ep_a", Enabled: new(false), Actor: "worker"})
	ep = f.setState(&store.EndpointStateParams{ID: "ep_a", Enabled: new(true), Actor: "operator:bob", Now: at.Add(time.Minute)})
	if !ep.Enabled || ep.DisabledReason != "" || !ep.DisabledAt.IsZero() {
		t.Fatalf("enable: %+v", ep)
	}
	fail := at.Add(2 * time.Minute)
	if ep = f.setState(&store.EndpointStateParams{ID: "ep_a", FailingSince: &fail}); !ep.FailingSince.Equal(fail) || !f.get("ep_a").FailingSince.Equal(fail) {
		t.Fatalf("failing since: %+v", ep)
	}
	if ep = f.setState(&store.EndpointStateParams{ID: "ep_a", FailingSince: &time.Time{}}); !ep.FailingSince.IsZero() || !f.get("ep_a").FailingSince.IsZero() {
		t.Fatalf("failing since cleared: %+v", ep)
	}
	dis, en := f.audit(store.ActionEndpointDisabled), f.audit(store.ActionEndpointEnabled)
	if len(dis) != 1 || dis[0].Actor != "worker" || dis[0].Detail != "failing since 09:31" || dis[0].Entity != "ep_a" ||
		len(en) != 1 || en[0].Actor != "operator:bob" {
		t.Fatalf("state audit: disabled %+v, enabled %+v", dis, en)
	}
	ep = f.setState(&store.EndpointStateParams{ID: "ep_a", Delete: true, Actor: "operator:bob"})
	if !ep.Deleted || ep.Enabled {
		t.Fatalf("delete: %+v", ep)
	}
	if got := f.get("ep_a"); got == nil || !got.Deleted || got.Enabled {
		t.Fatalf("a deleted endpoint reads back: %+v", got)
	}
	if ids := f.list(); len(ids) != 0 {
		t.Fatalf("list after delete: %v", ids)
	}
	if a := f.audit(store.ActionEndpointDeleted); len(a) != 1 || a[0].Entity != "ep_a" {
		t.Fatalf("deleted audit rows: %+v", a)
	}
	for _, id := range []string{"ep_a", "ep_missing"} {
		_, err := f.s.EndpointSetState(f.ctx, &store.EndpointStateParams{ID: id, Enabled: new(true), Now: t0})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("set state of %s: %v, want ErrNotFound", id, err)
		}
	}
	// Replacing a deleted endpoint needs Undelete, which starts it over.
	if _, err := f.s.EndpointPut(f.ctx, &store.EndpointPutParams{ID: "ep_a", Origin: store.OriginAPI, Spec: spec("https://a.example/"),
		Enabled: true, Now: t0.Add(time.Hour)}); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("put over a deleted endpoint: %v, want ErrConflict", err)
	}
	back := t0.Add(2 * time.Hour)
	ep = f.put(&store.EndpointPutParams{ID: "ep_a", Origin: store.OriginConfig, Spec: spec("https://a.example/"), Enabled: true,
		Undelete: true, Now: back})
	if ep.Deleted || !ep.Enabled || ep.Origin != store.OriginConfig || !ep.CreatedAt.Equal(back) || !f.get("ep_a").Enabled {
		t.Fatalf("undelete: %+v", ep)
	}
	if ids := f.list(); !slices.Equal(ids, []string{"ep_a"}) {
		t.Fatalf("list after undelete: %v", ids)
	}
}

// publishRequest is the stored request of a message's effect.
type publishRequest struct {
	Method  string            `json:"method"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
}

func testMessagePublishFanOut(t *testing.T, o Opener) {
	f := newPub(t, o)
	f.put(&store.EndpointPutParams{ID: "ep_all", Spec: spec("https://all.example/"), Enabled: true})
	f.put(&store.EndpointPutParams{ID: "ep_inv", Spec: spec("https://inv.example/", "invoice.*", "charge.failed"), Enabled: true})
	f.put(&store.EndpointPutParams{ID: "ep_off", Spec: spec("https://off.example/", "invoice.paid"), Enabled: true})
	f.put(&store.EndpointPutParams{ID: "ep_other", Spec: spec("https://other.example/", "customer.*"), Enabled: true})
	f.put(&store.EndpointPutParams{ID: "ep_gone", Spec: spec("https://gone.example/"), Enabled: true})
	f.setState(&store.EndpointStateParams{ID: "ep_off", Enabled: new(false), Reason: "operator"})
	f.setState(&store.EndpointStateParams{ID: "ep_gone", Delete: true})

	now := t0.Add(time.Hour)
	p := msg("msg_1", "key-1", "invoice.paid", now)
	p.CausationID, p.Hop = "cause-1", 2
	r := f.publish(p)
	want := []string{"ep_all", "ep_inv", "ep_off"}
	if r.Replayed || r.ID != "msg_1" || r.Fingerprint != "fp-msg_1" || !r.CreatedAt.Equal(now) || !slices.Equal(r.Endpoints, want) {
		t.Fatalf("publish: %+v", r)
	}
	evs := f.messages()
	if len(evs) != 1 || evs[0].EventID != "msg_1" || evs[0].Type != "invoice.paid" || evs[0].Disposition != store.DispositionApplied ||
		!evs[0].ReceivedAt.Equal(now) || evs[0].Deliveries != 1 {
		t.Fatalf("message event: %+v", evs)
	}
	ds, err := f.s.DeliveryList(f.ctx, &store.DeliveryListParams{Source: store.PublishSource, EventID: "msg_1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 1 || string(ds[0].Body) != string(p.Payload) || ds[0].RequestID != "msg_1" || ds[0].EventPK != evs[0].PK ||
		ds[0].Headers["Content-Type"] != "application/json" || ds[0].CausationID != "cause-1" || ds[0].Hop != 2 {
		t.Fatalf("message delivery: %+v", ds)
	}
	es := f.effects()
	if len(es) != len(want) {
		t.Fatalf("%d effects, want %d: %+v", len(es), len(want), es)
	}
	for _, e := range es {
		if !slices.Contains(want, e.Entity) || e.EpisodeKey != store.PublishEpisodeKey("msg_1", e.Entity) ||
			e.Destination != store.EndpointDestination(e.Entity) || e.State != store.EffectApproved ||
			e.Effect != store.PublishEffect || e.Version != "msg_1" || e.Source != store.PublishSource || e.SourceEventID != "msg_1" ||
			e.CausationID != "cause-1" || e.Hop != 2 || !e.CreatedAt.Equal(now) || e.Attempts != 0 {
			t.Fatalf("effect: %+v", e)
		}
		var req publishRequest
		if err := json.Unmarshal(e.Request, &req); err != nil {
			t.Fatalf("effect request %s: %v", e.Request, err)
		}
		if req.Method != "POST" || req.Headers["webhook-id"] != "msg_1" || !store.JSONEqual(req.Body, p.Payload) {
			t.Fatalf("effect request: %s", e.Request)
		}
	}
	if a := f.audit(store.ActionMessagePublished); len(a) != 1 || a[0].Source != store.PublishSource || a[0].EventID != "msg_1" ||
		a[0].Actor != "api:key_1" || !strings.Contains(a[0].Detail, "3 endpoint") {
		t.Fatalf("published audit rows: %+v", a)
	}
	// The delivery worker claims it by its endpoint's destination, at once.
	claimed, err := f.s.EffectClaim(f.ctx, &store.EffectClaimParams{Owner: "w1", Now: now, LeaseFor: time.Minute, Limit: 10,
		Destinations: []string{store.EndpointDestination("ep_inv")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed) != 1 || claimed[0].EpisodeKey != store.PublishEpisodeKey("msg_1", "ep_inv") || claimed[0].State != store.EffectApproved {
		t.Fatalf("claim: %+v", claimed)
	}
	// A message no endpoint takes is stored all the same.
	if r := f.publish(msg("msg_2", "key-2", "order.created", now.Add(time.Second))); r.Replayed || len(r.Endpoints) != 1 || r.Endpoints[0] != "ep_all" {
		t.Fatalf("second message: %+v", r)
	}
	if r := f.publish(msg("msg_3", "key-3", "customer.created", now.Add(time.Second))); len(r.Endpoints) != 2 {
		t.Fatalf("third message: %+v", r)
	}
	// The flow engine has nothing to do for messages.
	unrouted, err := f.s.EventListUnrouted(f.ctx, &store.EventListUnroutedParams{Limit: 100})
	if err != nil || len(unrouted) != 0 {
		t.Fatalf("unrouted events: %+v, %v", unrouted, err)
	}
	leases, err := f.s.EntityClaim(f.ctx, &store.EntityClaimParams{Owner: "p1", Now: now.Add(time.Hour), LeaseFor: time.Minute, Limit: 100})
	if err != nil || len(leases) != 0 {
		t.Fatalf("entity claim: %+v, %v", leases, err)
	}
	if n, err := f.s.WorkCount(f.ctx); err != nil || n != 0 {
		t.Fatalf("pending work: %d, %v", n, err)
	}
	// And hookledger check finds the messages and their effects sound.
	check, err := f.s.InvariantCheck(f.ctx, &store.InvariantCheckParams{})
	if err != nil || len(check.Findings) != 0 {
		t.Fatalf("invariant check: %v, %v", check, err)
	}
}

// A message for more endpoints than a driver writes in one statement
// gets one effect per endpoint all the same, each with the message's
// request, its own destination, in endpoint order.
func testMessagePublishWideFanOut(t *testing.T, o Opener) {
	f := newPub(t, o)
	var want []string
	for i := range 150 {
		id := fmt.Sprintf("ep_%03d", i)
		f.put(&store.EndpointPutParams{ID: id, Spec: spec("https://" + id + ".example/"), Enabled: true})
		want = append(want, id)
	}
	now := t0.Add(time.Hour)
	p := msg("msg_w", "key-w", "invoice.paid", now)
	if r := f.publish(p); !slices.Equal(r.Endpoints, want) {
		t.Fatalf("went to %d endpoints, want 150", len(r.Endpoints))
	}
	es := f.effects()
	if len(es) != 150 {
		t.Fatalf("%d effects, want 150", len(es))
	}
	for i, e := range es {
		var req publishRequest
		if err := json.Unmarshal(e.Request, &req); err != nil || !store.JSONEqual(req.Body, p.Payload) || req.Headers["webhook-id"] != "msg_w" {
			t.Fatalf("effect %d request %s: %v", i, e.Request, err)
		}
		if e.Entity != want[i] || e.Destination != store.EndpointDestination(want[i]) || e.EpisodeKey != store.PublishEpisodeKey("msg_w", want[i]) ||
			e.State != store.EffectApproved || e.Version != "msg_w" || !e.CreatedAt.Equal(now) {
			t.Fatalf("effect %d: %+v, want endpoint %s", i, e, want[i])
		}
	}
}

func testMessagePublishReplay(t *testing.T, o Opener) {
	f := newPub(t, o)
	f.put(&store.EndpointPutParams{ID: "ep_a", Spec: spec("https://a.example/"), Enabled: true})
	now := t0.Add(time.Hour)
	first := f.publish(msg("msg_1", "key-1", "invoice.paid", now))
	evs, effs, audits := len(f.messages()), len(f.effects()), len(f.audit(""))

	// Same key, another request: nothing written, the original named.
	again := msg("msg_2", "key-1", "invoice.voided", now.Add(time.Minute))
	again.Fingerprint = "fp-other"
	r := f.publish(again)
	if !r.Replayed || r.ID != "msg_1" || r.Fingerprint != "fp-msg_1" || !r.CreatedAt.Equal(first.CreatedAt) || len(r.Endpoints) != 0 {
		t.Fatalf("replay: %+v", r)
	}
	// The same message id again (a flow's publish retried after a crash).
	if r := f.publish(msg("msg_1", "key-1", "invoice.paid", now.Add(2*time.Minute))); !r.Replayed || r.ID != "msg_1" {
		t.Fatalf("retried publish: %+v", r)
	}
	if a, b, c := len(f.messages()), len(f.effects()), len(f.audit("")); a != evs || b != effs || c != audits {
		t.Fatalf("a replay wrote: events %d→%d, effects %d→%d, audit %d→%d", evs, a, effs, b, audits, c)
	}
	// Once the key expires it makes a new message.
	late := msg("msg_3", "key-1", "invoice.paid", now.Add(24*time.Hour))
	r = f.publish(late)
	if r.Replayed || r.ID != "msg_3" || r.Fingerprint != "fp-msg_3" || len(r.Endpoints) != 1 {
		t.Fatalf("publish after expiry: %+v", r)
	}
	if r := f.publish(msg("msg_4", "key-1", "invoice.paid", now.Add(25*time.Hour))); !r.Replayed || r.ID != "msg_3" {
		t.Fatalf("replay of the new holder: %+v", r)
	}
	if a, b := len(f.messages()), len(f.effects()); a != evs+1 || b != effs+1 {
		t.Fatalf("after expiry: %d events, %d effects", a, b)
	}
	if _, err := f.s.MessagePublish(f.ctx, &store.MessagePublishParams{ID: "msg_5", Key: "k", Payload: []byte("not json"), Now: now}); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("payload that is not JSON: %v, want ErrInvalidArgument", err)
	}
}

func testIdempotencyPrune(t *testing.T, o Opener) {
	f := newPub(t, o)
	for i := range 5 {
		p := msg(fmt.Sprintf("msg_%d", i), fmt.Sprintf("key-%d", i), "a.b", t0)
		p.KeyExpiresAt = t0.Add(time.Duration(i+1) * time.Hour)
		f.publish(p)
	}
	// Keys expiring at +1h, +2h and +3h are due at +3h; two at a time.
	at := t0.Add(3 * time.Hour)
	if n, err := f.s.IdempotencyPrune(f.ctx, at, 2); err != nil || n != 2 {
		t.Fatalf("prune: %d, %v; want 2", n, err)
	}
	if n, err := f.s.IdempotencyPrune(f.ctx, at, 2); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v; want 1", n, err)
	}
	if n, err := f.s.IdempotencyPrune(f.ctx, at, 2); err != nil || n != 0 {
		t.Fatalf("prune: %d, %v; want 0", n, err)
	}
	// A pruned key makes a new message; a kept one replays.
	if r := f.publish(msg("msg_new", "key-0", "a.b", t0.Add(time.Minute))); r.Replayed {
		t.Fatalf("pruned key replayed: %+v", r)
	}
	if r := f.publish(msg("msg_new2", "key-4", "a.b", t0.Add(time.Minute))); !r.Replayed || r.ID != "msg_4" {
		t.Fatalf("kept key: %+v", r)
	}
}

func testMessagePublishConcurrent(t *testing.T, o Opener) {
	f := newPub(t, o)
	f.put(&store.EndpointPutParams{ID: "ep_a", Spec: spec("https://a.example/"), Enabled: true})
	f.put(&store.EndpointPutParams{ID: "ep_b", Spec: spec("https://b.example/"), Enabled: true})
	const n = 8
	results, errs := f.publishAtOnce(n, func(i int) *store.MessagePublishParams {
		return msg(fmt.Sprintf("msg_%d", i), "key-race", "a.b", t0)
	})
	var winner string
	replays := 0
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("publish %d: %v", i, errs[i])
		}
		if !r.Replayed {
			if winner != "" {
				t.Fatalf("two messages for one key: %s and %s", winner, r.ID)
			}
			winner = r.ID
			continue
		}
		replays++
	}
	if winner == "" || replays != n-1 {
		t.Fatalf("winner %q, %d replays", winner, replays)
	}
	for _, r := range results {
		if r.ID != winner || r.Fingerprint != "fp-"+winner {
			t.Fatalf("result %+v names another message than %s", r, winner)
		}
	}
	if evs, effs := f.messages(), f.effects(); len(evs) != 1 || evs[0].EventID != winner || len(effs) != 2 {
		t.Fatalf("%d message events, %d effects; want 1 and 2", len(evs), len(effs))
	}
}

// testMessagePublishGroup: a group answers each message as publishing it
// alone would. A key the group holds twice replays for its second
// message, an invalid message is refused without the others, and a
// message whose id is taken fails alone: the group is published one by
// one, and the taken message's key is left free.
func testMessagePublishGroup(t *testing.T, o Opener) {
	f := newPub(t, o)
	alone := func() int64 { return f.s.(interface{ PublishesAlone() int64 }).PublishesAlone() }
	f.put(&store.EndpointPutParams{ID: "ep_a", Spec: spec("https://a.example/hooks"), Enabled: true})
	f.put(&store.EndpointPutParams{ID: "ep_b", Spec: spec("https://b.example/hooks"), Enabled: true})
	invalid := msg("msg_bad", "k_bad", "invoice.paid", t0)
	invalid.Payload = []byte("not json")
	as := f.s.MessagePublishGroup(f.ctx, []*store.MessagePublishParams{
		msg("msg_1", "k1", "invoice.paid", t0), msg("msg_2", "k2", "invoice.paid", t0),
		msg("msg_3", "k1", "invoice.paid", t0), invalid})
	// A replay names the original message, not its endpoints.
	for i, want := range []struct {
		id        string
		replayed  bool
		endpoints int
	}{{"msg_1", false, 2}, {"msg_2", false, 2}, {"msg_1", true, 0}} {
		if a := as[i]; a.Err != nil || a.Result.ID != want.id || a.Result.Replayed != want.replayed ||
			len(a.Result.Endpoints) != want.endpoints || a.Result.Fingerprint != "fp-"+want.id {
			t.Fatalf("answer %d: %+v %v, want %+v", i, a.Result, a.Err, want)
		}
	}
	if !errors.Is(as[3].Err, store.ErrInvalidArgument) || as[3].Result != nil {
		t.Fatalf("invalid message: %+v %v, want ErrInvalidArgument", as[3].Result, as[3].Err)
	}
	if n := alone(); n != 0 {
		t.Fatalf("a group of valid new messages was published alone %d times", n)
	}
	if evs, effs := f.messages(), f.effects(); len(evs) != 2 || len(effs) != 4 {
		t.Fatalf("%d message events and %d effects, want 2 and 4", len(evs), len(effs))
	}

	as = f.s.MessagePublishGroup(f.ctx, []*store.MessagePublishParams{
		msg("msg_4", "k4", "invoice.paid", t0), msg("msg_2", "k5", "invoice.paid", t0), msg("msg_6", "k6", "invoice.paid", t0)})
	if as[0].Err != nil || as[0].Result.ID != "msg_4" || as[2].Err != nil || as[2].Result.ID != "msg_6" {
		t.Fatalf("the others of a failing group: %+v %v, %+v %v", as[0].Result, as[0].Err, as[2].Result, as[2].Err)
	}
	if as[1].Err == nil || as[1].Result != nil {
		t.Fatalf("a taken message id: %+v %v, want an error", as[1].Result, as[1].Err)
	}
	if n := alone(); n != 1 {
		t.Fatalf("the failing group was published alone %d times, want 1", n)
	}
	if r := f.publish(msg("msg_7", "k5", "invoice.paid", t0)); r.Replayed || r.ID != "msg_7" {
		t.Fatalf("the failed message's key: %+v, want it free", r)
	}
	if evs, effs := f.messages(), f.effects(); len(evs) != 5 || len(effs) != 10 {
		t.Fatalf("%d message events and %d effects, want 5 and 10", len(evs), len(effs))
	}
	if n := len(f.audit(store.ActionMessagePublished)); n != 5 {
		t.Fatalf("%d message_published audit rows, want 5", n)
	}

	// A key held by a stored message replays it, for each of its
	// messages in the group; the new messages beside them are stored
	// each with its own delivery, and their effects name their own
	// events, whatever order the group's keys and ids come in.
	late := t0.Add(time.Minute)
	group := []*store.MessagePublishParams{msg("msg_9", "k9", "charge.failed", late), msg("msg_10", "k1", "invoice.paid", late),
		msg("msg_8", "k8", "invoice.paid", late), msg("msg_11", "k1", "invoice.paid", late), msg("msg_12", "k8", "invoice.paid", late)}
	group[0].CausationID, group[0].Hop = "cause-9", 3
	as = f.s.MessagePublishGroup(f.ctx, group)
	for i, want := range []struct {
		id       string
		replayed bool
	}{{"msg_9", false}, {"msg_1", true}, {"msg_8", false}, {"msg_1", true}, {"msg_8", true}} {
		if a := as[i]; a.Err != nil || a.Result.ID != want.id || a.Result.Replayed != want.replayed || a.Result.Fingerprint != "fp-"+want.id {
			t.Fatalf("answer %d: %+v %v, want %+v", i, a.Result, a.Err, want)
		}
	}
	if r := as[4].Result; !r.CreatedAt.Equal(late) || len(r.Endpoints) != 0 || len(as[2].Result.Endpoints) != 2 {
		t.Fatalf("the replay of a key the group stored: %+v, of %+v", r, as[2].Result)
	}
	if n := alone(); n != 1 {
		t.Fatalf("a group of new messages and replays was published alone, %d groups in all", n)
	}
	if evs := f.messages(); len(evs) != 7 {
		t.Fatalf("%d message events, want 7", len(evs))
	}
	for _, p := range []*store.MessagePublishParams{group[0], group[2]} {
		ds, err := f.s.DeliveryList(f.ctx, &store.DeliveryListParams{Source: store.PublishSource, EventID: p.ID})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || string(ds[0].Body) != string(p.Payload) || ds[0].RequestID != p.ID || ds[0].CausationID != p.CausationID ||
			ds[0].Hop != p.Hop || ds[0].Headers["Content-Type"] != "application/json" || !ds[0].ReceivedAt.Equal(late) {
			t.Fatalf("delivery of %s: %+v", p.ID, ds)
		}
	}
	effs := f.effects()
	if len(effs) != 14 {
		t.Fatalf("%d effects, want 14", len(effs))
	}
	for _, e := range effs {
		if e.SourceEventID != e.Version || e.EpisodeKey != store.PublishEpisodeKey(e.Version, e.Entity) {
			t.Fatalf("effect %d of message %s names event %s", e.ID, e.Version, e.SourceEventID)
		}
		var req publishRequest
		var body struct{ Data struct{ ID string } }
		if err := json.Unmarshal(e.Request, &req); err != nil || req.Headers["webhook-id"] != e.Version ||
			json.Unmarshal(req.Body, &body) != nil || body.Data.ID != e.Version {
			t.Fatalf("effect %d of message %s sends %s (%v)", e.ID, e.Version, e.Request, err)
		}
	}
}

// testMessagePublishConcurrentKeys: many publishes at once, each key sent
// twice under two message ids, as clients retrying on another connection
// do. However they fall into groups (twice in one group, or in two
// groups), each key stores one message, and its other publish replays it.
func testMessagePublishConcurrentKeys(t *testing.T, o Opener) {
	f := newPub(t, o)
	f.put(&store.EndpointPutParams{ID: "ep_a", Spec: spec("https://a.example/hooks"), Enabled: true})
	f.put(&store.EndpointPutParams{ID: "ep_b", Spec: spec("https://b.example/hooks"), Enabled: true})
	const keys = 24
	results, errs := f.publishAtOnce(2*keys, func(i int) *store.MessagePublishParams {
		return msg(fmt.Sprintf("msg_%d", i), fmt.Sprintf("k%d", i%keys), "a.b", t0)
	})
	for k := range keys {
		a, b := results[k], results[k+keys]
		if errs[k] != nil || errs[k+keys] != nil {
			t.Fatalf("key k%d: %v, %v", k, errs[k], errs[k+keys])
		}
		if a.ID != b.ID || a.Replayed == b.Replayed {
			t.Fatalf("key k%d: %+v and %+v, want one message and its replay", k, a, b)
		}
	}
	if evs, effs := f.messages(), f.effects(); len(evs) != keys || len(effs) != 2*keys {
		t.Fatalf("%d message events and %d effects, want %d and %d", len(evs), len(effs), keys, 2*keys)
	}
}

// EffectsDueNow brings an endpoint's waiting retries forward (a disabled
// endpoint parks them at once) and touches nothing else.
func testEffectsDueNow(t *testing.T, o Opener) {
	f := newPub(t, o)
	f.put(&store.EndpointPutParams{ID: "ep_a", Spec: spec("https://a.example/hooks"), Enabled: true})
	f.put(&store.EndpointPutParams{ID: "ep_b", Spec: spec("https://b.example/hooks"), Enabled: true})
	f.publish(msg("msg_1", "k1", "invoice.paid", t0))
	f.publish(msg("msg_2", "k2", "invoice.paid", t0))
	dest := store.EndpointDestination("ep_a")
	claimed, err := f.s.EffectClaim(f.ctx, &store.EffectClaimParams{Owner: "w1", Now: t0, LeaseFor: time.Minute, Limit: 10,
		Destinations: []string{dest, store.EndpointDestination("ep_b")}})
	if err != nil || len(claimed) != 4 {
		t.Fatalf("claim: %v, %d claimed, want 4", err, len(claimed))
	}
	later := t0.Add(10 * time.Hour)
	for _, c := range claimed {
		if err := f.s.EffectSettle(f.ctx, &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: t0, Actor: "w1",
			State: store.EffectRetryWait, NextAttemptAt: later, AddAttempt: true, Class: store.ClassTransient, Reason: "HTTP 500",
			Attempt: &store.Attempt{StartedAt: t0, Status: 500, Class: store.ClassTransient, Error: "HTTP 500"}}); err != nil {
			t.Fatal(err)
		}
	}
	now := t0.Add(time.Minute)
	n, err := f.s.EffectsDueNow(f.ctx, dest, now)
	if err != nil || n != 2 {
		t.Fatalf("EffectsDueNow: %d, %v; want 2", n, err)
	}
	for _, e := range f.effects() {
		want := later
		if e.Destination == dest {
			want = now
		}
		if !e.NextAttemptAt.Equal(want) || e.State != store.EffectRetryWait || e.Attempts != 1 {
			t.Errorf("%s: %s due %s attempts %d, want retry_wait due %s attempts 1", e.EpisodeKey, e.State, e.NextAttemptAt, e.Attempts, want)
		}
	}
	if n, err := f.s.EffectsDueNow(f.ctx, dest, now); err != nil || n != 0 {
		t.Fatalf("again: %d, %v; want 0 (nothing waits beyond now)", n, err)
	}
	due, err := f.s.EffectClaim(f.ctx, &store.EffectClaimParams{Owner: "w1", Now: now, LeaseFor: time.Minute, Limit: 10,
		Destinations: []string{dest, store.EndpointDestination("ep_b")}})
	if err != nil || len(due) != 2 || due[0].Destination != dest || due[1].Destination != dest {
		t.Fatalf("claim after: %v %d, want ep_a's two", err, len(due))
	}
}
