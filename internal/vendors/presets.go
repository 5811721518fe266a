package vendors

import (
	"sort"
	"time"
)

// Preset is how hookledger calls a destination vendor: the unit of its
// Retry-After header, how it keeps idempotency keys, and how its answers
// are classified beyond their status code (RT03). Destinations name a
// preset and may add rules of their own.
type Preset struct {
	Name   string
	Title  string
	Source string
	Read   string
	// RetryAfterUnit is the unit of a numeric Retry-After in its answers.
	RetryAfterUnit Unit
	// IdempotencyHeader, when set, is the request header the vendor
	// dedupes on; hookledger sends the episode key in it.
	IdempotencyHeader string
	// IdempotencyWindow is how long the vendor keeps a key: a resend with
	// the same key after it is a new request (IP07).
	IdempotencyWindow time.Duration
	// IdempotencyReplayedHeader is the answer header that says "true" when
	// the vendor replays a saved answer for a repeated key.
	IdempotencyReplayedHeader string
	// IdempotencyKeyMax is the longest key the vendor documents, in
	// characters (Stripe: 255); 0 when it documents no limit. A longer
	// key is never sent as it is: the vendor would refuse it on every
	// attempt.
	IdempotencyKeyMax int
	// HashIdempotencyKey makes destinations of this preset send a
	// fixed-length digest of the episode key instead of the key itself,
	// unless they say otherwise: set for every vendor that limits the
	// key's length or asks for keys without personal data (an episode
	// key holds the entity id, which may be an e-mail address).
	HashIdempotencyKey bool
	// DedupeKey names the request fields the vendor dedupes on when they
	// are in the body rather than in a header (Meta: event_id plus
	// event_name, kept for IdempotencyWindow; Google Ads: order_id per
	// conversion action). The flow must fill them from the business
	// identity, never from attempt data (IP02), or the dedupe does nothing.
	DedupeKey string
	// Budget is the request budget the vendor documents. A destination
	// that sets no rate_limit gets a token bucket that stays inside it
	// (Budget.Bucket).
	Budget Budget
	// MaxObjects bounds the objects one request may carry, counted over
	// the ObjectArrays of its JSON body (Braze: 75 across attributes,
	// events and purchases). hookledger never batches; a constant body
	// over the bound is refused at load.
	MaxObjects   int
	ObjectArrays []string
	// SendChangesOnly says the vendor charges for whatever is sent, changed
	// or not (Braze data points): an effect whose state equals the
	// previously applied one is not created. A destination may override
	// it with send_changes_only.
	SendChangesOnly bool
	// Validation is the vendor's validation endpoint, when it has one: the
	// same request, checked and never recorded.
	Validation *Validation
	// Rules classify answers the status alone misreads, checked in order.
	Rules []Rule
	Notes []string
}

// Budget is a documented request budget: Requests per Per.
type Budget struct {
	Requests int
	Per      time.Duration
}

// Bucket is the token bucket that never exceeds the budget: over any span
// of Per it allows at most burst + perSecond×Per calls, which equals
// Requests. A tenth of the budget is the burst, so that calls after a
// quiet spell start at once without letting a burst and a full refill
// add up to more than the vendor allows. ok is false for no budget, or
// one too small for a bucket (a single request per span).
func (b Budget) Bucket() (perSecond float64, burst int, ok bool) {
	burst = max(1, b.Requests/10)
	if b.Per <= 0 || b.Requests-burst <= 0 {
		return 0, 0, false
	}
	return float64(b.Requests-burst) / b.Per.Seconds(), burst, true
}

// Validation is a vendor endpoint that checks a request without recording
// it (GA4: /debug/mp/collect for /mp/collect).
type Validation struct {
	// PathFrom is the URL path of the live endpoint and PathTo that of its
	// validation twin: a call to PathFrom (or below it) goes to PathTo
	// instead, with everything else unchanged.
	PathFrom, PathTo string
	// Messages is the dotted JSON path of the findings in an answer; an
	// answer without any means the request is valid.
	Messages string
}

