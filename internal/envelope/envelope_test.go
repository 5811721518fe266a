package envelope

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/senderkind"
)

// Real payload shapes, trimmed.
const (
	stripeEvent = `{
  "id": "evt_1QX8pLJ8mC4Qx2Ab",
  "object": "event",
  "account": "acct_1Nv0FGQ9RKHgCVdK",
  "api_version": "2025-03-31.basil",
  "created": 1767225600,
  "data": {"object": {"id": "sub_1QX8pK", "object": "subscription", "status": "past_due"}},
  "livemode": false,
  "pending_webhooks": 1,
  "type": "customer.subscription.updated"
}`
	hubspotBatch = `[{"eventId":1,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,"changeSource":"CRM","changeFlag":"NEW","appId":54321},
 {"eventId": 3892116512, "subscriptionId": 2114401, "portalId": 62515, "appId": 54321, "occurredAt": 1767225600123, "subscriptionType": "deal.propertyChange", "attemptNumber": 2, "objectId": 9007199254740993, "propertyName": "dealstage", "propertyValue": "closedwon", "changeSource": "CRM"}]`
	klaviyoBatch   = `{"data":[{"topic":"event:klaviyo.received_email","external_id":"5A2vDqkEKH","payload":{"data":{"type":"event","id":"5A2vDqkEKH","attributes":{"timestamp":1767225599,"datetime":"2025-12-31T23:59:59+00:00"},"relationships":{"profile":{"data":{"type":"profile","id":"01JG8ZP3QK"}}}}}},{"topic":"event:klaviyo.opened_email","external_id":"5A2vDqkEKJ","payload":{"data":{"type":"event","id":"5A2vDqkEKJ","attributes":{"timestamp":1767225600},"relationships":{"profile":{"data":{"type":"profile","id":"01JG8ZP3QK"}}}}}}],"meta":{"klaviyo_webhook_id":"01KP4928STE8FKCWB6WDHZ4ZB7","klaviyo_account_id":"WBhXHN","timestamp":"2026-01-01T00:00:00+00:00","version":"2024-10-15"}}`
	swEvent        = `{"type":"contact.created","timestamp":"2026-01-01T00:00:00.250Z","data":{"id":"c_1","email":"a@example.com"}}`
	pipedriveEvent = `{"data":{"id":1,"title":"test deal","value":2,"currency":"USD","status":"open"},"previous":null,"meta":{"action":"change","entity":"deal","version":"2.0","company_id":12882925,"user_id":18487521,"id":"8d3a5c1e-7b2f-4e61-9a0d-3c5e7f9b1a24","entity_id":"1","webhook_id":"99","attempt":1,"host":"company.pipedrive.com","timestamp":"2026-01-01T00:00:00.000Z","change_source":"app"}}`
	genericEvent   = `{"eventId":"ev_01JH2Q8N3M","type":"subscription.created","occurredAt":"2026-01-01T00:00:00Z","subscription":{"number":"+447700900123","plan":"gold"}}`
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func one(t *testing.T, kind string, p Paths, h http.Header, body string) Event {
	t.Helper()
	evs, err := Extract(kind, p, h, []byte(body))
	if err != nil {
		t.Fatalf("Extract(%s): %v", kind, err)
	}
	if len(evs) != 1 {
		t.Fatalf("Extract(%s) = %d events", kind, len(evs))
	}
	return evs[0]
}

func wantMalformed(t *testing.T, err error, field, text string) {
	t.Helper()
	var me *MalformedError
	if !errors.As(err, &me) {
		t.Fatalf("want *MalformedError on %s, got %v", field, err)
	}
	if me.Field != field || !strings.Contains(me.Msg, text) {
		t.Fatalf("want %s: ...%s..., got %q", field, text, err)
	}
}

func TestStripe(t *testing.T) {
	ev := one(t, senderkind.Stripe, Paths{}, nil, stripeEvent)
	want := Event{EventID: "evt_1QX8pLJ8mC4Qx2Ab", Type: "customer.subscription.updated", Entity: "sub_1QX8pK", Account: "acct_1Nv0FGQ9RKHgCVdK", OccurredAt: t0}
	if ev.EventID != want.EventID || ev.Type != want.Type || ev.Entity != want.Entity || ev.Account != want.Account || !ev.OccurredAt.Equal(want.OccurredAt) {
		t.Fatalf("got %+v", ev)
	}
	if string(ev.Body) != stripeEvent {
		t.Fatal("single-event body must be the body as received")
	}
	// A platform (non-Connect) event has no account.
	ev = one(t, senderkind.Stripe, Paths{}, nil, strings.Replace(stripeEvent, `"account": "acct_1Nv0FGQ9RKHgCVdK",`, "", 1))
	if ev.Account != "" {
		t.Fatalf("account %q", ev.Account)
	}
	_, err := Extract(senderkind.Stripe, Paths{}, nil, []byte(strings.Replace(stripeEvent, `"id": "evt_1QX8pLJ8mC4Qx2Ab"`, `"id": ""`, 1)))
	wantMalformed(t, err, "id", "is required")
	_, err = Extract(senderkind.Stripe, Paths{}, nil, []byte(strings.Replace(stripeEvent, `"type": "customer.subscription.updated"`, `"type": null`, 1)))
	wantMalformed(t, err, "type", "is required")
	_, err = Extract(senderkind.Stripe, Paths{}, nil, []byte(strings.Replace(stripeEvent, `"created": 1767225600`, `"created": "yesterday"`, 1)))
	wantMalformed(t, err, "created", "is not a time")
	_, err = Extract(senderkind.Stripe, Paths{}, nil, []byte(strings.Replace(stripeEvent, `"account": "acct_1Nv0FGQ9RKHgCVdK"`, `"account": {"id": 1}`, 1)))
	wantMalformed(t, err, "account", "string or a number")
}

func TestHubSpotBatch(t *testing.T) {
	evs, err := Extract(senderkind.HubSpot, Paths{}, nil, []byte(hubspotBatch))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("%d events", len(evs))
	}
	if evs[0].EventID != "62515:12345:1:1564113600000:123" || evs[0].Type != "contact.creation" || evs[0].Entity != "123" || evs[0].Account != "62515" || !evs[0].OccurredAt.Equal(time.UnixMilli(1564113600000)) {
		t.Fatalf("event 0: %+v", evs[0])
	}
	// 9007199254740993 is 2^53+1: a float64 would round it to ...992.
	if evs[1].EventID != "62515:2114401:3892116512:1767225600123:9007199254740993:dealstage" || evs[1].Entity != "9007199254740993" {
		t.Fatalf("event 1: %+v", evs[1])
	}
	if evs[1].OccurredAt.Nanosecond() != 123_000_000 {
		t.Fatalf("milliseconds lost: %s", evs[1].OccurredAt)
	}
	// Each event keeps its own raw bytes.
	if !strings.HasPrefix(string(evs[1].Body), `{"eventId": 3892116512,`) || !json.Valid(evs[1].Body) {
		t.Fatalf("element body %q", evs[1].Body)
	}
}

