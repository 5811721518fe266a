package deliver_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

// ga4 stands in for www.google-analytics.com: /mp/collect answers 204 to
// anything, as the Measurement Protocol does; /debug/mp/collect answers
// validationMessages for an event whose name starts with "_" (the
// documented NAME_INVALID example).
type ga4 struct {
	*httptest.Server
	mu    sync.Mutex
	calls []string // path?query
}

func newGA4(t *testing.T) *ga4 {
	g := &ga4{}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		g.mu.Lock()
		g.calls = append(g.calls, r.URL.Path+"?"+r.URL.RawQuery)
		g.mu.Unlock()
		switch r.URL.Path {
		case "/mp/collect":
			w.WriteHeader(http.StatusNoContent)
		case "/debug/mp/collect":
			w.Header().Set("Content-Type", "application/json")
			if strings.Contains(string(body), `"name":"_`) {
				io.WriteString(w, `{"validationMessages":[{"fieldPath":"events","description":"Event at index: [0] has invalid name [_badEventName]. Names must start with an alphabetic character.","validationCode":"NAME_INVALID"}]}`)
				return
			}
			io.WriteString(w, `{"validationMessages":[]}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(g.Close)
	return g
}

func (g *ga4) paths() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.calls...)
}

func ga4Dest(t *testing.T, baseURL, extra string) *config.Destination {
	t.Helper()
	cfg, err := config.Parse("d.yaml", []byte("destinations:\n  - name: ga4\n    preset: ga4-mp\n    allow_private_networks: true\n    base_url: "+baseURL+"\n"+extra), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return &cfg.Destinations[0]
}

func ga4Effect(name string) *store.Effect {
	req, _ := json.Marshal(map[string]any{"method": "POST", "path": "/mp/collect",
		"body": map[string]any{"client_id": "c1", "events": []any{map[string]any{"name": name}}}})
	return &store.Effect{ID: 7, EpisodeKey: "web:c1:r1:ga4", Destination: "ga4", Request: req}
}

// Validate sends the stored request to the validation endpoint, with the
// base_url's query (measurement_id and api_secret) kept, never to the
// live one, and returns the messages.
func TestValidateSendsToTheValidationEndpoint(t *testing.T) {
	g := newGA4(t)
	d := ga4Dest(t, g.URL+"?measurement_id=G-TEST&api_secret=s3cret", "")
	v, err := deliver.Validate(context.Background(), g.Client(), d, ga4Effect("_badEventName"))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Messages) != 1 || v.Messages[0] != (deliver.ValidationMessage{FieldPath: "events",
		Description: "Event at index: [0] has invalid name [_badEventName]. Names must start with an alphabetic character.", ValidationCode: "NAME_INVALID"}) {
		t.Fatalf("messages %+v", v.Messages)
	}
	v, err = deliver.Validate(context.Background(), g.Client(), d, ga4Effect("purchase"))
	if err != nil || v.Status != 200 || len(v.Messages) != 0 {
		t.Fatalf("valid event: %+v %v", v, err)
	}
	for _, p := range g.paths() {
		if p != "/debug/mp/collect?measurement_id=G-TEST&api_secret=s3cret" {
			t.Fatalf("calls %v: want only the validation endpoint with the base_url's query", g.paths())
		}
	}
}

func TestValidateRefusals(t *testing.T) {
	g := newGA4(t)
	// A preset without a validation endpoint.
	cfg, err := config.Parse("d.yaml", []byte("destinations:\n  - name: crm\n    preset: hubspot\n    allow_private_networks: true\n    base_url: "+g.URL+"\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deliver.Validate(context.Background(), g.Client(), &cfg.Destinations[0], ga4Effect("purchase")); !errors.Is(err, deliver.ErrNoValidation) {
		t.Errorf("hubspot: %v, want ErrNoValidation", err)
	}
	// A request for another path cannot be validated, and is not sent.
	e := ga4Effect("purchase")
	e.Request = json.RawMessage(`{"method":"POST","path":"/g/collect","body":{}}`)
	if _, err := deliver.Validate(context.Background(), g.Client(), ga4Dest(t, g.URL, ""), e); err == nil || !strings.Contains(err.Error(), "/mp/collect") {
		t.Errorf("other path: %v", err)
	}
	if n := len(g.paths()); n != 0 {
		t.Errorf("%d calls reached the server, want none", n)
	}
	// An answer that is not a validation server's (a proxy that forwards
	// everything to the live endpoint, which answers 204 to anything) is
	// an error, never a pass.
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	defer live.Close()
	if _, err := deliver.Validate(context.Background(), live.Client(), ga4Dest(t, live.URL, ""), ga4Effect("purchase")); err == nil || !strings.Contains(err.Error(), "not JSON") {
		t.Errorf("not a validation server: %v", err)
	}
	// Nor is an error answer.
	if _, err := deliver.Validate(context.Background(), g.Client(), ga4Dest(t, g.URL, ""), &store.Effect{ID: 8,
		Request: json.RawMessage(`{"path":"/mp/collect/x","body":{}}`)}); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Errorf("404: %v", err)
	}
}

// With dry_run the worker sends every call to the validation endpoint:
// an invalid event goes to the exception queue with the messages in its
// reason, a valid one is done, and nothing reaches the live endpoint.
func TestDryRunThroughTheWorker(t *testing.T) {
	g := newGA4(t)
	x := newWorld(t, setup{
		baseURL: g.URL + "?measurement_id=G-TEST&api_secret=s3cret",
		dest:    "preset: ga4-mp\ndry_run: true",
		request: `path: '"/mp/collect"'
body: '{"client_id": entity, "events": [{"name": entity == "bad" ? "_badEventName" : "purchase"}]}'`,
	})
	if len(x.cfg.Warnings) != 1 || !strings.Contains(x.cfg.Warnings[0].Msg, "dry_run") {
		t.Fatalf("warnings %v", x.cfg.Warnings)
	}
	good, bad := x.order("good", 1), x.order("bad", 1)
	x.drain()
	x.wantState(x.get(good.ID), store.EffectDone)
	b := x.get(bad.ID)
	x.wantState(b, store.EffectDead)
	if b.ErrorClass != store.ClassHiddenFailure || !strings.Contains(b.Reason, "NAME_INVALID") || !strings.Contains(b.SuggestedRepair, "validation messages") {
		t.Fatalf("bad event: [%s] %q / %q", b.ErrorClass, b.Reason, b.SuggestedRepair)
	}
	for _, p := range g.paths() {
		if !strings.HasPrefix(p, "/debug/mp/collect?") {
			t.Fatalf("calls %v: a dry run reached the live endpoint", g.paths())
		}
	}
	if strings.Contains(b.Reason+b.LastResponse, "s3cret") {
		t.Fatal("the api_secret reached the ledger")
	}
}

// Without dry_run the same malformed event is done: GA4 answers 2xx to
// anything, which is why the preset documents it and hookledger validate
// exists.
func TestGA4LiveEndpointHidesFailures(t *testing.T) {
	g := newGA4(t)
	x := newWorld(t, setup{
		baseURL: g.URL,
		dest:    "preset: ga4-mp",
		request: `path: '"/mp/collect"'
body: '{"client_id": entity, "events": [{"name": "_badEventName"}]}'`,
	})
	e := x.order("bad", 1)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDone)
	if p := g.paths(); len(p) != 1 || !strings.HasPrefix(p[0], "/mp/collect?") {
		t.Fatalf("calls %v", p)
	}
}
