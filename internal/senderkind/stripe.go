package senderkind

import "github.com/hookledger/hookledger/internal/signature"

// Stripe is Stripe's webhooks: Stripe-Signature over "{t}.{body}".
const Stripe = "stripe"

func stripe() Kind {
	return Kind{
		Name:   Stripe,
		Title:  "Stripe",
		Scheme: Scheme{Name: signature.KindStripe, Placeholder: "operator-load-placeholder"},
		Identity: Identity{
			EventID: "id", Type: "type", OccurredAt: "created", Entity: "data.object.id", Account: "account",
			TypeRequired: true, Unit: secondUnit, CoarseTime: true,
		},
		Keep:      []string{"Stripe-Account"},
		Tolerance: signature.DefaultTolerance(signature.KindStripe),
		Check: func(s Source) []Problem {
			if s.Tolerance != nil && *s.Tolerance == 0 {
				return []Problem{{Field: "tolerance", Msg: "a Stripe tolerance of 0 disables replay protection; use a positive value such as 5m"}}
			}
			return nil
		},
		Vendor: "stripe",
		Sample: "invoice.paid",
		Fill:   stripeSample,
	}
}

// stripeSample gives a Stripe sample a fresh event id and creation time,
// and the source's Connect account.
func stripeSample(s *SampleDoc) {
	s.Set("id", s.Nth(0, "evt_"))
	s.Set("created", s.Seconds())
	if s.Account != "" {
		s.Set("account", s.Account)
	}
}
