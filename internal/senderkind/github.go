package senderkind

import (
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/vendors"
)

// GitHub is GitHub's repository, organization and GitHub App webhooks.
const GitHub = "github"

// GitHub's delivery headers.
const (
	gitHubDeliveryHeader = signature.GitHubDeliveryHeader
	gitHubEventHeader    = signature.GitHubEventHeader
)

// github is verify's github scheme: HMAC-SHA256 of the raw body, hex, in
// X-Hub-Signature-256 after "sha256=" (the generic HMAC construction, with
// errors that name GitHub). The legacy X-Hub-Signature header (HMAC-SHA1),
// which GitHub still sends for backward compatibility, is never read; a
// request that carries only it is refused with a message saying so.
//
// The event is named by X-GitHub-Delivery. GitHub's REST API describes
// that GUID as the identifier of the event, shared by every delivery of it
// (the hook-delivery guid field), and a redelivery keeps it, so a
// redelivered event is a duplicate and two events never share one (IP02).
// The type is X-GitHub-Event. Both are headers, which the signature does
// not cover, and GitHub signs no timestamp: see docs/signatures.md for what
// that means for replays.
func github() Kind {
	return Kind{
		Name:  GitHub,
		Title: "GitHub",
		Scheme: Scheme{
			Name:        signature.KindGitHub,
			Placeholder: "operator-load-placeholder",
		},
		Identity: Identity{
			EventID:      "header:" + gitHubDeliveryHeader,
			Type:         "header:" + gitHubEventHeader,
			TypeRequired: true,
			// A GitHub App's deliveries name the installation; repository
			// and organization webhooks carry none, and then the tenant
			// check has nothing to compare.
			Account: "installation.id",
			// No payload-wide occurrence time or entity: each event type
			// has its own (issue.updated_at, pull_request.number ...), so
			// a flow names them with fields:.
			Unit: time.Second,
		},
		Keep: []string{
			gitHubDeliveryHeader, gitHubEventHeader, "X-GitHub-Hook-ID",
			"X-GitHub-Hook-Installation-Target-ID", "X-GitHub-Hook-Installation-Target-Type",
		},
		Check: func(s Source) []Problem {
			if s.Tolerance != nil {
				return []Problem{{Field: "tolerance", Msg: "GitHub signs no timestamp, so no tolerance applies"}}
			}
			return nil
		},
		Contract: &vendors.Contract{
			Name:   GitHub,
			Title:  "GitHub webhooks",
			Kind:   vendors.KindSender,
			Source: "docs.github.com webhooks pages (best practices, handling failed deliveries, redelivering webhooks, validating deliveries)",
			Read:   "2026-12-01",
			// A 2xx must come within 10 seconds on GitHub.com; GitHub
			// Enterprise Server documents 30.
			AckTimeout:         10 * time.Second,
			ManualResendWindow: 3 * vendors.Day,
			DedupeKey:          "X-GitHub-Delivery GUID, shared by every delivery of one event",
			Notes: []string{
				"No automatic retries: a failed delivery is redelivered by a person (web interface) or a script (REST API), only for deliveries of the past 3 days.",
				"A delivery not answered with a 2xx within 10 seconds is recorded as failed (30 seconds on GitHub Enterprise Server, which also allows redelivery for 7 days).",
				"X-Hub-Signature-256 is an HMAC-SHA256 of the body, hex after sha256=; the SHA-1 X-Hub-Signature is kept only for backward compatibility.",
				"The signature covers the body only, with no timestamp; X-GitHub-Delivery and X-GitHub-Event are unsigned headers.",
				"Deliveries may be throttled when an account sees a surge, and can take a few minutes to arrive.",
			},
		},
		Sign: Sign{IDHeader: gitHubDeliveryHeader},
	}
}
