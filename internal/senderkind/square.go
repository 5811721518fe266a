package senderkind

import (
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/vendors"
)

// Square is Square's webhook subscriptions.
const Square = "square"

// square verifies X-Square-Hmacsha256-Signature, the base64 HMAC-SHA256 of
// the notification URL followed by the raw body, so a source needs
// public_url set to the subscription's URL exactly. The SHA-1
// X-Square-Signature is never accepted.
//
// The event is named by event_id, the idempotency value Square tells
// receivers to deduplicate on; the type is type, the account merchant_id
// (tenant check), the entity data.id, the occurrence created_at.
func square() Kind {
	return Kind{
		Name:  Square,
		Title: "Square",
		Scheme: Scheme{
			Name:        signature.KindSquare,
			Placeholder: "operator-load-placeholder",
		},
		Sample: "payment.updated",
		Fill:   squareSample,
		Identity: Identity{
			EventID: "event_id", Type: "type", TypeRequired: true,
			Account: "merchant_id", Entity: "data.id", OccurredAt: "created_at", Unit: time.Second,
		},
		Keep: []string{"Square-Version", "Square-Environment"},
		Check: func(s Source) []Problem {
			return append(untimed("Square")(s), requirePublicURL(s, "Square")...)
		},
		Contract: &vendors.Contract{
			Name:          Square,
			Title:         "Square webhook subscriptions",
			Kind:          vendors.KindSender,
			Source:        "developer.squareup.com webhooks pages (delivery SLA, manage and verify)",
			Read:          "2026-12-01",
			AckTimeout:    10 * time.Second,
			RetrySchedule: []time.Duration{time.Minute, 3 * time.Minute, 7 * time.Minute, 15 * time.Minute, 31 * time.Minute, 63 * time.Minute},
			RetryWindow:   72 * time.Hour,
			DedupeKey:     "event_id, the idempotency value of each notification",
			Notes: []string{
				"Answer with a 2xx within 10 seconds; a 3xx counts as a failure.",
				"Retries after 1, 2, 4, 8, 16 and 32 minutes, then hourly, for up to 72 hours after the event; then the notification is discarded.",
				"A subscription without any 2xx for three weeks is disabled after warning emails.",
				"The signature covers the notification URL exactly as entered in the subscription, then the body.",
				"No ordering guarantee; the object's version (payments ...) orders revisions.",
			},
		},
		Sign: Sign{NeedsURL: true},
	}
}

// squareSample gives a sample a fresh event_id and time, and the source's
// merchant.
func squareSample(s *SampleDoc) {
	s.Set("event_id", s.Nth(0, "uuid"))
	s.Set("created_at", s.Now.UTC().Format("2006-01-02T15:04:05.000Z"))
	if s.Account != "" {
		s.Set("merchant_id", s.Account)
	}
}
