package console

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
)

// deadReason is why addDeadEvent's route failed.
const deadReason = "entity: the expression gave an empty id"

// addDeadEvent stores stripe/id (envelope entity sub_<id>) and routes it
// to billing_to_crm with a route that could not be computed: the event is
// dead-lettered at once. routeByEntity, the corrected configuration,
// routes it.
func (f *fixture) addDeadEvent(t *testing.T, id string) {
	t.Helper()
	ctx := context.Background()
	res, err := f.st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "req_" + id, Source: "stripe", EventID: id, Type: "customer.subscription.updated", Entity: "sub_" + id,
		ReceivedAt: f.clk.Now(), Body: []byte(`{}`),
	}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("store %s: %v %v", id, err, res)
	}
	if err := f.st.EventRoute(ctx, &store.EventRouteParams{Now: f.clk.Now(), Decisions: []*store.RouteDecision{{
		EventPK: res[0].Items[0].EventPK, Routes: []store.Route{{Flow: "billing_to_crm", Failed: deadReason}}}}}); err != nil {
		t.Fatalf("route %s: %v", id, err)
	}
}

var testOwners = store.Owners{Destinations: map[string]string{"crm": "team-crm"},
	Flows: map[string]string{"billing_to_crm": "team-billing"}}

// The exception queue lists the dead-lettered events beside the dead
// effects, with reason, suggested repair, owner and age; the effects show
// their reason and the configured owner where nobody was assigned.
func TestExceptionQueueListsDeadEvents(t *testing.T) {
	e := startOps(t, nil, Attachments{Router: routeByEntity{}, Owners: testOwners})
	e.f.addDeadEvent(t, "evt_dead")
	e.f.clk.Advance(90 * 60e9) // 90 minutes
	resp, body := e.c.get("/effects")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/effects: %d", resp.StatusCode)
	}
	page := html.UnescapeString(body)
	rows := section(t, page, `<tbody id="dead-event-rows">`, "</tbody>")
	for _, s := range []string{"evt_dead", "billing_to_crm", deadReason, store.DeadLetterRepair(deadReason), "team-billing", "1h30m0s",
		eventLink("stripe", "evt_dead")} {
		if !strings.Contains(rows, html.UnescapeString(s)) {
			t.Errorf("dead-lettered event rows lack %q:\n%s", s, rows)
		}
	}
	effects := section(t, page, `<tbody id="effect-rows"`, "</tbody>")
	for _, s := range []string{"422 from destination", "team-crm", "<th scope=\"col\">Reason</th>"} {
		if !strings.Contains(effects, s) && !strings.Contains(page, s) {
			t.Errorf("the queue's effects lack %q:\n%s", s, effects)
		}
	}
	// Each dead effect carries its suggested repair too, and how long it
	// has waited since its last change.
	if !strings.Contains(page, `<th scope="col">Reason and suggested repair</th>`) ||
		!strings.Contains(effects, `422 from destination<span class="row-repair">The destination refused the request as it is: correct the data or the destination's configuration, then retry`) {
		t.Errorf("the queue's effects lack a suggested repair:\n%s", effects)
	}
	// (The effect last changed at 09:02:04 on the fixture's clock, which
	// now reads 10:33:04.)
	if !strings.Contains(effects, `<td>2026-11-03 09:02:04Z <span class="effect-age">1h31m0s ago</span></td>`) {
		t.Errorf("the queue's effects lack their age:\n%s", effects)
	}
	// Another state than the queue lists effects only.
	if _, body := e.c.get("/effects?state=done"); strings.Contains(body, "dead-event-rows") {
		t.Error("the done effects list shows dead-lettered events")
	}
}

