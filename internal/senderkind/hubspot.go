package senderkind

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/verify"
)

// HubSpot is HubSpot's app webhooks and workflow webhook action, pinned to
// one signature version (v3 by default).
const HubSpot = "hubspot"

func hubspot() Kind {
	versions := []string{verify.HubSpotV3, verify.HubSpotV2, verify.HubSpotV1}
	return Kind{
		Name:  HubSpot,
		Title: "HubSpot",
		Scheme: Scheme{
			Name:     verify.KindHubSpot,
			Versions: versions,
			// v2 and v3 sign the URL the sender called.
			SignsURL:    func(s Source) bool { return s.Version == verify.HubSpotV2 || s.Version == verify.HubSpotV3 },
			Placeholder: "operator-load-placeholder",
		},
		Identity: Identity{
			// The event id has no single path: see RuleHubSpot.
			Type: "subscriptionType", OccurredAt: "occurredAt", Entity: "objectId", Account: "portalId",
			TypeRequired: true, Unit: time.Millisecond,
			Rule:  RuleHubSpot,
			Batch: Batch{Array: true, Max: MaxHubSpotBatch},
		},
		Keep:      []string{"X-HubSpot-Request-Timestamp", "X-HubSpot-Signature-Version"},
		Tolerance: verify.DefaultTolerance(verify.KindHubSpot),
		Check: func(s Source) []Problem {
			if !slices.Contains(versions, s.Version) {
				return []Problem{{Field: "version", Msg: fmt.Sprintf("hubspot version %q is not one of %s", s.Version, strings.Join(versions, ", "))}}
			}
			return nil
		},
		Vendor: "hubspot-app",
		Sample: "deal-stage-changes",
	}
}

// MaxHubSpotBatch is the most events HubSpot puts in one request.
const MaxHubSpotBatch = 100