// Rule matches an answer and names its error class. Empty fields match
// anything; all set fields must match.
type Rule struct {
	// Status is the HTTP status, 0 for any.
	Status int
	// BodyContains is a substring of the response body.
	BodyContains string
	// JSONField is a dotted path into a JSON body whose value, written as
	// JSON (false, "ERROR", 3), must equal JSONEquals.
	JSONField  string
	JSONEquals string
	// JSONNonEmpty is a dotted path into a JSON body that must hold
	// something other than null, false, 0, "", [] or {}: a per-record
	// errors array inside a successful envelope.
	JSONNonEmpty string
	// Class is one of transient, quota, contention, permanent,
	// hidden_failure, or "success" to accept the answer.
	Class string
	// Reason is shown on the attempt and in the exception queue.
	Reason string
	// Detail is a dotted JSON path whose value is added to the reason: the
	// vendor's own account of what failed.
	Detail string
	// Repair is the suggested repair of an effect this rule sends to the
	// exception queue, when the generic one would mislead (a retry that
	// cannot succeed, a resend that would duplicate).
	Repair string
}

// presets builds the delivery presets; a function so no caller can change
// what another sees.
func presets() []Preset {
	return []Preset{
		{
			Name:              "generic",
			Title:             "Any HTTP API (status codes only)",
			RetryAfterUnit:    unitSeconds,
			Rules:             nil,
			Notes:             []string{"RFC 9110: Retry-After is an HTTP date or a number of seconds."},
			Source:            "RFC 9110, RFC 6585",
			Read:              "2026-11-01",
			IdempotencyWindow: 0,
		},
		{
			Name:                      "stripe",
			Title:                     "Stripe API v1",
			Source:                    "docs.stripe.com (idempotent requests, error codes)",
			Read:                      "2026-11-06",
			RetryAfterUnit:            unitSeconds,
			IdempotencyHeader:         "Idempotency-Key",
			IdempotencyWindow:         24 * time.Hour,
			IdempotencyReplayedHeader: "Idempotent-Replayed",
			IdempotencyKeyMax:         255,
			HashIdempotencyKey:        true,
			Rules: []Rule{
				// Object contention, not quota: retry soon, do not slow down
				// the whole destination.
				{Status: 429, BodyContains: "lock_timeout", Class: "contention", Reason: "Stripe lock_timeout: another request holds the object"},
			},
			Notes: []string{
				"The first response after execution begins is saved and replayed for the same key, including 500 errors.",
				"Keys up to 255 characters, with no personal data in them; parameters are compared and a mismatch errors; keys can be pruned after 24 hours.",
			},
		},
		{
			Name:           "hubspot",
			Title:          "HubSpot CRM API",
			Source:         "developers.hubspot.com",
			Read:           "2026-11-01",
			RetryAfterUnit: unitSeconds,
			Rules: []Rule{
				// Batch endpoints answer 207 when some records failed.
				{Status: 207, Class: "hidden_failure", Reason: "HubSpot batch: some records failed (207 Multi-Status)"},
			},
			Notes: []string{"No idempotency keys: reconcile unknown outcomes by searching on a natural key."},
		},
		{
			Name:           "salesforce",
			Title:          "Salesforce REST API",
			Source:         "reference 000: error classes (RT03)",
			Read:           "2026-11-01",
			RetryAfterUnit: unitSeconds,
			Rules: []Rule{
				// Quota exhaustion and the concurrency limit arrive as 403.
				{Status: 403, BodyContains: "REQUEST_LIMIT_EXCEEDED", Class: "quota", Reason: "Salesforce REQUEST_LIMIT_EXCEEDED"},
			},
			Notes: []string{"Upsert by external ID (with updateOnly where creation is not allowed) makes a resend safe."},
		},
		{
			Name:           "marketo",
			Title:          "Marketo REST API",
			Source:         "reference 000: error classes (RT03)",
			Read:           "2026-11-01",
			RetryAfterUnit: unitSeconds,
			Rules: []Rule{
				{Status: 200, JSONField: "success", JSONEquals: "false", Class: "hidden_failure", Reason: "Marketo answered 200 with success false"},
			},
			Notes: []string{"HTTP 200 with success false and an errors array is a failure."},
		},
		{
			Name:           "klaviyo",
			Title:          "Klaviyo API",
			Source:         "developers.klaviyo.com",
			Read:           "2026-11-02",
			RetryAfterUnit: unitSeconds,
			Notes:          []string{"Klaviyo returns Retry-After in seconds on 429."},
		},
		{
			Name:           "braze",
			Title:          "Braze /users/track",
			Source:         "braze.com/docs (users/track, API rate limits, API errors and responses)",
			Read:           "2026-11-06",
			RetryAfterUnit: unitSeconds,
			// Data-point contracts; MAU contracts add an hourly limit that
			// is per customer and not catalogued here.
			Budget:          Budget{Requests: 3000, Per: 3 * time.Second},
			MaxObjects:      75,
			ObjectArrays:    []string{"attributes", "events", "purchases"},
			SendChangesOnly: true,
			Rules: []Rule{
				// "success" with an errors array: the objects it names were
				// refused, the others processed.
				{JSONField: "message", JSONEquals: `"success"`, JSONNonEmpty: "errors", Class: "hidden_failure",
					Reason: "Braze processed the request but refused some of its objects", Detail: "errors",
					Repair: "Braze refused the objects named in errors (input_array and index) and processed the others; " +
						"fix the flow's mapping for them; a retry sends the whole request again and Braze does not dedupe events or purchases, " +
						"so when the request carried events or purchases that were processed, resolve the effect with a note and send the refused objects by hand"},
				{Status: 401, Class: "permanent", Reason: "Braze refused the REST API key",
					Repair: "check the destination's REST API key and that it has the users.track permission, then retry the effect"},
			},
			Notes: []string{
				"3,000 requests per 3 seconds per workspace on data-point contracts (MAU contracts add an hourly limit); every caller in the workspace shares the budget.",
				"Up to 75 objects per request across attributes, events and purchases; hookledger sends one request per effect and never batches.",
				"Every custom attribute sent consumes a data point, so send changes only: an effect whose state equals the previous one is not created.",
				"A success answer may carry an errors array naming refused objects; the other objects were processed.",
				"A 429 carries X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (UTC epoch seconds); no Retry-After is documented, so the wait is the retry backoff.",
				"Asynchronous, with no ordering guarantee.",
			},
		},
		{
			Name:           "ga4-mp",
			Title:          "Google Analytics 4 Measurement Protocol",
			Source:         "developers.google.com/analytics/devguides/collection/protocol/ga4 (validating events)",
			Read:           "2026-11-01",
			RetryAfterUnit: unitSeconds,
			Validation:     &Validation{PathFrom: "/mp/collect", PathTo: "/debug/mp/collect", Messages: "validationMessages"},
			Rules: []Rule{
				// Only the validation server says what is wrong; the live
				// endpoint answers 2xx whatever it was sent.
				{JSONNonEmpty: "validationMessages", Class: "hidden_failure",
					Reason: "the GA4 validation server found the event invalid", Detail: "validationMessages",
					Repair: "fix the flow's event mapping as the validation messages say (fieldPath, description, validationCode), then retry the effect; " +
						"check the flow's other effects with hookledger validate"},
			},
			Notes: []string{
				"Returns no HTTP error, even for a malformed event or a missing parameter: a 2xx only says the request arrived, so classification cannot see a failure.",
				"The validation server (/debug/mp/collect) answers validationMessages with fieldPath, description and validationCode; its events never reach reports.",
				"The validation server does not check api_secret or the measurement or app id: a wrong key passes it.",
			},
		},
		{
			Name:              "meta",
			Title:             "Meta Conversions API",
			Source:            "developers.facebook.com (Conversions API, Graph API error handling)",
			Read:              "2026-11-01",
			RetryAfterUnit:    unitSeconds,
			DedupeKey:         "event_id + event_name",
			IdempotencyWindow: 48 * time.Hour,
			Rules: []Rule{
				// Graph API errors carry their meaning in error.code, whatever
				// the status.
				{JSONField: "error.code", JSONEquals: "190", Class: "permanent", Reason: "Meta: the access token expired or was revoked (error 190)",
					Repair: "generate a new access token for the dataset, put it in the destination's auth, reload, then retry the effect " +
						"(Meta drops a repeat of the same event_id and event_name within 48 hours of the first)"},
				{JSONField: "error.code", JSONEquals: "4", Class: "quota", Reason: "Meta: application request limit reached (error 4)"},
				{JSONField: "error.code", JSONEquals: "17", Class: "quota", Reason: "Meta: user request limit reached (error 17)"},
				{JSONField: "error.code", JSONEquals: "341", Class: "quota", Reason: "Meta: application limit reached (error 341)"},
				{JSONField: "error.code", JSONEquals: "2", Class: "transient", Reason: "Meta: temporary service error (error 2)"},
				{JSONField: "error.code", JSONEquals: "1", Class: "transient", Reason: "Meta: unknown error, possibly downtime (error 1)"},
			},
			Notes: []string{
				"Deduplicates pixel and Conversions API events on event_id plus event_name within 48 hours of the first: set event_id from the business identity (the episode key), never per attempt.",
				"A resend after 48 hours is a new event; an unknown outcome goes to a person unless a lookup is configured.",
				"A valid payload answers 2xx with events_received; an invalid one answers 4xx with a Graph API error (message, type, code, error_subcode, fbtrace_id).",
			},
		},
		{
			Name:           "google-ads",
			Title:          "Google Ads API click conversion uploads",
			Source:         "developers.google.com/google-ads/api (UploadClickConversions, partial failures, error enums)",
			Read:           "2026-11-06",
			RetryAfterUnit: unitSeconds,
			DedupeKey:      "order_id per conversion action",
			Rules: []Rule{
				// Before the partial-failure rule: the same code may come
				// inside partialFailureError, and no retry can cure it.
				{BodyContains: "CUSTOMER_NOT_ALLOWLISTED_FOR_THIS_FEATURE", Class: "permanent",
					Reason: "Google Ads refused click conversion uploads for this developer token (CUSTOMER_NOT_ALLOWLISTED_FOR_THIS_FEATURE): " +
						"since 15 June 2026 UploadClickConversions fails for tokens that sent no offline conversion uploads between 17 December 2025 and 15 June 2026",
					Repair: "no retry can succeed with this developer token: move the flow's conversion uploads to the Data Manager API, as Google directs, " +
						"and point a destination at it; resolve this effect with a note once the conversion is uploaded there"},
				{BodyContains: "PARTIAL_FAILURE_MODE_REQUIRED", Class: "permanent", Reason: "Google Ads requires partialFailure true on click conversion uploads",
					Repair: `set "partialFailure": true in the flow's request body, then retry the effect`},
				{JSONNonEmpty: "partialFailureError", Class: "hidden_failure",
					Reason: "Google Ads accepted the upload but refused rows of it (partial failure)", Detail: "partialFailureError.message",
					Repair: "the rows named in partialFailureError were refused and the others accepted: fix the refused rows' data (click id, conversion action, conversion_date_time), " +
						"then retry the effect; order_id keeps the accepted rows from counting twice"},
			},
			Notes: []string{
				"Uploads need partialFailure true; per-row failures come inside a successful answer as partialFailureError, which this preset classifies as a hidden failure.",
				"validateOnly true checks an upload without recording it; results are then empty.",
				"order_id per conversion action prevents duplicates: set it from the business identity.",
				"Since 15 June 2026 UploadClickConversions fails with CUSTOMER_NOT_ALLOWLISTED_FOR_THIS_FEATURE for developer tokens without offline conversion uploads between 17 December 2025 and 15 June 2026; Google points to the Data Manager API.",
				"A 429 RESOURCE_EXHAUSTED names its retryDelay in the body, not in Retry-After: the wait is the retry backoff.",
			},
		},
	}
}

// Presets returns every delivery preset, sorted by name.
func Presets() []Preset {
	p := presets()
	sort.Slice(p, func(i, j int) bool { return p[i].Name < p[j].Name })
	return p
}

// PresetByName finds a delivery preset.
func PresetByName(name string) (Preset, bool) {
	for _, p := range presets() {
		if p.Name == name {
			return p, true
		}
	}
	return Preset{}, false
}

// PresetNames lists the preset names, sorted.
func PresetNames() []string {
	var out []string
	for _, p := range Presets() {
		out = append(out, p.Name)
	}
	return out
}
