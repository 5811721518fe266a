package console

import (
	"strings"
	"testing"
)

// The events page says what unrouted means where it shows it: a note on
// the page and a tooltip on each unrouted badge, and on no other badge.
func TestEventsPageExplainsUnrouted(t *testing.T) {
	_, _, srv := startConsole(t, 0)
	c := newClient(t, srv)
	c.login()
	const tooltip = `title="Stored and acknowledged, but no flow subscribes to this event's type: nothing else happens to it"`
	resp, body := c.get("/events?disposition=unrouted")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /events: %d", resp.StatusCode)
	}
	if !strings.Contains(body, `id="unrouted-note"><strong>unrouted</strong>: the event was stored and acknowledged, but no flow subscribes to its type`) {
		t.Errorf("the events page does not explain unrouted:\n%s", body)
	}
	if !strings.Contains(body, `<span class="badge neutral" `+tooltip+`>unrouted</span>`) || !strings.Contains(body, ">evt_3<") {
		t.Errorf("evt_3's unrouted badge has no explanation:\n%s", body)
	}
	_, rows := c.get("/events/rows?disposition=stale")
	if !strings.Contains(rows, "evt_2") || strings.Contains(rows, tooltip) {
		t.Errorf("a stale badge carries the unrouted tooltip:\n%s", rows)
	}
}
