package publish

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

func ptr[T any](v T) *T { return &v }

// Creating an endpoint refuses each bad field by name and stores nothing;
// a good one gets an id, a key of the kind asked for, and a destination.
func TestCreateEndpoint(t *testing.T) {
	e := newEnv(t, sqliteURLOf(t), "{}")
	url := ptr("https://a.example/hooks")
	for _, tc := range []struct {
		name string
		in   EndpointInput
		want string
	}{
		{"no url", EndpointInput{ID: ptr("x")}, "url: required"},
		{"bad url", EndpointInput{URL: ptr("ftp://a.example/")}, "url:"},
		{"bad id", EndpointInput{ID: ptr("has space"), URL: url}, `id: "has space"`},
		{"bad glob", EndpointInput{URL: url, Types: &[]string{"a.*", "["}}, "types[1]:"},
		{"empty glob", EndpointInput{URL: url, Types: &[]string{""}}, "types[0]:"},
		{"max_in_flight", EndpointInput{URL: url, MaxInFlight: ptr(2000)}, "max_in_flight:"},
		{"negative max_in_flight", EndpointInput{URL: url, MaxInFlight: ptr(-1)}, "max_in_flight:"},
		{"rate_limit", EndpointInput{URL: url, RateLimit: ptr(-1.0)}, "rate_limit:"},
		{"secret kind", EndpointInput{URL: url, SecretKind: ptr("v2")}, "kind:"},
		{"short secret", EndpointInput{URL: url, Secret: ptr("whsec_c2hvcnQ=")}, "secret:"},
	} {
		_, err := e.s.Create(e.ctx, &tc.in, "test")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "c2hvcnQ") {
			t.Errorf("%s: %v, want ErrInvalid naming %q", tc.name, err, tc.want)
		}
	}
	if list, _ := e.s.List(e.ctx); len(list) != 0 {
		t.Fatalf("refused creates stored %d endpoints", len(list))
	}

	ep, err := e.s.Create(e.ctx, &EndpointInput{URL: url, SecretKind: ptr(store.SecretEd25519), Description: ptr("d"), Owner: ptr("team"),
		MaxInFlight: ptr(4), RateLimit: ptr(2.5), AllowPrivateNetworks: ptr(true)}, "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^ep_[0-9a-f]{16}$`).MatchString(ep.ID) || ep.Origin != store.OriginAPI || !ep.Enabled ||
		len(ep.Secrets) != 1 || ep.Secrets[0].Kind != store.SecretEd25519 || ep.Owner != "team" {
		t.Fatalf("created %+v", ep)
	}
	d := destinationOf(t, e, ep.ID)
	if d.BaseURL != *url || d.MaxInFlight != 4 || d.RateLimit.PerSecond != 2.5 || d.RateLimit.Burst != 2 || !d.AllowPrivateNetworks ||
		d.Owner != "team" || d.Idem == nil || d.Idem.Header != "webhook-id" || d.Retry.Attempts != e.cfg.Publish.Attempts() {
		t.Fatalf("destination %+v", d)
	}
	if _, err := e.s.Create(e.ctx, &EndpointInput{ID: &ep.ID, URL: url}, "test"); !errors.Is(err, ErrConflict) {
		t.Fatalf("create over an existing id: %v", err)
	}
	given, _ := newSecret(store.SecretHMAC, t0)
	off, err := e.s.Create(e.ctx, &EndpointInput{ID: ptr("off"), URL: url, Secret: &given.Key, Enabled: ptr(false)}, "test")
	if err != nil || off.Enabled || off.Secrets[0].ID != given.ID {
		t.Fatalf("create disabled with a given key: %+v, %v", off, err)
	}
	if d := destinationOf(t, e, "off"); !strings.HasPrefix(d.Paused, "endpoint off is disabled") || d.MaxInFlight != config.DefaultEndpointMaxInFlight || d.RateLimit.PerSecond != 0 {
		t.Fatalf("destination of a disabled endpoint %+v, want paused, default max_in_flight, no rate limit", d)
	}
}

// destinationOf returns the worker's destination of one endpoint.
func destinationOf(t *testing.T, e *env, id string) *config.Destination {
	t.Helper()
	_, ds := e.s.RuntimeDestinations()
	for _, d := range ds {
		if d.Name == store.EndpointDestination(id) {
			return d
		}
	}
	t.Fatalf("no destination for %s in %d", id, len(ds))
	return nil
}