// A retry of the same delivery changes only attemptNumber, and the
// identity must not change with it.
func TestHubSpotIdentityIgnoresAttemptNumber(t *testing.T) {
	a, err := Extract(senderkind.HubSpot, Paths{}, nil, []byte(hubspotBatch))
	if err != nil {
		t.Fatal(err)
	}
	retry := strings.NewReplacer(`"attemptNumber":0`, `"attemptNumber":1`, `"attemptNumber": 2`, `"attemptNumber": 7`).Replace(hubspotBatch)
	b, err := Extract(senderkind.HubSpot, Paths{}, nil, []byte(retry))
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i].EventID != b[i].EventID {
			t.Fatalf("identity changed across retries: %s vs %s", a[i].EventID, b[i].EventID)
		}
		if strings.Contains(a[i].EventID, "attempt") {
			t.Fatal("attempt in identity")
		}
	}
	// The same classic eventId in another portal or subscription is
	// another event.
	other, _ := Extract(senderkind.HubSpot, Paths{}, nil, []byte(strings.Replace(hubspotBatch, `"portalId":62515`, `"portalId":99`, 1)))
	if other[0].EventID == a[0].EventID {
		t.Fatal("portal not part of the identity")
	}
}

func TestHubSpotContract(t *testing.T) {
	elem := `{"eventId":%d,"subscriptionId":1,"portalId":2,"occurredAt":1767225600000,"subscriptionType":"contact.creation","objectId":%d}`
	batch := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(elem, i, i)
		}
		return "[" + strings.Join(parts, ",") + "]"
	}
	evs, err := Extract(senderkind.HubSpot, Paths{}, nil, []byte(batch(100)))
	if err != nil || len(evs) != 100 {
		t.Fatalf("100 events: %d, %v", len(evs), err)
	}
	_, err = Extract(senderkind.HubSpot, Paths{}, nil, []byte(batch(101)))
	wantMalformed(t, err, "body", "at most 100")
	_, err = Extract(senderkind.HubSpot, Paths{}, nil, []byte(`[]`))
	wantMalformed(t, err, "body", "no events")
	_, err = Extract(senderkind.HubSpot, Paths{}, nil, []byte(`{"eventId":1}`))
	wantMalformed(t, err, "body", "array")
	_, err = Extract(senderkind.HubSpot, Paths{}, nil, []byte(`[1]`))
	wantMalformed(t, err, "[0]", "object")
	_, err = Extract(senderkind.HubSpot, Paths{}, nil, []byte(`[`+fmt.Sprintf(elem, 1, 1)+`,{"subscriptionId":1,"portalId":2,"occurredAt":1,"subscriptionType":"x"}]`))
	wantMalformed(t, err, "[1].eventId", "is required")
	_, err = Extract(senderkind.HubSpot, Paths{}, nil, []byte(`[{"eventId":1,"subscriptionId":1,"portalId":2,"occurredAt":1767225600000}]`))
	wantMalformed(t, err, "[0].subscriptionType", "is required")
	// An override replaces the composite identity.
	evs, err = Extract(senderkind.HubSpot, Paths{EventID: "eventId"}, nil, []byte(batch(1)))
	if err != nil || evs[0].EventID != "0" {
		t.Fatalf("override: %+v %v", evs, err)
	}
}

