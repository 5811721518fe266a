package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
)

// hostileValues are the values the poison suite places in every field the
// engine stores or computes from, as JSON text.
var hostileValues = []struct{ name, json string }{
	{"NUL", `"a\u0000b"`},
	{"invalid UTF-8", "\"a\xffb\""},
	{"C0 control", `"a\u0001b"`},
	{"ESC sequence", `"a\u001b[2Jb"`},
	{"C1 control", `"a\u0085b"`},
	{"U+2028", `"a\u2028b"`},
	{"lone surrogate", `"a\ud800b"`},
	{"1e400", `1e400`},
	{"-0", `-0`},
	{"2^63", `9223372036854775808`},
	// The body's object is one level, so the value may nest 9,999 deep;
	// nesting is also checked one past encoding/json's limit.
	{"9,999 deep", strings.Repeat("[", 9999) + strings.Repeat("]", 9999)},
	{"10,000 deep", strings.Repeat("[", 10000) + strings.Repeat("]", 10000)},
	{"string filling the body limit", `"` + strings.Repeat("x", poisonBodyLimit-1024) + `"`},
	{"1 MiB string", `"` + strings.Repeat("x", 1<<20) + `"`},
	{"255-byte id", `"` + strings.Repeat("i", 255) + `"`},
	{"256-byte id", `"` + strings.Repeat("i", 256) + `"`},
	{"600-byte id", `"` + strings.Repeat("i", 600) + `"`},
}

// poisonFields are the payload fields the flows below read: the event's
// identity, an entity, a revision, a tie-break, state fields and a header.
var poisonFields = []string{"eventId", "type", "order_id", "ticket", "seq", "revision", "note", "tag"}

const poisonBodyLimit = 1 << 20

func poisonConfig(storeURL, destURL, endpointURL string) string {
	return fmt.Sprintf(`listen: 127.0.0.1:0
store: %s
admin:
  token: %s
receive:
  max_body_bytes: %d
processing:
  poll_interval: 5ms
delivery:
  poll_interval: 5ms
sources:
`+flowSources()+`destinations:
  - {name: crm, base_url: %q, allow_private_networks: true}
endpoints:
  - id: partner
    url: %s
    types: ["invoice.*"]
    secrets: [%s]
    allow_private_networks: true
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
    state: '{"note": event.note, "status": event.status}'
    effects:
      - name: sync
        destination: crm
        request:
          path: '"/orders/" + pathEscape(entity)'
          body: state
          headers: {X-Tag: 'string(event.tag)'}
  - name: tickets
    source: shop
    events: ["order.*"]
    entity: event.ticket
    version: {mode: occurred_at, tie_break: event.seq}
    state: event.note
`, storeURL, adminToken, poisonBodyLimit, destURL, endpointURL, endpointSecret)
}

// poisonBody is a healthy order event with one field's JSON replaced.
func poisonBody(i int, field, value string) string {
	f := map[string]string{
		"eventId": fmt.Sprintf(`"p-%d"`, i), "type": `"order.updated"`, "order_id": fmt.Sprintf(`"o-%d"`, i),
		"ticket": fmt.Sprintf(`"t-%d"`, i), "seq": `"1"`, "revision": "1", "note": `"n"`, "tag": `"a"`,
	}
	if field != "" {
		f[field] = value
	}
	var b strings.Builder
	b.WriteString(`{"occurredAt":"2026-11-03T08:50:00Z","status":"paid"`)
	for _, k := range poisonFields {
		fmt.Fprintf(&b, ",%q:%s", k, f[k])
	}
	b.WriteString("}")
	return b.String()
}

// The poison suite, through the real HTTP door on both drivers: every
// hostile value in every field the engine stores or computes from is
// refused with a 4xx at the door, or its event ends in a terminal
// disposition (a dead letter gives its reason); publish data, the
// Idempotency-Key and the admin API's filters refuse what they cannot use
// with a 4xx, never a 5xx; every console page that shows what was stored
// is served within a bounded amount of memory; and a healthy event sent
// after all of it is processed and delivered.
func TestPoisonInputs(t *testing.T) { stores(t, testPoisonInputs) }

