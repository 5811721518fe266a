package senderkind

import "github.com/hookledger/hookledger/internal/signature"

// Pipedrive is Pipedrive's webhooks v2, authenticated with HTTP Basic
// credentials (no signature, no timestamp).
const Pipedrive = "pipedrive"

func pipedrive() Kind {
	return Kind{
		Name:   Pipedrive,
		Title:  "Pipedrive",
		Scheme: Scheme{Name: signature.KindPipedrive, Placeholder: "operator:placeholder"},
		Identity: Identity{
			// The type is meta.entity + "." + meta.action: see RulePipedrive.
			EventID: "meta.id", OccurredAt: "meta.timestamp", Entity: "meta.entity_id", Account: "meta.company_id",
			TypeRequired: true, Unit: secondUnit,
			Rule: RulePipedrive,
		},
		// Tolerance 0: Pipedrive sends no timestamp, and verify refuses a
		// configured one.
		Vendor: "pipedrive",
		Sample: "deal.change",
	}
}
