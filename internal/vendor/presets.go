package vendor

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
	// Rules classify answers the status alone misreads, checked in order.
	Rules []Rule
	Notes []string
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
	// Class is one of transient, quota, contention, permanent,
	// hidden_failure, or "success" to accept the answer.
	Class string
	// Reason is shown on the attempt and in the exception queue.
	Reason string
}

// presets builds the delivery presets; a function so no caller can change
// what another sees.
func presets() []Preset {
	return []Preset{
		{
			Name:              "generic",
			Title:             "Any HTTP API (status codes only)",
			RetryAfterUnit:    UnitSeconds,
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
			RetryAfterUnit:            UnitSeconds,
			IdempotencyHeader:         "Idempotency-Key",
			IdempotencyWindow:         24 * time.Hour,
			IdempotencyReplayedHeader: "Idempotent-Replayed",
			Rules: []Rule{
				// Object contention, not quota: retry soon, do not slow down
				// the whole destination.
				{Status: 429, BodyContains: "lock_timeout", Class: "contention", Reason: "Stripe lock_timeout: another request holds the object"},
			},
			Notes: []string{
				"The first response after execution begins is saved and replayed for the same key, including 500 errors.",
				"Keys up to 255 characters; parameters are compared and a mismatch errors; keys can be pruned after 24 hours.",
			},
		},
		{
			Name:           "hubspot",
			Title:          "HubSpot CRM API",
			Source:         "developers.hubspot.com",
			Read:           "2026-11-01",
			RetryAfterUnit: UnitSeconds,
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
			RetryAfterUnit: UnitSeconds,
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
			RetryAfterUnit: UnitSeconds,
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
			RetryAfterUnit: UnitSeconds,
			Notes:          []string{"Klaviyo returns Retry-After in seconds on 429."},
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
