package senderkind

import (
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/vendors"
)

// Paddle is Paddle Billing's webhook notifications.
const Paddle = "paddle"

// paddle verifies Paddle-Signature (ts=...;h1=..., HMAC-SHA256 over
// "{ts}:{body}"). The tolerance defaults to five minutes, not the five
// seconds of Paddle's Node SDK, which refuses authentic notifications as
// soon as the clocks drift apart or a delivery is held up (see
// signature.PaddleDefaultTolerance); tolerance: configures it, up to 1h.
//
// The event is named by event_id, which Paddle documents as shared by every
// notification of one event, replays included; notification_id differs per
// destination and per replay and is never the identity (IP02). The type is
// event_type, the entity data.id, the occurrence occurred_at. The body
// names no account: each notification destination has its own secret.
func paddle() Kind {
	return Kind{
		Name:   Paddle,
		Title:  "Paddle Billing",
		Scheme: Scheme{Name: signature.KindPaddle, Placeholder: "operator-load-placeholder"},
		Sample: "transaction.completed",
		Fill:   paddleSample,
		Identity: Identity{
			EventID: "event_id", Type: "event_type", TypeRequired: true,
			Entity: "data.id", OccurredAt: "occurred_at", Unit: time.Second,
		},
		Tolerance: signature.DefaultTolerance(signature.KindPaddle),
		Check:     timedCheck("Paddle"),
		Contract: &vendors.Contract{
			Name:               Paddle,
			Aliases:            []string{"paddle-billing"},
			Title:              "Paddle Billing notifications",
			Kind:               vendors.KindSender,
			Source:             "developer.paddle.com webhooks pages (how webhooks work, respond to webhooks, signature verification) and notifications API reference",
			Read:               "2026-12-01",
			AckTimeout:         5 * time.Second,
			Retries:            60,
			RetryWindow:        3 * vendors.Day,
			ReplayWindow:       90 * vendors.Day,
			SignatureTolerance: signature.PaddleDefaultTolerance,
			DedupeKey:          "event_id, shared by every notification of one event (notification_id is per destination and per replay)",
			Notes: []string{
				"Answer with a 200 within 5 seconds.",
				"Live accounts retry up to 60 times over 3 days with exponential backoff; sandbox accounts retry fewer times.",
				"Notifications can be replayed through the API for 90 days; a replay is a new notification_id under the same event_id.",
				"Delivery is at least once and not in order: order by occurred_at.",
				"Paddle's Node SDK accepts a signed timestamp up to 5 seconds old; hookledger defaults to 5 minutes (configurable).",
			},
		},
	}
}

// paddleSample gives a sample a fresh event and notification id and the
// current time.
func paddleSample(s *SampleDoc) {
	s.Set("event_id", s.Nth(0, "evt_"))
	s.Set("notification_id", s.Fresh("ntf_"))
	s.Set("occurred_at", s.Now.UTC().Format("2006-01-02T15:04:05.000000Z"))
}