func TestKlaviyo(t *testing.T) {
	h := http.Header{}
	h.Set("Klaviyo-Webhook-Id", "01KP4928STE8FKCWB6WDHZ4ZB7")
	evs, err := Extract(senderkind.Klaviyo, Paths{}, h, []byte(klaviyoBatch))
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 {
		t.Fatalf("%d events", len(evs))
	}
	e := evs[0]
	if e.EventID != "5A2vDqkEKH" || e.Type != "event:klaviyo.received_email" || e.Entity != "01JG8ZP3QK" || e.Account != "WBhXHN" || !e.OccurredAt.Equal(t0.Add(-time.Second)) {
		t.Fatalf("event 0: %+v", e)
	}
	if !evs[1].OccurredAt.IsZero() {
		t.Fatalf("no datetime must give the zero time, got %s", evs[1].OccurredAt)
	}
	// The numeric timestamp is reachable by override.
	evs, err = Extract(senderkind.Klaviyo, Paths{OccurredAt: "payload.data.attributes.timestamp"}, h, []byte(klaviyoBatch))
	if err != nil || !evs[1].OccurredAt.Equal(t0) {
		t.Fatalf("override: %v %v", evs, err)
	}
	h.Set("Klaviyo-Webhook-Id", "01OTHERWEBHOOK")
	_, err = Extract(senderkind.Klaviyo, Paths{}, h, []byte(klaviyoBatch))
	wantMalformed(t, err, "meta.klaviyo_webhook_id", "does not match")
	_, err = Extract(senderkind.Klaviyo, Paths{}, nil, []byte(`{"data":[],"meta":{}}`))
	wantMalformed(t, err, "data", "no events")
	_, err = Extract(senderkind.Klaviyo, Paths{}, nil, []byte(`{"meta":{}}`))
	wantMalformed(t, err, "data", "array")
	_, err = Extract(senderkind.Klaviyo, Paths{}, nil, []byte(`{"data":[{"topic":"t"}]}`))
	wantMalformed(t, err, "data[0].external_id", "is required")
}

