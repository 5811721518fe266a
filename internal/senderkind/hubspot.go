package senderkind

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
)

// HubSpot is HubSpot's app webhooks and workflow webhook action, pinned to
// one signature version (v3 by default).
const HubSpot = "hubspot"

func hubspot() Kind {
	versions := []string{signature.HubSpotV3, signature.HubSpotV2, signature.HubSpotV1}
	return Kind{
		Name:  HubSpot,
		Title: "HubSpot",
		Scheme: Scheme{
			Name:     signature.KindHubSpot,
			Versions: versions,
			// v2 and v3 sign the URL the sender called.
			SignsURL:    func(s Source) bool { return s.Version == signature.HubSpotV2 || s.Version == signature.HubSpotV3 },
			Placeholder: "operator-load-placeholder",
		},
		Identity: Identity{
			// The event id has no single path: see hubspotEventID.
			Type: "subscriptionType", OccurredAt: "occurredAt", Entity: "objectId", Account: "portalId",
			TypeRequired: true, Unit: time.Millisecond,
			Rules: Rules{EventID: hubspotEventID},
			Batch: Batch{Array: true, Max: maxHubSpotBatch},
		},
		Keep:      []string{"X-HubSpot-Request-Timestamp", "X-HubSpot-Signature-Version"},
		Tolerance: signature.DefaultTolerance(signature.KindHubSpot),
		Check: func(s Source) []Problem {
			if !slices.Contains(versions, s.Version) {
				return []Problem{{Field: "version", Msg: fmt.Sprintf("hubspot version %q is not one of %s", s.Version, strings.Join(versions, ", "))}}
			}
			return nil
		},
		Vendor:     "hubspot-app",
		Sample:     "deal-stage-changes",
		Fill:       hubspotSample,
		SampleNote: "a batch, signed as the source's pinned version: v1, v2 or v3",
	}
}

// maxHubSpotBatch is the most events HubSpot puts in one request.
const maxHubSpotBatch = 100

// hubspotEventID builds HubSpot's event identity. HubSpot's classic eventId
// is not guaranteed unique, so it is combined with the fields that scope it:
// the portal, the subscription, the occurrence time in milliseconds and the
// object (plus the property for property changes). All of them are the same
// on every retry of a delivery; attemptNumber, which changes per retry, is
// never part of the identity (IP02).
func hubspotEventID(ev Doc) (string, error) {
	parts := make([]string, 0, 6)
	for _, f := range []string{"portalId", "subscriptionId", "eventId", "occurredAt"} {
		s, err := ev.Required(f)
		if err != nil {
			return "", err
		}
		parts = append(parts, s)
	}
	for _, f := range []string{"objectId", "propertyName"} {
		s, err := ev.Str(f)
		if err != nil {
			return "", err
		}
		if s != "" || f == "objectId" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ":"), nil
}

// hubspotSample gives each event of a HubSpot batch a fresh eventId and
// occurredAt, and the source's portal. occurredAt is part of HubSpot's
// event identity: a fixed --event-id keeps the sample's, so a resend is
// the same event.
func hubspotSample(s *SampleDoc) {
	list, _ := s.Doc.([]any)
	for i, e := range list {
		if s.ID == "" {
			n, _ := rand.Int(rand.Reader, big.NewInt(1<<40))
			setPath(e, "eventId", json.Number(n.String()))
			setPath(e, "occurredAt", json.Number(strconv.FormatInt(s.Now.UnixMilli()+int64(i), 10)))
		} else {
			setPath(e, "eventId", s.Nth(i, ""))
		}
		if s.Account != "" {
			setPath(e, "portalId", s.AccountValue())
		}
	}
}
