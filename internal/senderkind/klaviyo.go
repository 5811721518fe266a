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
			Rule:  RuleKlaviyo,
			Batch: Batch{Key: "data"},
		},
		Keep:      []string{"Klaviyo-Timestamp", "Klaviyo-Webhook-Id"},
		Tolerance: signature.DefaultTolerance(signature.KindKlaviyo),
		Vendor:    "klaviyo-system",
		Sample:    "email-events",
	}
}
