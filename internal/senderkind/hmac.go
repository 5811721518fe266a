package senderkind

import (
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
)

// HMAC is the generic HMAC scheme, configured per source with an hmac:
// block, for senders without a kind of their own.
const HMAC = "hmac"

// secondUnit is the unit of numeric times for most senders.
const secondUnit = time.Second

func hmacKind() Kind {
	return Kind{
		Name:  HMAC,
		Title: "generic HMAC",
		Scheme: Scheme{
			Name: signature.KindHMAC,
			HMAC: true,
			SignsURL: func(s Source) bool {
				return s.HMAC != nil && strings.Contains(s.HMAC.Template, "{url}")
			},
			Placeholder: "operator-load-placeholder",
		},
		Identity: Identity{EventID: "eventId", Type: "type", OccurredAt: "occurredAt", Unit: secondUnit},
		KeepFor: func(s Source) []string {
			if s.HMAC != nil && s.HMAC.TimestampHeader != "" {
				return []string{s.HMAC.TimestampHeader}
			}
			return nil
		},
		Tolerance: signature.DefaultTolerance(signature.KindHMAC),
		Check: func(s Source) []Problem {
			if strings.HasPrefix(s.Fields.EventID, "header:") || strings.HasPrefix(s.Fields.Type, "header:") {
				return []Problem{{Field: "fields", Warning: true, Msg: "the event id or type is read from a request header, which the hmac signature does not cover: anyone who captured one signed body can resend it under new ids and types; keep tolerance short and prefer fields from the signed body"}}
			}
			return nil
		},
		Sample: "order.updated",
		Fill:   hmacSample,
	}
}

// hmacSample writes a fresh event id and the current time where the
// source reads them: its fields, or the kind's eventId and occurredAt. An
// id the source reads from a header goes into that header.
func hmacSample(s *SampleDoc) {
	eid := s.Nth(0, "ev_")
	switch p := s.Source.Fields.EventID; {
	case strings.HasPrefix(p, "header:"):
		s.Header.Set(strings.TrimPrefix(p, "header:"), eid)
	case p != "":
		s.Set(strings.TrimPrefix(p, "$."), eid)
	default:
		s.Set("eventId", eid)
	}
	switch p := s.Source.Fields.OccurredAt; {
	case p == "":
		s.Set("occurredAt", s.RFC3339())
	case !strings.HasPrefix(p, "header:"):
		s.Set(strings.TrimPrefix(p, "$."), s.RFC3339())
	}
}
