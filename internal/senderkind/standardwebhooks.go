package senderkind

import (
	"encoding/base64"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
)

// StandardWebhooks is any sender that follows the Standard Webhooks
// specification, with the specification's webhook-* header names or the
// svix-* names of Svix-powered senders (one set per request).
const StandardWebhooks = "standard-webhooks"

func standardWebhooks() Kind {
	sets := signature.HeaderSets()
	var ids []string
	for _, hs := range sets {
		ids = append(ids, hs.ID)
	}
	return Kind{
		Name:  StandardWebhooks,
		Title: "Standard Webhooks (and Svix)",
		Scheme: Scheme{
			Name: signature.KindStandardWebhooks,
			// 32 bytes, within the specification's 24 to 64.
			Placeholder: "whsec_" + base64.StdEncoding.EncodeToString([]byte("operator-load-placeholder-secret")),
		},
		Identity: Identity{
			// The event id is the id header, which stays the same on every
			// retry of a message; the verifier has already refused a
			// request that mixes the two sets, so at most one is present.
			EventIDHeaders: ids,
			Type:           "type", OccurredAt: "timestamp", Unit: secondUnit,
		},
		Keep:      []string{"Webhook-Id", "Webhook-Timestamp", "Svix-Id", "Svix-Timestamp"},
		Tolerance: signature.DefaultTolerance(signature.KindStandardWebhooks),
		Sign:      Sign{EventIDHeader: true, HeaderSets: sets},
		Sample:    "contact.created",
		Fill:      standardWebhooksSample,
	}
}

// standardWebhooksSample gives a sample the current time; the event id
// travels in the webhook-id header, fresh unless --event-id names one.
func standardWebhooksSample(s *SampleDoc) {
	s.Set("timestamp", s.Now.UTC().Format(time.RFC3339Nano))
	if s.HeaderID == "" {
		s.HeaderID = s.Fresh("msg_")
	}
}
