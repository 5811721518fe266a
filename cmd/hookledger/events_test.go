package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// seedDeadEvent stores shop/eventID and routes it to orders with a route
// that could not be computed: the event is dead-lettered at once.
func seedDeadEvent(t *testing.T, dbPath, eventID string) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r-" + eventID, Source: "shop", EventID: eventID, Type: "order.updated", ReceivedAt: effectsNow, Body: []byte(`{}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if err := st.EventRoute(ctx, &store.EventRouteParams{Now: effectsNow, Decisions: []*store.RouteDecision{{EventPK: res[0].Items[0].EventPK,
		Routes: []store.Route{{Flow: "orders", OrderKey: "1", Failed: "entity: no field order_id"}}}}}); err != nil {
		t.Fatal(err)
	}
}

// eventIn reads shop/eventID and the event_resolved audit rows from the
// store.
func eventIn(t *testing.T, dbPath, eventID string) (*store.Event, []*store.AuditEntry) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r, err := st.EventList(ctx, &store.EventListParams{Source: "shop", EventID: eventID})
	if err != nil || len(r.Events) != 1 {
		t.Fatal(err, r)
	}
	rows, err := st.AuditList(ctx, &store.AuditListParams{Action: store.ActionEventResolved})
	if err != nil {
		t.Fatal(err)
	}
	return r.Events[0], rows
}

func TestEventsResolveLocal(t *testing.T) {
	cfg, db := effectsConfig(t)
	seedEffect(t, db, "e1", "o1", store.EffectDone) // e1 is applied
	seedDeadEvent(t, db, "d1")
	env := map[string]string{"USER": "alice"}
	resolve := func(extra ...string) (int, string, string) {
		return run(t, "", env, append([]string{"events", "resolve", "--config", cfg}, extra...)...)
	}

	// Usage errors, before the store is touched.
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--event-id", "d1", "--note", "n"}, "--source is required"},
		{[]string{"--source", "shop", "--note", "n"}, "--event-id is required"},
		{[]string{"--source", "shop", "--event-id", "d1"}, "--note is required"},
		{[]string{"--source", "shop", "--event-id", "d1", "--note", " "}, "--note is required"},
		{[]string{"--source", "shop", "--event-id", "d1", "--note", "n", "extra"}, "unexpected argument"},
		{[]string{"--source", "shop", "--event-id", "d1", "--note", "n", "--format", "yaml"}, "--format"},
		{[]string{"--source", "shop", "--event-id", "d1", "--note", "n", "--bogus"}, "bogus"},
	} {
		if code, _, errOut := resolve(c.args...); code != 2 || !strings.Contains(errOut, c.says) {
			t.Errorf("%v: exit %d %q, want 2 saying %q", c.args, code, errOut, c.says)
		}
	}
	if code, _, errOut := run(t, "", env, "events", "replay", "--config", cfg); code != 2 || !strings.Contains(errOut, "unknown action") {
		t.Errorf("unknown action: %d %q", code, errOut)
	}
	if code, _, errOut := run(t, "", env, "events"); code != 2 || !strings.Contains(errOut, "Usage: hookledger events resolve") {
		t.Errorf("no action: %d %q", code, errOut)
	}
	if code, out, _ := run(t, "", env, "events", "resolve", "--help"); code != 0 || !strings.Contains(out, "--event-id") {
		t.Errorf("events resolve --help: %d %q", code, out)
	}

	// Refusals by the store: exit 1 with the reason.
	if code, _, errOut := resolve("--source", "shop", "--event-id", "e1", "--note", "n"); code != 1 || !strings.Contains(errOut, "the event is applied") {
		t.Errorf("resolve an applied event: %d %q", code, errOut)
	}
	if code, _, errOut := resolve("--source", "shop", "--event-id", "nope", "--note", "n"); code != 1 || !strings.Contains(errOut, "no such event") {
		t.Errorf("resolve a missing event: %d %q", code, errOut)
	}
	if e, rows := eventIn(t, db, "d1"); e.Disposition != store.DispositionDeadLettered || len(rows) != 0 {
		t.Fatalf("after refusals: %s, %d audit rows", e.Disposition, len(rows))
	}

	code, out, errOut := resolve("--source", "shop", "--event-id", "d1", "--note", "the shop will never send order_id")
	if want := "event shop/d1 is now resolved\n  flow orders  entity -  resolved\n"; code != 0 || out != want {
		t.Fatalf("resolve: %d %q %q, want %q", code, out, errOut, want)
	}
	e, rows := eventIn(t, db, "d1")
	if e.Disposition != store.DispositionResolved || len(rows) != 1 || rows[0].Actor != "operator:alice" ||
		!strings.Contains(rows[0].Detail, "the shop will never send order_id") {
		t.Fatalf("stored: %s %+v", e.Disposition, rows)
	}
	if code, _, errOut := resolve("--source", "shop", "--event-id", "d1", "--note", "again"); code != 1 || !strings.Contains(errOut, "the event is resolved") {
		t.Errorf("second resolve: %d %q", code, errOut)
	}
}

// events resolve --server asks the running server's admin API, and prints
// what the store path prints.
func TestEventsResolveServer(t *testing.T) {
	cfg, db := writeCompensateConfig(t)
	seedDeadEvent(t, db, "d1")
	seedDeadEvent(t, db, "d2")
	base := startServer(t, cfg, serverSecrets)
	env := map[string]string{adminTokenVar: "admin-tok", "USER": "alice"}

	code, out, errOut := run(t, "", env, "events", "resolve", "--server", base, "--source", "shop", "--event-id", "d1",
		"--note", "payload malformed for good", "--format", "json")
	var got struct {
		Event struct {
			Source, Disposition string
			EventID             string `json:"event_id"`
			Routes              []struct{ Flow, Disposition string }
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Event.EventID != "d1" || got.Event.Disposition != "resolved" ||
		len(got.Event.Routes) != 1 || got.Event.Routes[0].Disposition != "resolved" {
		t.Fatalf("resolve --server: %d %q %q", code, out, errOut)
	}
	if _, rows := eventIn(t, db, "d1"); len(rows) != 1 || rows[0].Actor != "operator:alice" {
		t.Fatalf("audit after resolve --server: %+v", rows)
	}
	code, out, errOut = run(t, "", env, "events", "resolve", "--server", base, "--source", "shop", "--event-id", "d2", "--note", "n")
	if code != 0 || out != "event shop/d2 is now resolved\n  flow orders  entity -  resolved\n" {
		t.Fatalf("text resolve --server: %d %q %q", code, out, errOut)
	}
	code, _, errOut = run(t, "", env, "events", "resolve", "--server", base, "--source", "shop", "--event-id", "d1", "--note", "again")
	if code != 1 || !strings.Contains(errOut, "409") || !strings.Contains(errOut, "the event is resolved") {
		t.Fatalf("second resolve --server: %d %q", code, errOut)
	}
	code, _, errOut = run(t, "", env, "events", "resolve", "--server", base, "--source", "shop", "--event-id", "nope", "--note", "n")
	if code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("unknown event --server: %d %q", code, errOut)
	}
	code, _, errOut = run(t, "", map[string]string{adminTokenVar: "wrong"}, "events", "resolve", "--server", base,
		"--source", "shop", "--event-id", "d1", "--note", "n")
	if code != 1 || !strings.Contains(errOut, "401") {
		t.Fatalf("wrong token --server: %d %q", code, errOut)
	}
}