func TestStandardWebhooks(t *testing.T) {
	h := http.Header{}
	h.Set("webhook-id", "msg_2Lq3bXgkWZn")
	ev := one(t, senderkind.StandardWebhooks, Paths{}, h, swEvent)
	if ev.EventID != "msg_2Lq3bXgkWZn" || ev.Type != "contact.created" || !ev.OccurredAt.Equal(t0.Add(250*time.Millisecond)) {
		t.Fatalf("%+v", ev)
	}
	ev = one(t, senderkind.StandardWebhooks, Paths{Entity: "data.id"}, h, `{"data":{"id":"c_1"}}`)
	if ev.Type != "" || !ev.OccurredAt.IsZero() || ev.Entity != "c_1" {
		t.Fatalf("optional fields: %+v", ev)
	}
	_, err := Extract(senderkind.StandardWebhooks, Paths{}, http.Header{}, []byte(swEvent))
	wantMalformed(t, err, "webhook-id", "required")
}

func TestPipedrive(t *testing.T) {
	ev := one(t, senderkind.Pipedrive, Paths{}, nil, pipedriveEvent)
	if ev.EventID != "8d3a5c1e-7b2f-4e61-9a0d-3c5e7f9b1a24" || ev.Type != "deal.change" || ev.Entity != "1" || ev.Account != "12882925" || !ev.OccurredAt.Equal(t0) {
		t.Fatalf("%+v", ev)
	}
	// Numeric ids and a seconds timestamp, as some v2 examples show.
	numeric := strings.NewReplacer(`"id":"8d3a5c1e-7b2f-4e61-9a0d-3c5e7f9b1a24"`, `"id":77012`, `"timestamp":"2026-01-01T00:00:00.000Z"`, `"timestamp":1767225600`).Replace(pipedriveEvent)
	ev = one(t, senderkind.Pipedrive, Paths{}, nil, numeric)
	if ev.EventID != "77012" || !ev.OccurredAt.Equal(t0) {
		t.Fatalf("%+v", ev)
	}
	_, err := Extract(senderkind.Pipedrive, Paths{}, nil, []byte(strings.Replace(pipedriveEvent, `"action":"change",`, "", 1)))
	wantMalformed(t, err, "meta.action", "is required")
	_, err = Extract(senderkind.Pipedrive, Paths{}, nil, []byte(`{"v":1,"meta":{"v":1,"action":"added","object":"deal","id":42},"current":{}}`))
	wantMalformed(t, err, "v", "v1")
	_, err = Extract(senderkind.Pipedrive, Paths{}, nil, []byte(strings.Replace(pipedriveEvent, `"version":"2.0"`, `"version":"1.0"`, 1)))
	wantMalformed(t, err, "meta.version", "only Pipedrive webhooks v2")
	ev = one(t, senderkind.Pipedrive, Paths{Type: "meta.action"}, nil, pipedriveEvent)
	if ev.Type != "change" {
		t.Fatalf("type override: %q", ev.Type)
	}
}

func TestGenericHMAC(t *testing.T) {
	ev := one(t, senderkind.HMAC, Paths{}, nil, genericEvent)
	if ev.EventID != "ev_01JH2Q8N3M" || ev.Type != "subscription.created" || !ev.OccurredAt.Equal(t0) || ev.Entity != "" || ev.Account != "" {
		t.Fatalf("%+v", ev)
	}
	ev = one(t, senderkind.HMAC, Paths{Entity: "subscription.number"}, nil, genericEvent)
	if ev.Entity != "+447700900123" {
		t.Fatalf("entity %q", ev.Entity)
	}
	// No occurredAt: the zero time, never the time of receipt.
	ev = one(t, senderkind.HMAC, Paths{}, nil, `{"eventId":"e1","type":"x"}`)
	if !ev.OccurredAt.IsZero() {
		t.Fatalf("occurredAt %s", ev.OccurredAt)
	}
	// Array addressing and root paths.
	ev = one(t, senderkind.HMAC, Paths{EventID: "ids.1", Account: "$.tenant.id"}, nil, `{"ids":["a",12345678901234567890],"tenant":{"id":"t9"}}`)
	if ev.EventID != "12345678901234567890" || ev.Account != "t9" {
		t.Fatalf("%+v", ev)
	}
	for _, body := range []string{`{"eventId":"e1","occurredAt":"2026-13-01T00:00:00Z"}`, `{"eventId":"e1","occurredAt":-5}`, `{"eventId":"e1","occurredAt":1.5}`, `{"eventId":"e1","occurredAt":99999999999999}`, `{"eventId":"e1","occurredAt":true}`} {
		_, err := Extract(senderkind.HMAC, Paths{}, nil, []byte(body))
		wantMalformed(t, err, "occurredAt", "is not a time")
	}
	_, err := Extract(senderkind.HMAC, Paths{}, nil, []byte(`{"eventId":{"nested":1}}`))
	wantMalformed(t, err, "eventId", "string or a number")
	_, err = Extract(senderkind.HMAC, Paths{}, nil, []byte(`{"type":"x"}`))
	wantMalformed(t, err, "eventId", "is required")
}

