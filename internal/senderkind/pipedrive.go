package senderkind

import (
	"strconv"
	"strings"

	"github.com/hookledger/hookledger/internal/signature"
)

// Pipedrive is Pipedrive's webhooks v2, authenticated with HTTP Basic
// credentials (no signature, no timestamp).
const Pipedrive = "pipedrive"

func pipedrive() Kind {
	return Kind{
		Name:   Pipedrive,
		Title:  "Pipedrive",
		Scheme: Scheme{Name: signature.KindPipedrive, Placeholder: "operator:placeholder"},
		Identity: Identity{
			// The type is meta.entity + "." + meta.action (pipedriveType),
			// and webhooks v1 bodies are refused (pipedriveVersion).
			EventID: "meta.id", OccurredAt: "meta.timestamp", Entity: "meta.entity_id", Account: "meta.company_id",
			TypeRequired: true, Unit: secondUnit,
			Rules: Rules{Body: pipedriveVersion, Type: pipedriveType},
		},
		// Tolerance 0: Pipedrive sends no timestamp, and verify refuses a
		// configured one.
		Vendor: "pipedrive",
		Sample: "deal.change",
		Fill:   pipedriveSample,
	}
}

// pipedriveType is the event's type: meta.entity + "." + meta.action
// (deal.change, person.delete).
func pipedriveType(ev Doc) (string, error) {
	entity, err := ev.Required("meta.entity")
	if err != nil {
		return "", err
	}
	action, err := ev.Required("meta.action")
	if err != nil {
		return "", err
	}
	return entity + "." + action, nil
}

// pipedriveVersion refuses webhooks v1 bodies. Their meta.id is the object's
// id, not the event's, so taking it as the event identity would collapse
// every change to one object into a single event.
func pipedriveVersion(body Doc) error {
	if s, ok := body.Lookup("v"); ok && s == "1" {
		return malformed("v", "is a Pipedrive webhooks v1 payload; create the webhook with version 2.0")
	}
	if s, ok := body.Lookup("meta.version"); ok && s != "" && !strings.HasPrefix(s, "2") {
		return malformed("meta.version", "is "+strconv.Quote(s)+"; only Pipedrive webhooks v2 payloads are supported")
	}
	return nil
}

// pipedriveSample gives a webhooks v2 sample a fresh meta.id and time, and
// the source's company.
func pipedriveSample(s *SampleDoc) {
	s.Set("meta.id", s.Nth(0, "uuid"))
	s.Set("meta.timestamp", s.Now.UTC().Format("2006-01-02T15:04:05.000Z"))
	if s.Account != "" {
		s.Set("meta.company_id", s.AccountValue())
	}
}
