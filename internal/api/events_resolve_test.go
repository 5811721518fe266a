package api_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/store"
)

// resolveFixture holds a dead-lettered event (its route could not be
// computed), an applied one and an accepted one.
func resolveFixture(t *testing.T) *fixture {
	f := newFixture(t)
	dead := f.event("shop", "dead_1", "order.updated", "o1")
	f.route(dead, store.Route{Flow: "orders", Entity: "o1", OrderKey: "2", Failed: "version_conflict: r2 seen with two states"},
		store.Route{Flow: "mail", Entity: "o1", OrderKey: "2"})
	f.apply("mail", "o1", "crm")
	applied := f.event("shop", "ok_1", "order.updated", "o2")
	f.route(applied, store.Route{Flow: "orders", Entity: "o2", OrderKey: "1"})
	f.apply("orders", "o2", "crm")
	f.event("shop", "new_1", "order.updated", "o3")
	return f
}

func TestEventResolveRefusals(t *testing.T) {
	f := resolveFixture(t)
	for _, c := range []struct {
		body  string
		code  int
		says  string
		param string
	}{
		{`{"event_id":"dead_1","note":"n"}`, 400, "source: required", "source"},
		{`{"source":"shop","note":"n"}`, 400, "event_id: required", "event_id"},
		{`{"source":"shop","event_id":"dead_1"}`, 400, "note: required", "note"},
		{`{"source":"shop","event_id":"dead_1","note":"  "}`, 400, "note: required", "note"},
		{`{"source":"shop","eventid":"dead_1","note":"n"}`, 400, `unknown field "eventid"`, "eventid"},
		{`{"source":"shop","event_id":7,"note":"n"}`, 400, "event_id: expected a string", "event_id"},
		{`{"source":`, 400, "body: expected JSON", ""},
		{``, 400, "body: expected JSON", ""},
		{`{"source":"shop","event_id":"nope","note":"n"}`, 404, `no such event: source "shop", event_id "nope"`, ""},
		{`{"source":"crm","event_id":"dead_1","note":"n"}`, 404, "no such event", ""},
		{`{"source":"shop","event_id":"ok_1","note":"n"}`, 409, "the event is applied", ""},
		{`{"source":"shop","event_id":"new_1","note":"n"}`, 409, "the event is accepted", ""},
	} {
		code, b := f.do(http.MethodPost, "/api/v1/events/resolve", c.body)
		var out map[string]string
		_ = json.Unmarshal(b, &out)
		if code != c.code || !strings.Contains(out["error"], c.says) || out["param"] != c.param {
			t.Errorf("POST %s: %d %s, want %d saying %q naming param %q", c.body, code, b, c.code, c.says, c.param)
		}
		if code == 409 && !strings.Contains(c.says, out["disposition"]) {
			t.Errorf("POST %s: disposition %q not named in the answer %s", c.body, out["disposition"], b)
		}
	}
	var list eventList
	if f.get("/api/v1/events?disposition=resolved", &list); len(list.Events) != 0 {
		t.Fatalf("a refused resolve resolved %+v", list.Events)
	}
	var audit struct{ Audit []json.RawMessage }
	if f.get("/api/v1/audit?action=event_resolved", &audit); len(audit.Audit) != 0 {
		t.Fatalf("a refused resolve was audited: %s", audit.Audit)
	}
	// The resource is behind the token like every other.
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/api/v1/events/resolve", strings.NewReader(`{"source":"shop","event_id":"dead_1","note":"n"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("without the token: %d, want 401", resp.StatusCode)
	}
}

func TestEventResolve(t *testing.T) {
	f := resolveFixture(t)
	code, b := f.do(http.MethodPost, "/api/v1/events/resolve",
		`{"source":"shop","event_id":"dead_1","note":"sender confirmed r2 is void","actor":"ann"}`)
	if code != http.StatusOK {
		t.Fatalf("resolve: %d %s", code, b)
	}
	var out struct {
		Event api.EventJSON `json:"event"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	e := out.Event
	if e.Source != "shop" || e.EventID != "dead_1" || e.Disposition != "resolved" || e.Deliveries != 1 || e.Entity != "o1" ||
		!slices.Equal(e.Routes, []api.RouteJSON{{Flow: "mail", Entity: "o1", Disposition: "applied"},
			{Flow: "orders", Entity: "o1", Disposition: "resolved", Reason: "version_conflict: r2 seen with two states"}}) {
		t.Fatalf("resolved event = %+v", e)
	}
	// The same shape as one event of GET /api/v1/events: the same keys,
	// the same values.
	var shape struct{ Event map[string]json.RawMessage }
	if err := json.Unmarshal(b, &shape); err != nil {
		t.Fatal(err)
	}
	_, listed := f.do(http.MethodGet, "/api/v1/events?disposition=resolved", "")
	var list struct{ Events []map[string]json.RawMessage }
	if err := json.Unmarshal(listed, &list); err != nil || len(list.Events) != 1 {
		t.Fatalf("listed resolved: %s %v", listed, err)
	}
	if len(shape.Event) != len(list.Events[0]) {
		t.Fatalf("resolve answers %d keys, the list %d", len(shape.Event), len(list.Events[0]))
	}
	for k, v := range list.Events[0] {
		if string(shape.Event[k]) != string(v) {
			t.Errorf("%s: resolve answers %s, the list %s", k, shape.Event[k], v)
		}
	}
	var audit struct {
		Audit []api.AuditJSON `json:"audit"`
	}
	if f.get("/api/v1/audit?action=event_resolved", &audit); len(audit.Audit) != 1 || audit.Audit[0].Actor != "operator:ann" ||
		audit.Audit[0].EventID != "dead_1" || !strings.Contains(audit.Audit[0].Detail, "sender confirmed r2 is void") {
		t.Fatalf("audit = %+v", audit.Audit)
	}
	// Resolved is terminal: a second resolve is refused, naming it.
	code, b = f.do(http.MethodPost, "/api/v1/events/resolve", `{"source":"shop","event_id":"dead_1","note":"again"}`)
	if code != http.StatusConflict || !strings.Contains(string(b), `"disposition":"resolved"`) {
		t.Fatalf("second resolve: %d %s", code, b)
	}
}