func TestMalformedBodies(t *testing.T) {
	for _, c := range []struct{ body, text string }{
		{``, "is empty"},
		{`{"eventId":`, "not valid JSON"},
		{`{"eventId":"a"} {"eventId":"b"}`, "data after"},
		{`{"eventId":"a"}x`, "data after"},
		{`["eventId"]`, "JSON object"},
		{`"evt"`, "JSON object"},
	} {
		_, err := Extract(senderkind.HMAC, Paths{}, nil, []byte(c.body))
		wantMalformed(t, err, "body", c.text)
	}
	if _, err := Extract(senderkind.HMAC, Paths{}, nil, []byte("{\"eventId\":\"a\"}\n")); err != nil {
		t.Fatalf("trailing newline: %v", err)
	}
}

func TestConfigErrors(t *testing.T) {
	_, err := Extract("svix", Paths{}, nil, []byte(`{}`))
	var me *MalformedError
	if err == nil || errors.As(err, &me) {
		t.Fatalf("unknown kind must be a plain error, got %v", err)
	}
	for _, p := range []Paths{{EventID: "a..b"}, {Type: "."}, {Entity: "$."}, {Account: "x."}} {
		if validatePaths(p) == nil {
			t.Errorf("ValidatePaths(%+v) accepted", p)
		}
		if _, err := Extract(senderkind.HMAC, p, nil, []byte(genericEvent)); err == nil || errors.As(err, &me) {
			t.Errorf("bad path %+v: %v", p, err)
		}
	}
	if err := validatePaths(Paths{EventID: "meta.id", Account: "$.meta.account", Entity: "items.0.id"}); err != nil {
		t.Fatal(err)
	}
	// Extract understands exactly the registry's kinds (senderkind's
	// TestBuiltinNames pins that list).
	for _, k := range senderkind.Builtin().Names() {
		if _, err := Extract(k, Paths{}, nil, nil); err != nil && strings.Contains(err.Error(), "unknown kind") {
			t.Errorf("Extract(%q): %v", k, err)
		}
	}
}

// GitHub names the event in headers: X-GitHub-Delivery is one GUID per
// event (redeliveries keep it) and X-GitHub-Event is the type.
func TestHeaderPaths(t *testing.T) {
	h := http.Header{}
	h.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
	h.Set("X-GitHub-Event", "issues")
	body := `{"action":"opened","issue":{"id":1,"number":1347},"repository":{"id":1296269},"installation":{"id":412}}`
	p := Paths{EventID: "header:X-GitHub-Delivery", Type: "header:X-GitHub-Event", Entity: "issue.id", Account: "installation.id"}
	ev := one(t, senderkind.HMAC, p, h, body)
	if ev.EventID != "72d3162e-cc78-11e3-81ab-4c9367dc0958" || ev.Type != "issues" || ev.Entity != "1" || ev.Account != "412" || !ev.OccurredAt.IsZero() {
		t.Fatalf("%+v", ev)
	}
	_, err := Extract(senderkind.HMAC, p, http.Header{}, []byte(body))
	wantMalformed(t, err, "header:X-GitHub-Delivery", "is required")
	for _, bad := range []string{"header:", "header: ", "header:a b", "header:a:b"} {
		if validatePaths(Paths{EventID: bad}) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