func testPoisonInputs(t *testing.T, storeURL string) {
	crm, partner := hostileDestination(t), newReceiver(t)
	h := startWith(t, poisonConfig(storeURL, crm.srv.URL, partner.srv.URL+"/in"))

	// Webhooks: each value in each field.
	seen := map[string]bool{}
	var stored []string // event ids, in the order they were stored
	n := 0
	for _, v := range hostileValues {
		for _, field := range poisonFields {
			n++
			body := poisonBody(n, field, v.json)
			code, resp := shopPost(t, h, "shop", body, nil)
			switch {
			case code == http.StatusOK:
				for _, id := range h.shopEventIDs() {
					if !seen[id] {
						seen[id] = true
						stored = append(stored, id)
					}
				}
			case code >= 400 && code < 500:
				if !json.Valid([]byte(resp)) || !strings.Contains(resp, `"error"`) {
					t.Errorf("%s in %s: %d with body %.200q, want a JSON error", v.name, field, code, resp)
				}
			default:
				t.Errorf("%s in %s: %d %.300s, want 200 or a 4xx", v.name, field, code, resp)
			}
		}
	}
	if len(stored) < len(poisonFields) {
		t.Fatalf("only %d hostile events were stored: the suite tests too little", len(stored))
	}

	// Publishing: hostile data and hostile Idempotency-Keys.
	accepted := 0
	for i, v := range hostileValues {
		code, resp, _ := h.publish(fmt.Sprintf("poison-%d", i), `{"type":"invoice.paid","data":{"x":`+v.json+`}}`)
		switch {
		case code == http.StatusAccepted:
			accepted++
		case code < 400 || code >= 500:
			t.Errorf("publish data %s: %d %.300s, want 202 or a 4xx", v.name, code, resp)
		}
	}
	for _, key := range []string{"k\xffey", "k\u2028ey", "a\tb", strings.Repeat("k", 255), strings.Repeat("k", 256), strings.Repeat("k", 600), `"quoted\"key"`} {
		code, resp, _ := h.publish(key, `{"type":"invoice.paid","data":{"k":1}}`)
		if code != http.StatusAccepted && (code < 400 || code >= 500) {
			t.Errorf("Idempotency-Key %.40q: %d %.300s, want 202 or a 4xx", key, code, resp)
		}
		if code == http.StatusAccepted {
			accepted++
		}
	}

	// Endpoints: free text that no store holds is refused.
	for i, v := range hostileValues[:7] {
		for _, field := range []string{"description", "owner"} {
			body := fmt.Sprintf(`{"id":"ep-%d-%s","url":%q,"types":["invoice.*"],%q:%s}`, i, field, partner.srv.URL+"/in", field, v.json)
			code, resp, _ := h.post("/api/v1/endpoints", []byte(body), http.Header{"Authorization": {"Bearer " + adminToken}})
			if code != http.StatusCreated && (code < 400 || code >= 500) {
				t.Errorf("endpoint %s %s: %d %.300s, want 201 or a 4xx", field, v.name, code, resp)
			}
			if v.name == "NUL" && (code != 400 || !strings.Contains(resp, field+": holds a NUL character")) {
				t.Errorf("endpoint %s with NUL: %d %.300s, want 400 naming the field, the same on every driver", field, code, resp)
			}
		}
	}

	// The admin API's filters.
	for _, v := range hostileValues[:7] {
		var raw string
		if err := json.Unmarshal([]byte(v.json), &raw); err != nil {
			raw = strings.Trim(v.json, `"`) // invalid UTF-8 is sent as its bytes
		}
		for _, path := range []string{"/api/v1/events?event_id=", "/api/v1/events?entity=", "/api/v1/events?type=",
			"/api/v1/events?source=", "/api/v1/effects?entity=", "/api/v1/audit?event_id="} {
			if code, b := h.get(path+url.QueryEscape(raw), adminToken); code != 200 && code != 400 {
				t.Errorf("GET %s%s: %d %.200s, want 200 or 400", path, v.name, code, b)
			}
		}
		if code, b := h.get("/api/v1/events?event_id="+url.QueryEscape(raw)+"%00", adminToken); code != 400 {
			t.Errorf("GET /api/v1/events with NUL in event_id: %d %.200s, want 400", code, b)
		}
	}

	// Every stored event ends in a terminal disposition, a dead letter
	// with its reason.
	waitFor(t, "every hostile event to settle", func() bool {
		for _, id := range stored {
			if ev := h.event("shop", id); ev.Disposition == "accepted" {
				return false
			}
		}
		return true
	})
	dead := 0
	for _, id := range stored {
		ev := h.event("shop", id)
		for _, r := range ev.Routes {
			if r.Disposition == "dead_lettered" {
				dead++
				if r.Reason == "" {
					t.Errorf("event %.60q: flow %s dead-lettered without a reason", id, r.Flow)
				}
			}
		}
	}
	if dead == 0 {
		t.Fatalf("no hostile event was dead-lettered: the suite tests too little")
	}
	waitFor(t, "every accepted message to be delivered", func() bool { return len(partner.deliveries()) >= accepted })
	for _, d := range append(partner.deliveries(), crm.deliveries()...) {
		if strings.Contains(string(d.body), "Infinity") || strings.Contains(string(d.body), "NaN") {
			t.Errorf("a destination was sent a number nobody sent: %.200s", d.body)
		}
	}

	// Every console page that shows what was stored, within a memory
	// bound: the deepest bodies once cost gigabytes to pretty-print.
	c := h.consoleClient()
	resetPeakRSS(t)
	base := rssBytes(t, "VmRSS")
	pages := 0
	fetch := func(path string) {
		t.Helper()
		resp, err := c.Get(h.base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		pages++
		if resp.StatusCode >= 500 {
			t.Errorf("GET %.120s: %d", path, resp.StatusCode)
		}
		if n > 16<<20 {
			t.Errorf("GET %.120s: a page of %d bytes", path, n)
		}
	}
	for _, id := range stored {
		ev := h.event("shop", id)
		fetch("/event?source=shop&event_id=" + url.QueryEscape(id))
		for _, r := range ev.Routes {
			if r.Entity != "" {
				fetch("/entity?flow=" + r.Flow + "&entity=" + url.QueryEscape(r.Entity))
			}
		}
	}
	code, b := h.get("/api/v1/effects?state=any&limit=1000", adminToken)
	var effects struct{ Effects []struct{ ID int64 } }
	if code != 200 || json.Unmarshal(b, &effects) != nil {
		t.Fatalf("effects: %d %s", code, b)
	}
	for _, e := range effects.Effects {
		fetch("/effects/" + strconv.FormatInt(e.ID, 10))
	}
	fetch("/event?source=shop&event_id=a%00b")
	fetch("/entity?flow=orders&entity=%ff")
	fetch("/events")
	fetch("/effects?state=any")
	peak := rssBytes(t, "VmHWM")
	t.Logf("%d hostile webhooks stored of %d sent, %d routes dead-lettered, %d messages accepted; %d console pages raised peak RSS by %d MiB",
		len(stored), n, dead, accepted, pages, (peak-base)>>20)
	if peak-base > 256<<20 {
		t.Errorf("serving %d console pages raised peak RSS by %d MiB (from %d MiB), want at most 256 MiB", pages, (peak-base)>>20, base>>20)
	}

	// A destination that answers hostile bytes (a Location and a
	// Retry-After that are not UTF-8, NUL in a body, a body cut inside a
	// character) has its effects settled all the same: an attempt's
	// evidence the store cannot hold never leaves an effect submitting.
	// A rule planted in the database stands in for evidence the store
	// refuses that no check foresaw: the effect is settled without it.
	if strings.HasPrefix(storeURL, "sqlite:") {
		execOn(t, storeURL, `CREATE TRIGGER refuse_evidence BEFORE INSERT ON effect_attempts WHEN NEW.response LIKE '%refuse-evidence%'
			BEGIN SELECT RAISE(ABORT, 'refused by rule'); END`)
	} else {
		execOn(t, storeURL, `ALTER TABLE effect_attempts ADD CONSTRAINT refuse_evidence CHECK (response NOT LIKE '%refuse-evidence%') NOT VALID`)
	}
	for i, order := range []string{"answer-201", "answer-503", "answer-refused"} {
		body := strings.Replace(poisonBody(900+i, "", ""), `"order_id":"o-`+strconv.Itoa(900+i)+`"`, `"order_id":"`+order+`"`, 1)
		if code, resp := shopPost(t, h, "shop", body, nil); code != 200 {
			t.Fatalf("%s: %d %s", order, code, resp)
		}
	}
	waitFor(t, "the hostile answers' effects to settle", func() bool {
		return h.effect("answer-201").State == "done" && h.effect("answer-503").State == "retry_wait" &&
			h.effect("answer-refused").State == "retry_wait"
	})
	// What the store can hold of the evidence is kept.
	if e := h.effect("answer-503"); !strings.Contains(e.LastResponse, "busy") || !strings.Contains(e.LastResponse, "語") ||
		strings.Contains(e.Reason, "refused this attempt's evidence") {
		t.Errorf("answer-503: last response %.80q, reason %q: want the evidence kept as storable text", e.LastResponse, e.Reason)
	}
	if e := h.effect("answer-refused"); !strings.Contains(e.Reason, "the store refused this attempt's evidence") {
		t.Errorf("answer-refused: reason %q, want it to say the evidence was refused", e.Reason)
	}

	// A healthy event after all of it is processed and delivered.
	before := len(crm.deliveries())
	if code, resp := shopPost(t, h, "shop", poisonBody(0, "", ""), nil); code != 200 {
		t.Fatalf("healthy event: %d %s", code, resp)
	}
	if d := settled(t, h, "shop", "p-0"); d != "applied" {
		t.Fatalf("healthy event after the poison: %s, want applied", d)
	}
	waitFor(t, "the healthy event's effect to reach the CRM", func() bool {
		for _, d := range crm.deliveries()[before:] {
			if d.path == "/orders/o-0" {
				return true
			}
		}
		return false
	})
}

// hostileDestination records every call and answers /orders/answer-201
// and /orders/answer-503 with bytes no store holds as they are; every
// other call with 204.
func hostileDestination(t *testing.T) *receiver {
	r := &receiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{req.Header.Clone(), b, req.URL.Path})
		r.mu.Unlock()
		switch req.URL.Path {
		case "/orders/answer-201":
			w.Header()["Location"] = []string{"/deals/\xff\xfe"}
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("{\"id\":\"d\x00\xff\",\"note\":\"" + strings.Repeat("日", 1000) + "\"}"))
		case "/orders/answer-refused":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("refuse-evidence"))
		case "/orders/answer-503":
			w.Header()["Retry-After"] = []string{"\xff"}
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("busy\x00\xff" + strings.Repeat("語", 1000)))
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// effect is the effect of flow orders for entity (zero when none).
func (h *harness) effect(entity string) api.EffectJSON {
	h.t.Helper()
	code, b := h.get("/api/v1/effects?state=any&flow=orders&entity="+url.QueryEscape(entity), adminToken)
	var list struct{ Effects []api.EffectJSON }
	if code != 200 || json.Unmarshal(b, &list) != nil {
		h.t.Fatalf("effects of %s: %d %s", entity, code, b)
	}
	if len(list.Effects) != 1 {
		return api.EffectJSON{}
	}
	return list.Effects[0]
}