// An update changes the fields given and leaves the others; an endpoint
// of the config file takes only enabled; ids and secrets do not change
// here.
func TestUpdateEndpoint(t *testing.T) {
	e := newEnv(t, sqliteURLOf(t), "endpoints:\n  - id: file\n    url: https://file.example/h\n    types: [file.*]\n")
	e.create("api", "https://a.example/hooks", "a.*")
	ep, err := e.s.Update(e.ctx, "api", &EndpointInput{Description: ptr("new"), Types: &[]string{"b.*"}, MaxInFlight: ptr(3)}, "test")
	if err != nil || ep.Description != "new" || len(ep.Types) != 1 || ep.Types[0] != "b.*" || ep.URL != "https://a.example/hooks" || ep.MaxInFlight != 3 {
		t.Fatalf("update: %+v, %v", ep, err)
	}
	if d := destinationOf(t, e, "api"); d.MaxInFlight != 3 {
		t.Fatalf("destination after the update: max_in_flight %d", d.MaxInFlight)
	}
	if res := e.publish("k", "a.x", `{}`); len(res.Endpoints) != 0 {
		t.Fatalf("a type the update removed still fans out to %v", res.Endpoints)
	}
	for _, tc := range []struct {
		name, id string
		in       EndpointInput
		is       error
		want     string
	}{
		{"id change", "api", EndpointInput{ID: ptr("other")}, ErrInvalid, "id:"},
		{"secret", "api", EndpointInput{Secret: ptr("whsec_x")}, ErrInvalid, "rotate"},
		{"secret kind", "api", EndpointInput{SecretKind: ptr("v1")}, ErrInvalid, "rotate"},
		{"bad url", "api", EndpointInput{URL: ptr("not a url")}, ErrInvalid, "url:"},
		{"file spec", "file", EndpointInput{URL: ptr("https://other.example/h")}, ErrConflict, "config file"},
	} {
		if _, err := e.s.Update(e.ctx, tc.id, &tc.in, "test"); !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %v naming %q", tc.name, err, tc.is, tc.want)
		}
	}
	if ep, err := e.s.Update(e.ctx, "nosuch", &EndpointInput{Enabled: ptr(false)}, "test"); ep != nil || err != nil {
		t.Fatalf("update an unknown endpoint: %v, %v; want nothing", ep, err)
	}
	ep, err = e.s.Update(e.ctx, "file", &EndpointInput{Enabled: ptr(false)}, "operator:alice")
	if err != nil || ep.Enabled || ep.DisabledReason != "by operator:alice" {
		t.Fatalf("disable a file endpoint: %+v, %v", ep, err)
	}
	if d := destinationOf(t, e, "file"); d.Paused != "endpoint file is disabled (by operator:alice)" {
		t.Fatalf("paused %q", d.Paused)
	}
	if got := e.stored("api"); got.URL != "https://a.example/hooks" || got.Description != "new" {
		t.Fatalf("refused updates changed api: %+v", got)
	}
}

// The endpoint action refuses what it cannot deliver without sending:
// an endpoint this process does not know, an effect that is not a
// message's delivery to it.
func TestEndpointActionRefuses(t *testing.T) {
	e := newEnv(t, sqliteURLOf(t), "{}")
	rcv := newReceiver(t)
	e.create("partner", rcv.srv.URL)
	act := e.s.Actions()[config.KindEndpoint]
	for _, tc := range []struct{ dest, key, want string }{
		{"endpoint:nosuch", store.PublishEpisodeKey("msg_1", "nosuch"), "not known"},
		{"endpoint:partner", "flow:x:partner", "not a delivery to endpoint partner"},
		{"endpoint:partner", store.PublishEpisodeKey("msg_1", "other"), "not a delivery"},
	} {
		d := &config.Destination{Name: tc.dest, Kind: config.KindEndpoint, BaseURL: rcv.srv.URL}
		resp, err := act.Do(e.ctx, &deliver.Call{Destination: d, Method: "POST", Header: http.Header{}, EpisodeKey: tc.key, Body: []byte(`{}`)})
		if err == nil || !strings.Contains(err.Error(), tc.want) || (resp != nil && resp.Sent) {
			t.Errorf("%s %s: %+v, %v; want an error naming %q", tc.dest, tc.key, resp, err, tc.want)
		}
	}
	if n := len(rcv.deliveries()); n != 0 {
		t.Fatalf("%d requests sent, want none", n)
	}
}