// The event page of a dead letter shows each route's reason and repair,
// who owns it, and offers a replay planned first and a resolve that needs
// a note.
func TestEventPageRepairsADeadLetter(t *testing.T) {
	e := startOps(t, nil, Attachments{Router: routeByEntity{}, Owners: testOwners})
	e.f.addDeadEvent(t, "evt_dead")
	link := eventLink("stripe", "evt_dead")
	_, body := e.c.get(link)
	page := html.UnescapeString(body)
	for _, s := range []string{`class="route-reason">` + deadReason, `class="route-repair">` + store.DeadLetterRepair(deadReason),
		`id="event-owner">team-billing`, `action="/event/resolve"`, `id="replay-event"`} {
		if !strings.Contains(page, s) {
			t.Errorf("event page lacks %q", s)
		}
	}

	// The replay link plans a replay of this one event.
	plan := "/replay?" + url.Values{"source": {"stripe"}, "event_id": {"evt_dead"}, "plan": {"1"}}.Encode()
	if !strings.Contains(body, html.EscapeString(plan)) {
		t.Fatalf("event page does not link to the plan %s", plan)
	}
	e.f.addDeadEvent(t, "evt_other") // not selected
	_, body = e.c.get(plan)
	if !strings.Contains(body, `<dd id="plan-events">1</dd>`) || !strings.Contains(body, `name="event_id" value="evt_dead"`) {
		t.Fatalf("plan of one event: %s", section(t, body, `id="plan-h"`, "</section>"))
	}
	if _, body := e.c.get("/replay?event_id=evt_dead&plan=1"); !strings.Contains(body, "Field event_id") {
		t.Error("an event id without its source is not refused")
	}

	// Resolve: a note is required; with it the event is resolved and
	// audited, and leaves the queue.
	resp, body := e.c.post("/event/resolve", url.Values{"csrf": {e.c.csrf}, "source": {"stripe"}, "event_id": {"evt_dead"}, "note": {"  "}})
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Resolve needs a note") {
		t.Fatalf("resolve without a note: %d", resp.StatusCode)
	}
	resp, _ = e.c.post("/event/resolve", url.Values{"csrf": {e.c.csrf}, "source": {"stripe"}, "event_id": {"evt_dead"},
		"note": {"the sender will not correct it"}})
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != link+"&done=resolve" {
		t.Fatalf("resolve: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	_, body = e.c.get(link + "&done=resolve")
	if !strings.Contains(body, `id="event-disposition">resolved`) || !strings.Contains(body, "Resolved, with your note") ||
		strings.Contains(body, `action="/event/resolve"`) {
		t.Errorf("after resolve the page shows no resolved event, no flash, or still a form")
	}
	if rows := e.audit(t, store.ActionEventResolved); len(rows) != 1 || rows[0].Actor != actor ||
		!strings.Contains(rows[0].Detail, "the sender will not correct it") {
		t.Errorf("audit = %+v", rows)
	}
	// Resolving again is refused naming the disposition.
	resp, body = e.c.post("/event/resolve", url.Values{"csrf": {e.c.csrf}, "source": {"stripe"}, "event_id": {"evt_dead"}, "note": {"again"}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "the event is resolved") {
		t.Errorf("second resolve: %d", resp.StatusCode)
	}
	if resp, _ := e.c.post("/event/resolve", url.Values{"csrf": {e.c.csrf}, "source": {"stripe"}, "event_id": {"nope"}, "note": {"x"}}); resp.StatusCode != http.StatusNotFound {
		t.Errorf("resolve of an unknown event: %d, want 404", resp.StatusCode)
	}
	if resp, _ := e.c.post("/event/resolve", url.Values{"csrf": {e.c.csrf}, "note": {"x"}}); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("resolve without an event: %d, want 400", resp.StatusCode)
	}
	if _, body := e.c.get("/effects"); strings.Contains(body, ">evt_dead<") {
		t.Error("a resolved event is still in the exception queue")
	}
}

// section is the part of page from the first start to the next end.
func section(t *testing.T, page, start, end string) string {
	t.Helper()
	i := strings.Index(page, start)
	if i < 0 {
		t.Fatalf("page lacks %q", start)
	}
	rest := page[i:]
	if j := strings.Index(rest, end); j >= 0 {
		return rest[:j]
	}
	return rest
}
