package envelope

import (
	"errors"
	"net/http"
	"testing"

	"github.com/hookledger/hookledger/internal/senderkind"
)

// A Standard Webhooks event is named by whichever id header its sender
// used: webhook-id, or svix-id for a Svix-powered sender. fields.event_id
// still overrides both.
func TestStandardWebhooksEventIDFromSvixID(t *testing.T) {
	body := `{"type":"user.created","timestamp":"2026-01-01T00:00:00Z","data":{"id":"user_1"}}`
	svix := http.Header{}
	svix.Set("svix-id", "msg_svix")
	ev := one(t, senderkind.StandardWebhooks, Paths{}, svix, body)
	if ev.EventID != "msg_svix" || ev.Type != "user.created" {
		t.Fatalf("event = %+v, want id msg_svix", ev)
	}
	webhook := http.Header{}
	webhook.Set("webhook-id", "msg_webhook")
	if ev := one(t, senderkind.StandardWebhooks, Paths{}, webhook, body); ev.EventID != "msg_webhook" {
		t.Fatalf("event id = %q, want msg_webhook", ev.EventID)
	}
	if ev := one(t, senderkind.StandardWebhooks, Paths{EventID: "data.id"}, svix, body); ev.EventID != "user_1" {
		t.Fatalf("fields.event_id override: id = %q, want user_1", ev.EventID)
	}
	_, err := Extract(senderkind.StandardWebhooks, Paths{}, http.Header{}, []byte(body))
	var me *MalformedError
	if !errors.As(err, &me) || me.Field != "webhook-id" {
		t.Fatalf("no id header: %v, want a MalformedError on webhook-id", err)
	}
}
