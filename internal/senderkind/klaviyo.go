package senderkind

import "github.com/hookledger/hookledger/internal/signature"

// Klaviyo is Klaviyo's system webhooks: Klaviyo-Signature over the body and
// Klaviyo-Timestamp, events batched under data.
const Klaviyo = "klaviyo"

func klaviyo() Kind {
	return Kind{
		Name:   Klaviyo,
		Title:  "Klaviyo",
		Scheme: Scheme{Name: signature.KindKlaviyo, Placeholder: "operator-load-placeholder"},
		Identity: Identity{
			EventID: "external_id", Type: "topic", OccurredAt: "payload.data.attributes.datetime",
			Entity: "payload.data.relationships.profile.data.id", Account: "$.meta.klaviyo_account_id",
			TypeRequired: true, Unit: secondUnit,
			Rules: Rules{Body: klaviyoWebhookID},
			Batch: Batch{Key: "data"},
		},
		Keep:      []string{"Klaviyo-Timestamp", "Klaviyo-Webhook-Id"},
		Tolerance: signature.DefaultTolerance(signature.KindKlaviyo),
		Vendor:    "klaviyo-system",
		Sample:    "email-events",
		Fill:      klaviyoSample,
	}
}

// klaviyoWebhookID enforces Klaviyo's rule that meta.klaviyo_webhook_id
// matches the Klaviyo-Webhook-Id header: a mismatch means the body was
// produced for another webhook.
func klaviyoWebhookID(body Doc) error {
	h := body.Header("Klaviyo-Webhook-Id")
	if h == "" {
		return nil
	}
	if s, ok := body.Lookup("meta.klaviyo_webhook_id"); ok && s != h {
		return malformed("meta.klaviyo_webhook_id", "does not match the Klaviyo-Webhook-Id header")
	}
	return nil
}

// klaviyoSample gives each event of a Klaviyo batch a fresh id and time,
// and the body the source's account.
func klaviyoSample(s *SampleDoc) {
	list, _ := s.Get("data").([]any)
	for i, e := range list {
		eid := s.Nth(i, "")
		setPath(e, "external_id", eid)
		setPath(e, "payload.data.id", eid)
		setPath(e, "payload.data.attributes.timestamp", s.Seconds())
		setPath(e, "payload.data.attributes.datetime", s.RFC3339())
	}
	s.Set("meta.timestamp", s.RFC3339())
	if s.Account != "" {
		s.Set("meta.klaviyo_account_id", s.Account)
	}
}
