// Package vendors is the catalogue of delivery contracts published by the
// systems hookledger integrates with: how long a sender keeps retrying, how
// far back a person can resend or an iPaaS can replay, how long a receiver
// may take to acknowledge, which unit a Retry-After header is read in and how
// long a vendor remembers an idempotency or deduplication key.
//
// The figures are typed data so that the linter (and later the delivery
// presets) can reason with them. Each contract carries the date its figures
// were read: vendors change their contracts, so confirm a figure against the
// live documentation before relying on it in a design review.
package vendors

import (
	"sort"
	"strings"
	"time"
)

// Day is 24 hours. Vendor windows are quoted in days; keeping them as
// time.Duration lets callers compare a three-day retry window with a
// 10-second acknowledgement timeout without unit mistakes.
const Day = 24 * time.Hour

// Kind says what role a vendor plays in a flow.
type Kind string

// Kinds of vendor.
const (
	// KindSender sends webhooks to a receiver and retries failed deliveries.
	KindSender Kind = "webhook sender"
	// kindIPaaS runs integration steps and can retry or replay them.
	kindIPaaS Kind = "iPaaS"
	// kindPipeline collects events and forwards them to destinations.
	kindPipeline Kind = "event pipeline"
	// kindDestination receives events and deduplicates them itself.
	kindDestination Kind = "destination"
)

// Unit is the unit a number in a Retry-After header is read in.
type Unit string

// Retry-After units. UnitUnstated means the reference gives no unit.
const (
	unitUnstated     Unit = ""
	unitSeconds      Unit = "seconds"
	unitMilliseconds Unit = "milliseconds"
)

// Contract is one vendor's delivery contract. A zero duration or count means
// the vendor does not state that figure (or it does not apply), never "no
// time at all".
type Contract struct {
	// Name is the catalogue key, as written in an inventory's sources
	// column: lower case, words joined by hyphens.
	Name string
	// Aliases are further accepted spellings of Name.
	Aliases []string
	// Title is the product the figures describe.
	Title string
	Kind  Kind
	// Source names the documentation the figures were read from.
	Source string
	// Read is the date (YYYY-MM-DD) the figures were read.
	Read string

	// RetryWindow is how long the vendor keeps retrying a failed delivery
	// or step on its own.
	RetryWindow time.Duration
	// Retries is the number of automatic retries after the first attempt.
	Retries int
	// RetrySchedule lists when the automatic retries happen, each measured
	// from the first failure as the vendor states it.
	RetrySchedule []time.Duration
	// ManualResendWindow is how long after an event a person can still
	// resend it (the longest of the vendor's resend paths).
	ManualResendWindow time.Duration
	// ReplayWindow is how long after an event the vendor can still replay
	// it or serve it for a backfill (iPaaS replay, a webhooks journal).
	ReplayWindow time.Duration
	// AckTimeout is how long the sender waits for a 2xx before it counts
	// the delivery as failed.
	AckTimeout time.Duration
	// SignatureTolerance is the accepted age of a signed timestamp.
	SignatureTolerance time.Duration
	// RetryAfterHonoured is the unit the vendor applies to a Retry-After
	// header returned by the receiver it calls.
	RetryAfterHonoured Unit
	// RetryAfterSent is the unit of the Retry-After header the vendor's own
	// API returns on a 429.
	RetryAfterSent Unit
	// DedupeKey names what the vendor deduplicates incoming events on.
	DedupeKey string
	// DedupeWindow is how long the vendor remembers DedupeKey values.
	DedupeWindow time.Duration
	// IdempotencyKeyWindow is how long the vendor's API keeps an
	// idempotency key; a retry after it is a new request.
	IdempotencyKeyWindow time.Duration

	// Notes are further facts from the same pages that matter to a design
	// but are not figures the linter computes with.
	Notes []string
}

// Window is one of a contract's windows, named for messages.
type Window struct {
	Name     string // "retry window", "manual resend window" or "replay window"
	Duration time.Duration
}

// LongestWindow returns the longest of the retry, manual resend and replay
// windows: the time after which an event can no longer arrive again from
// this vendor, which is what a ledger's retention must cover (rule IP03).
// ok is false when the contract states none of them.
func (c Contract) LongestWindow() (w Window, ok bool) {
	for _, cand := range []Window{
		{"retry window", c.RetryWindow},
		{"manual resend window", c.ManualResendWindow},
		{"replay window", c.ReplayWindow},
	} {
		if cand.Duration > w.Duration {
			w = cand
		}
	}
	return w, w.Duration > 0
}

// Catalogue returns every contract, sorted by name. Each call returns a new
// slice, so callers may modify what they get.
func Catalogue() []Contract {
	c := contracts()
	sort.Slice(c, func(i, j int) bool { return c[i].Name < c[j].Name })
	return c
}

// Names returns the catalogue keys, sorted.
func Names() []string {
	cat := Catalogue()
	names := make([]string, len(cat))
	for i, c := range cat {
		names[i] = c.Name
	}
	return names
}

// Index maps every accepted spelling of a vendor name (see Normalize) to its
// contract. Build it once and look names up many times.
type Index map[string]Contract

// NewIndex builds an Index over the catalogue.
func NewIndex() Index {
	ix := Index{}
	for _, c := range contracts() {
		ix[Normalize(c.Name)] = c
		for _, a := range c.Aliases {
			ix[Normalize(a)] = c
		}
	}
	return ix
}

// Lookup finds a contract by name or alias, ignoring case and treating
// underscores, spaces and hyphens alike.
func (ix Index) Lookup(name string) (Contract, bool) {
	c, ok := ix[Normalize(name)]
	return c, ok
}

// Normalize folds a vendor name to its catalogue spelling: trimmed, lower
// case, with underscores and spaces written as hyphens.
func Normalize(name string) string {
	name = strings.ToLower(strings.TrimSpace(name))
	return strings.Map(func(r rune) rune {
		if r == '_' || r == ' ' {
			return '-'
		}
		return r
	}, name)
}
