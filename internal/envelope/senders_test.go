package envelope

import (
	"net/http"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/senderkind"
)

// Test SIDs of Twilio's shape: two capital letters and 32 hex digits.
const (
	twAC = "AC0123456789abcdef0123456789abcdef"
	twSM = "SM1234567890abcdef1234567890abcdef"
	twCA = "CA5d2e8f1a4b7c0d3e6f9a2b5c8d1e4f7a"
)

// Twilio's form bodies: an inbound message is named by its sid and status,
// each status callback of one message is an event of its own, a call's
// status callback adds its SequenceNumber, and the same parameters in
// another order (a retry) keep the identity.
func TestTwilioFormIdentity(t *testing.T) {
	for _, c := range []struct {
		body, id, typ, entity, account string
	}{
		{"AccountSid=" + twAC + "&MessageSid=" + twSM + "&SmsStatus=received&Body=Hi", twSM + ":received", "message.received", twSM, twAC},
		{"SmsStatus=received&Body=Hi&MessageSid=" + twSM + "&AccountSid=" + twAC, twSM + ":received", "message.received", twSM, twAC},
		{"AccountSid=" + twAC + "&MessageSid=" + twSM + "&MessageStatus=delivered&SmsStatus=delivered", twSM + ":delivered", "message.delivered", twSM, twAC},
		{"AccountSid=" + twAC + "&CallSid=" + twCA + "&CallStatus=completed&SequenceNumber=3", twCA + ":completed:3", "call.completed", twCA, twAC},
		{"AccountSid=" + twAC + "&CallSid=" + twCA + "&CallStatus=ringing&From=%2B14158141829", twCA + ":ringing", "call.ringing", twCA, twAC},
		// Only a call's callbacks are numbered; a message's SequenceNumber
		// is not part of its identity.
		{"AccountSid=" + twAC + "&MessageSid=" + twSM + "&SequenceNumber=5&SmsStatus=received", twSM + ":received", "message.received", twSM, twAC},
	} {
		ev := one(t, senderkind.Twilio, Paths{}, nil, c.body)
		if ev.EventID != c.id || ev.Type != c.typ || ev.Entity != c.entity || ev.Account != c.account || string(ev.Body) != c.body {
			t.Errorf("%s: got %+v", c.body, ev)
		}
	}
	for body, field := range map[string]string{
		"AccountSid=" + twAC + "&Body=Hi": "MessageSid",
		"%zz":                             "body",
		"":                                "body",
	} {
		_, err := Extract(senderkind.Twilio, Paths{}, nil, []byte(body))
		if me, ok := err.(*MalformedError); !ok || me.Field != field {
			t.Errorf("%q: %v, want malformed %s", body, err, field)
		}
	}
	// fields: name form parameters.
	ev := one(t, senderkind.Twilio, Paths{EventID: "MessageSid", Type: "SmsStatus"}, nil, "AccountSid="+twAC+"&MessageSid="+twSM+"&SmsStatus=received")
	if ev.EventID != twSM || ev.Type != "received" {
		t.Fatalf("fields override: %+v", ev)
	}
	// A JSON body (bodySHA256) is a CloudEvent named by its id.
	ev = one(t, senderkind.Twilio, Paths{}, nil, `{"specversion":"1.0","type":"com.twilio.messaging.message.delivered","id":"EZ1","time":"2026-01-01T00:00:00Z","data":{"messageSid":"SM1","accountSid":"AC1"}}`)
	if ev.EventID != "EZ1" || ev.Type != "com.twilio.messaging.message.delivered" || ev.Entity != "SM1" || ev.Account != "AC1" || !ev.OccurredAt.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("cloudevent: %+v", ev)
	}
}

// Shopify's identity is in its headers: X-Shopify-Event-Id, never the
// per-delivery X-Shopify-Webhook-Id; a delivery without the event id is
// malformed rather than named by the webhook id.
func TestShopifyHeaderIdentity(t *testing.T) {
	h := http.Header{}
	h.Set("X-Shopify-Event-Id", "evt-1")
	h.Set("X-Shopify-Webhook-Id", "delivery-1")
	h.Set("X-Shopify-Topic", "orders/create")
	h.Set("X-Shopify-Shop-Domain", "example.myshopify.com")
	h.Set("X-Shopify-Triggered-At", "2026-01-01T00:00:00.000000000Z")
	ev := one(t, senderkind.Shopify, Paths{}, h, `{"id":1,"admin_graphql_api_id":"gid://shopify/Order/1"}`)
	if ev.EventID != "evt-1" || ev.Type != "orders/create" || ev.Account != "example.myshopify.com" || ev.Entity != "gid://shopify/Order/1" || ev.OccurredAt.IsZero() {
		t.Fatalf("shopify: %+v", ev)
	}
	h.Del("X-Shopify-Event-Id")
	if _, err := Extract(senderkind.Shopify, Paths{}, h, []byte(`{"id":1}`)); err == nil {
		t.Fatal("a delivery without X-Shopify-Event-Id was named")
	}
}

// Slack, Paddle and Square read their identity from the body.
func TestBodyIdentitySenders(t *testing.T) {
	ev := one(t, senderkind.Slack, Paths{}, nil, `{"type":"event_callback","event_id":"Ev1","team_id":"T1","event":{"type":"app_mention"},"event_time":1767225600}`)
	if ev.EventID != "Ev1" || ev.Type != "app_mention" || ev.Account != "T1" || ev.OccurredAt.Unix() != 1767225600 {
		t.Errorf("slack: %+v", ev)
	}
	ev = one(t, senderkind.Paddle, Paths{}, nil, `{"event_id":"evt_1","event_type":"transaction.paid","notification_id":"ntf_1","occurred_at":"2026-01-01T00:00:00.000000Z","data":{"id":"txn_1"}}`)
	if ev.EventID != "evt_1" || ev.Type != "transaction.paid" || ev.Entity != "txn_1" || ev.OccurredAt.IsZero() {
		t.Errorf("paddle: %+v", ev)
	}
	ev = one(t, senderkind.Square, Paths{}, nil, `{"merchant_id":"M1","type":"payment.updated","event_id":"e1","created_at":"2026-01-01T00:00:00.000Z","data":{"type":"payment","id":"p1"}}`)
	if ev.EventID != "e1" || ev.Type != "payment.updated" || ev.Account != "M1" || ev.Entity != "p1" || ev.OccurredAt.IsZero() {
		t.Errorf("square: %+v", ev)
	}
	if _, err := Extract(senderkind.Paddle, Paths{}, nil, []byte(`{"notification_id":"ntf_1","event_type":"t"}`)); err == nil {
		t.Error("paddle: a body without event_id was named (by notification_id?)")
	}
}
