package console

import (
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
)

// longResponse is an answer without a space to break at, as a
// destination's JSON error often is.
var longResponse = `{"error":{"code":"validation_failed","field":"` + strings.Repeat("line_items.0.price_data.", 12) + `"}}`

// addForwardEffect stores a forward flow's effect whose request carries
// body as base64 with contentType, as the flow engine builds it, and
// returns its id. dead leaves it dead after one call refused with
// longResponse, under a long episode key.
func addForwardEffect(t *testing.T, f *fixture, name string, body []byte, contentType string, dead bool) int64 {
	t.Helper()
	req, err := json.Marshal(flow.Request{Method: http.MethodPost, Headers: map[string]string{"Content-Type": contentType}, BodyBase64: body})
	if err != nil {
		t.Fatal(err)
	}
	key := "stripe_to_app:" + name + ":r0:forward"
	if dead {
		key = "stripe_to_app:" + name + strings.Repeat("_0123456789", 8) + ":r0:forward"
	}
	seedEntity(t, f, "stripe_to_app", name, name, sortKey(0), "r0", sortKey(0),
		&store.EffectInsert{EpisodeKey: key, Effect: "forward", Destination: "app", Request: req})
	ctx := context.Background()
	es, err := f.st.EffectList(ctx, &store.EffectListParams{Flow: "stripe_to_app", Entity: name})
	if err != nil || len(es) != 1 {
		t.Fatalf("effect of %s: %v %v", name, es, err)
	}
	if !dead {
		return es[0].ID
	}
	cs, err := f.st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: f.clk.Now(), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(cs) != 1 || cs[0].ID != es[0].ID {
		t.Fatalf("claim effect of %s: %v %v", name, cs, err)
	}
	if err := f.st.EffectSettle(ctx, &store.EffectSettleParams{EffectID: cs[0].ID, Token: cs[0].Token, Now: f.clk.Now(),
		Actor: "worker", State: store.EffectDead, AddAttempt: true, Class: store.ClassPermanent, Reason: "HTTP 400",
		LastResponse: longResponse, Attempt: &store.Attempt{StartedAt: f.clk.Now(), Duration: 30 * time.Millisecond, Status: 400,
			Class: store.ClassPermanent, Error: "HTTP 400", Response: longResponse}}); err != nil {
		t.Fatal(err)
	}
	return es[0].ID
}

// A forward's request shows its body as the text it is, with its
// content type; a body that is not UTF-8 stays base64, as stored.
func TestForwardRequestShownReadable(t *testing.T) {
	f, _, srv := startConsole(t, 0)
	text := addForwardEffect(t, f, "evt_text", []byte("amount=1200&currency=eur"), "application/x-www-form-urlencoded", false)
	binary := addForwardEffect(t, f, "evt_bin", []byte{0xff, 0xfe, 0x00, 0x01}, "application/octet-stream", false)
	c := newClient(t, srv)
	c.login()

	_, body := c.get("/effects/" + itoa(text))
	if !strings.Contains(body, `<dd id="forward-content-type">application/x-www-form-urlencoded</dd>`) ||
		!regexp.MustCompile(`<pre class="body"[^>]*aria-label="Request body">amount=1200&amp;currency=eur</pre>`).MatchString(body) {
		t.Errorf("the forwarded text body is not shown as text with its type:\n%s", pageFrom(body, "<h2>Request</h2>"))
	}
	resp, raw := c.get("/effects/" + itoa(text) + "/request/body")
	if resp.StatusCode != http.StatusOK || raw != "amount=1200&currency=eur" || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("raw forwarded body: %d %q %s", resp.StatusCode, raw, resp.Header.Get("Content-Type"))
	}

	_, body = c.get("/effects/" + itoa(binary))
	if !strings.Contains(body, "not UTF-8 text") || !strings.Contains(body, `&#34;body_base64&#34;: &#34;//4AAQ==&#34;`) ||
		strings.Contains(body, `aria-label="Request body"`) {
		t.Errorf("the binary body is not kept as base64:\n%s", pageFrom(body, "<h2>Request</h2>"))
	}
	// Any other request is shown as stored.
	_, body = c.get("/effects/" + itoa(f.deadID))
	if strings.Contains(body, "forward-request") || !strings.Contains(body, `&#34;deal&#34;: &#34;sub_1&#34;`) {
		t.Errorf("a flow's request:\n%s", pageFrom(body, "<h2>Request</h2>"))
	}
}

// The effects form shows the deadline and compensation filters a link
// applies (the overview's deadline_missed), so pressing Filter keeps them.
func TestEffectsFormShowsEveryFilter(t *testing.T) {
	_, _, srv := startConsole(t, 0)
	c := newClient(t, srv)
	c.login()
	_, body := c.get("/effects?state=any&deadline_missed=true")
	if !regexp.MustCompile(`<input id="f-deadline-missed" type="checkbox" name="deadline_missed" value="true" checked>`).MatchString(body) ||
		!regexp.MustCompile(`<input id="f-compensations" type="checkbox" name="compensations" value="true">`).MatchString(body) {
		t.Errorf("the form does not show deadline_missed=true as checked:\n%s", pageFrom(body, "<form"))
	}
	_, body = c.get("/effects?state=any&compensations=true")
	if !strings.Contains(body, `name="compensations" value="true" checked>`) || strings.Contains(body, `name="deadline_missed" value="true" checked>`) {
		t.Errorf("compensations=true not shown alone:\n%s", pageFrom(body, "<form"))
	}
}

// The destinations page says what it counted in words that are true when
// it counted nothing.
func TestDestinationsPageWithoutCalls(t *testing.T) {
	e := startOps(t, nil, Attachments{Destinations: []string{"crm"}})
	_, body := e.c.get("/destinations")
	if !strings.Contains(body, "Calls since ") || !strings.Contains(body, ": 2 in all.") {
		t.Errorf("with two calls: %s", pageFrom(body, `id="calls-hint"`))
	}
	e.f.clk.Advance(48 * time.Hour) // the fixture's calls leave the 24-hour window
	e.c.login()                     // and the session ends
	_, body = e.c.get("/destinations")
	if strings.Contains(body, "newest 0") || !strings.Contains(body, "No calls since ") {
		t.Errorf("without calls: %s", pageFrom(body, `id="calls-hint"`))
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// pageFrom is the part of a page from marker on, for a failure message.
func pageFrom(body, marker string) string {
	i := strings.Index(body, marker)
	if i < 0 {
		return body
	}
	return body[i:min(len(body), i+1500)]
}
