package vendors

import "time"

// contracts builds the catalogue. It is a function rather than a package
// variable so that no caller can change the figures another caller sees.
//
// Salesforce and Marketo are not listed: the contracts we hold for them
// describe error shapes (REQUEST_LIMIT_EXCEEDED, HTTP 200 with success
// false) but give no windows, timeouts or dates to catalogue.
func contracts() []Contract {
	return []Contract{
		{
			Name:   "stripe",
			Title:  "Stripe webhooks",
			Kind:   KindSender,
			Source: "docs.stripe.com/webhooks",
			Read:   "2026-11-06",
			// Live mode; a sandbox retries three times over a few hours.
			RetryWindow: 3 * Day,
			// CLI `stripe events resend`; the Dashboard allows 15 days.
			ManualResendWindow: 30 * Day,
			SignatureTolerance: 5 * time.Minute,
			// Stripe API v1 idempotency keys can be pruned after 24 hours.
			IdempotencyKeyWindow: 24 * time.Hour,
			Notes: []string{
				"Automatic retries use exponential backoff for up to three days in live mode; a 3xx counts as a failure.",
				"Dashboard resend up to 15 days after the event, CLI resend up to 30 days; a resend does not cancel automatic retries.",
				"No ordering guarantee; the created timestamp is in seconds and cannot order events.",
				"One occurrence can produce two Event objects: flag the pair by data.object.id plus event.type.",
				"Each retry carries a new timestamp and signature; secrets can roll with up to 24 hours of overlap.",
				"API v1 idempotency keys: up to 255 characters, first response replayed, prunable after 24 hours.",
			},
		},
		{
			Name:               "hubspot-app",
			Aliases:            []string{"hubspot"},
			Title:              "HubSpot app webhook subscriptions",
			Kind:               KindSender,
			Source:             "developers.hubspot.com webhooks guide",
			Read:               "2026-11-01",
			RetryWindow:        24 * time.Hour,
			Retries:            10,
			AckTimeout:         5 * time.Second,
			SignatureTolerance: 5 * time.Minute, // v3 request timestamps
			Notes: []string{
				"Retries follow connection failures, timeouts and any 4xx or 5xx.",
				"A request carries up to 100 events and must be answered within 5 seconds.",
				"At most 10 requests in flight; maxConcurrentRequests must be above 5.",
				"No ordering guarantee and duplicates are possible; the classic eventId is not guaranteed unique, so use occurredAt for timing.",
				"Subscription settings can be cached for up to 5 minutes after a change.",
				"Missed events of the past three days can be read back from the webhooks journal (hubspot-journal).",
			},
		},
		{
			Name:         "hubspot-journal",
			Title:        "HubSpot webhooks journal",
			Kind:         KindSender,
			Source:       "HubSpot webhooks journal guide",
			Read:         "2026-11-02",
			ReplayWindow: 3 * Day,
			Notes: []string{
				"Keeps subscription-related changes for the past three days; the journal file URLs it returns expire.",
				"The journal API allows 100 requests per second per app (subscriptions 50, snapshots 10) and a 429 carries Retry-After.",
			},
		},
		{
			Name:               "hubspot-workflow",
			Title:              "HubSpot workflow webhook action",
			Kind:               KindSender,
			Source:             "HubSpot knowledge base",
			Read:               "2026-11-02",
			RetryWindow:        3 * Day,
			RetryAfterHonoured: unitMilliseconds,
			Notes: []string{
				"Retries start one minute after a failure, with gaps of up to eight hours, for up to three days.",
				"4xx responses are not retried, except 429.",
				"On a 429 HubSpot honours the receiver's Retry-After and reads it as milliseconds: Retry-After: 60 means 60 ms.",
				"Signed with the v2 scheme (SHA-256 hex, no timestamp) or authenticated with an API key.",
			},
		},
		{
			Name:        "pipedrive",
			Title:       "Pipedrive webhooks v2",
			Kind:        KindSender,
			Source:      "pipedrive.readme.io",
			Read:        "2026-11-06",
			AckTimeout:  10 * time.Second,
			Retries:     3,
			RetryWindow: 150 * time.Second,
			RetrySchedule: []time.Duration{
				3 * time.Second, 30 * time.Second, 150 * time.Second,
			},
			Notes: []string{
				"A non-2xx answer or no answer within 10 seconds is a failure.",
				"Ten first-attempt failures ban the webhook for 30 minutes and events during the ban are lost; retries do not count towards the ban.",
				"A webhook without a successful delivery for 3 consecutive days is deleted.",
				"At most 40 webhooks per user.",
			},
		},
		{
			Name:           "klaviyo-flow",
			Title:          "Klaviyo flow webhooks",
			Kind:           KindSender,
			Source:         "developers.klaviyo.com webhook pages",
			Read:           "2026-11-02",
			RetryWindow:    24 * time.Hour,
			Retries:        17,
			RetryAfterSent: unitSeconds,
			Notes: []string{
				"429, 500, 502 and 503 are retried with exponential backoff (shown as Waiting to Retry); any other failure code moves the call to Skipped.",
			},
		},
		{
			Name:   "klaviyo-system",
			Title:  "Klaviyo system webhooks",
			Kind:   KindSender,
			Source: "developers.klaviyo.com webhook pages",
			Read:   "2026-11-02",
			// Retries continue with backoff capped at one hour until the
			// webhook has been in error for more than 48 hours.
			RetryWindow:    48 * time.Hour,
			AckTimeout:     5 * time.Second,
			RetryAfterSent: unitSeconds,
			Notes: []string{
				"Needs 200, 201 or 202 within 5 seconds.",
				"After more than 48 hours in error the webhook is disabled; re-enabling sends only events processed afterwards, so recover the gap with Get Events filtered by metric.",
				"Requests carry Klaviyo-Signature, an HMAC SHA-256 over the body and the Klaviyo-Timestamp value.",
			},
		},
		{
			Name:         "segment",
			Title:        "Segment",
			Kind:         kindPipeline,
			Source:       "twilio.com/docs/segment",
			Read:         "2026-11-01",
			RetryWindow:  4 * time.Hour, // failed cloud-mode destination calls
			DedupeKey:    "messageId",
			DedupeWindow: 24 * time.Hour, // at least
			Notes: []string{
				"Deduplicates on messageId, not payload, with at least 24 hours of IDs and a 99% no-duplicate guarantee across sources.",
				"Failed cloud-mode destination calls retry for four hours with randomised exponential backoff.",
				"Business tier customers can request a Replay from archived logs.",
			},
		},
		{
			Name:   "make",
			Title:  "Make",
			Kind:   kindIPaaS,
			Source: "help.make.com",
			Read:   "2026-11-01",
			// Only when "Store incomplete executions" is on; it is off by
			// default, and then nothing is retried.
			RetryWindow: 7*time.Hour + 51*time.Minute,
			Retries:     8,
			RetrySchedule: []time.Duration{
				1 * time.Minute, 11 * time.Minute, 21 * time.Minute, 51 * time.Minute,
				81 * time.Minute, 111 * time.Minute,
				4*time.Hour + 51*time.Minute, 7*time.Hour + 51*time.Minute,
			},
			Notes: []string{
				"Store incomplete executions is off by default; when on, RateLimitError, ConnectionError and ModuleTimeoutError retry on the schedule above.",
				"The Retry handler defaults to 3 attempts 15 minutes apart.",
				"No incomplete execution is created for an error on the first module, when storage is full, past the plan's duration limit, or in initialization or rollback.",
				"Instant webhooks accept up to 300 requests per 10 seconds, then answer 429; a full webhook queue answers 400.",
				"A webhook unattached for more than 5 days answers 410 Gone; a webhook-triggered scenario deactivates on its first error.",
			},
		},
		{
			Name:         "zapier",
			Title:        "Zapier",
			Kind:         kindIPaaS,
			Source:       "help.zapier.com and docs.zapier.com",
			Read:         "2026-11-01",
			ReplayWindow: 60 * Day,
			// Autoreplay, on paid plans.
			RetryWindow: 10*time.Hour + 35*time.Minute,
			Retries:     5,
			RetrySchedule: []time.Duration{
				5 * time.Minute, 35 * time.Minute, 1*time.Hour + 35*time.Minute,
				4*time.Hour + 35*time.Minute, 10*time.Hour + 35*time.Minute,
			},
			Notes: []string{
				"Replays must happen within 60 days of the trigger event.",
				"Replaying from Zap history re-runs only errored steps and never Filter or Paths; replaying a whole run starts at the trigger with the current published Zap and counts tasks again.",
				"Runs on hold are not autoreplayed; error emails wait for the final failure.",
			},
		},
		{
			Name:   "n8n",
			Title:  "n8n",
			Kind:   kindIPaaS,
			Source: "docs.n8n.io",
			Read:   "2026-11-01",
			// maxTries is capped at 5 (four retries) and waitBetweenTries at
			// 5,000 ms of fixed wait.
			Retries:     4,
			RetryWindow: 4 * 5 * time.Second,
			Notes: []string{
				"Retry On Fail retries on any error with no per-status filter; maxTries is capped at 5 and waitBetweenTries at 5,000 ms.",
				"On Error: Stop Workflow (default), Continue, or Continue using the error output.",
				"Error workflows start with an Error Trigger node and are set per workflow.",
			},
		},
		{
			Name:   "braze",
			Title:  "Braze /users/track",
			Kind:   kindDestination,
			Source: "braze.com docs",
			Read:   "2026-11-06",
			Notes: []string{
				"3,000 requests per 3 seconds on data-point contracts; MAU contracts add an hourly limit.",
				"Up to 75 objects per request across attributes, events and purchases.",
				"Asynchronous, with no ordering guarantee.",
				"Every custom attribute sent consumes a data point, so send changes only.",
			},
		},
		{
			Name:    "ga4-mp",
			Aliases: []string{"ga4"},
			Title:   "Google Analytics 4 Measurement Protocol",
			Kind:    kindDestination,
			Source:  "Google Analytics developer documentation",
			Read:    "2026-11-01",
			Notes: []string{
				"Returns no HTTP error codes, even for malformed events: a 2xx does not mean the event was recorded.",
				"The validation server (/debug/mp/collect) returns validationMessages; its events never reach reports.",
			},
		},
		{
			Name:         "meta",
			Title:        "Meta pixel and Conversions API",
			Kind:         kindDestination,
			Source:       "Meta developer documentation",
			Read:         "2026-11-01",
			DedupeKey:    "event_id plus event_name",
			DedupeWindow: 48 * time.Hour,
			Notes: []string{
				"Deduplicates within 48 hours of the first event; a replay older than that needs the team's own ledger.",
			},
		},
		{
			Name:      "google-ads",
			Title:     "Google Ads click conversion uploads",
			Kind:      kindDestination,
			Source:    "Google Ads API upload page",
			Read:      "2026-11-06",
			DedupeKey: "order_id per conversion action",
			Notes: []string{
				"Uploads need partial_failure true and support validate_only.",
				"Since 15 June 2026 UploadClickConversions fails with CUSTOMER_NOT_ALLOWLISTED_FOR_THIS_FEATURE for developer tokens without offline conversion uploads between 17 December 2025 and 15 June 2026; Google points to the Data Manager API.",
			},
		},
	}
}