// shopEventIDs lists the ids of every stored event of source shop.
func (h *harness) shopEventIDs() []string {
	h.t.Helper()
	var ids []string
	cursor := ""
	for {
		code, b := h.get("/api/v1/events?source=shop&limit=1000"+cursor, adminToken)
		var page api.EventListJSON
		if code != 200 || json.Unmarshal(b, &page) != nil {
			h.t.Fatalf("events: %d %.300s", code, b)
		}
		for _, e := range page.Events {
			ids = append(ids, e.EventID)
		}
		if page.NextCursor == "" {
			return ids
		}
		cursor = "&cursor=" + page.NextCursor
	}
}

// event returns one stored event with its routes.
func (h *harness) event(source, eventID string) api.EventJSON {
	h.t.Helper()
	evs := h.events(source, eventID)
	if len(evs) != 1 {
		h.t.Fatalf("event %s/%.60q: %d found", source, eventID, len(evs))
	}
	return evs[0]
}

// consoleClient is a browser logged in to the console.
func (h *harness) consoleClient() *http.Client {
	h.t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Timeout: 2 * time.Minute}
	resp, err := c.PostForm(h.base+"/login", url.Values{"token": {adminToken}})
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		h.t.Fatalf("console login: %d", resp.StatusCode)
	}
	return c
}

// resetPeakRSS starts the process's peak resident size (VmHWM) again
// from its current size.
func resetPeakRSS(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Fatalf("reset the peak RSS: %v", err)
	}
}

// rssBytes reads one of the process's memory figures from /proc.
func rssBytes(t *testing.T, field string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}
