package senderkind

import (
	"encoding/json"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/vendors"
)

// Slack is Slack's Events API.
const Slack = "slack"

// slack verifies Slack's v0 request signature over
// "v0:{timestamp}:{body}" with X-Slack-Request-Timestamp inside five
// minutes, as Slack's guide and its Bolt libraries do.
//
// The event is named by the envelope's event_id, which Slack describes as
// globally unique and which a retry carries unchanged; X-Slack-Retry-Num
// and X-Slack-Retry-Reason are attempt data, kept as evidence and never part
// of the identity (IP02). The type is event.type, the account team_id.
//
// A url_verification request, Slack's check of a new Request URL, is
// answered with its challenge once the signature verified and is not
// stored: it is endpoint set-up, not an event.
func slack() Kind {
	return Kind{
		Name:   Slack,
		Title:  "Slack Events API",
		Scheme: Scheme{Name: signature.KindSlack, Placeholder: "operator-load-placeholder"},
		Identity: Identity{
			EventID: "event_id", Type: "event.type", TypeRequired: true,
			Account: "team_id", OccurredAt: "event_time", Unit: time.Second,
		},
		Keep:      []string{signature.SlackTimestampHeader, signature.SlackRetryNumHeader, signature.SlackRetryReasonHeader},
		Sample:    "message.channels",
		Fill:      slackSample,
		Tolerance: signature.DefaultTolerance(signature.KindSlack),
		Check:     timedCheck("Slack"),
		Handshake: slackURLVerification,
		Contract: &vendors.Contract{
			Name:               Slack,
			Title:              "Slack Events API",
			Kind:               vendors.KindSender,
			Source:             "api.slack.com Events API and request verification pages; retry schedule from secondary sources quoting them",
			Read:               "2026-12-01",
			AckTimeout:         3 * time.Second,
			Retries:            3,
			RetrySchedule:      []time.Duration{0, time.Minute, 5 * time.Minute},
			RetryWindow:        5 * time.Minute,
			SignatureTolerance: signature.SlackDefaultTolerance,
			DedupeKey:          "event_id, the same on every retry (X-Slack-Retry-Num counts the retries)",
			Notes: []string{
				"Answer with a 2xx within 3 seconds; on a timeout, connection or TLS failure, non-2xx or too many redirects Slack retries 3 times: nearly at once, after 1 minute, after 5 minutes.",
				"Retries carry X-Slack-Retry-Num (1-3) and X-Slack-Retry-Reason, a new X-Slack-Request-Timestamp and signature, and the same event_id.",
				"A response header X-Slack-No-Retry: 1 turns retries off for that request; Slack disables a subscription that keeps failing.",
				"url_verification (set-up of the Request URL) is answered with its challenge and not stored.",
				"Slash commands and interactive payloads are form bodies without event_id and are not retried; they do not belong on an Events API source.",
				"No ordering guarantee.",
			},
		},
	}
}

// slackURLVerification recognises Slack's url_verification body and
// answers with the challenge as plain text, one of the answers Slack's
// Events API documentation accepts.
func slackURLVerification(body []byte) (Reply, bool) {
	var v struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
	}
	if json.Unmarshal(body, &v) != nil || v.Type != "url_verification" || v.Challenge == "" {
		return Reply{}, false
	}
	return Reply{ContentType: "text/plain; charset=utf-8", Body: []byte(v.Challenge), What: "slack url_verification"}, true
}

// slackSample gives an Events API sample a fresh event_id and time, and
// the source's workspace.
func slackSample(s *SampleDoc) {
	s.Set("event_id", s.Nth(0, "Ev"))
	s.Set("event_time", s.Seconds())
	if s.Account != "" {
		s.Set("team_id", s.Account)
	}
}
