package senderkind

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/vendors"
)

// Mailgun is Mailgun's webhooks for sending events (delivered, failed,
// opened ...), posted as JSON.
const Mailgun = "mailgun"

// mailgunRetrySpan is when Mailgun's last retry comes: 10, 10, 15 and 30
// minutes and 1, 2 and 4 hours after each failure.
const mailgunRetrySpan = 8*time.Hour + 5*time.Minute

// mailgunMaxTolerance bounds a configured tolerance: Mailgun signs no part
// of the event, so a captured signature object carries any event for as
// long as the window.
const mailgunMaxTolerance = 24 * time.Hour

// mailgun verifies the signature object in Mailgun's JSON body: the
// HMAC-SHA256, keyed with the account's HTTP webhook signing key, of its
// timestamp followed by its token (signature.KindMailgun). It does not
// cover event-data: the signature proves that the key's holder signed that
// timestamp and token, not what the event says (docs/signatures.md).
//
// The event is named by event-data.id joined with event-data.timestamp
// (mailgunEventID): Mailgun documents the id as unique within a day only,
// and a retry resends the same event. The type is event-data.event, the
// entity the message (its Message-Id), the account event-data.account.id,
// which account-level and domain-level webhooks both carry. The
// occurrence time is event-data.timestamp, unix seconds with a fraction
// (mailgunOccurredAt).
func mailgun() Kind {
	return Kind{
		Name:   Mailgun,
		Title:  "Mailgun",
		Scheme: Scheme{Name: signature.KindMailgun, Placeholder: "operator-load-placeholder"},
		Identity: Identity{
			Type: "event-data.event", TypeRequired: true,
			Entity:     "event-data.message.headers.message-id",
			Account:    "event-data.account.id",
			OccurredAt: "event-data.timestamp",
			Unit:       time.Second,
			Rules:      Rules{EventID: mailgunEventID, OccurredAt: mailgunOccurredAt},
		},
		Tolerance: signature.DefaultTolerance(signature.KindMailgun),
		Check:     mailgunCheck,
		Contract: &vendors.Contract{
			Name:   Mailgun,
			Title:  "Mailgun webhooks (sending events)",
			Kind:   vendors.KindSender,
			Source: "documentation.mailgun.com (securing webhooks, webhook payloads, event structure) and help.mailgun.com (how webhooks work)",
			Read:   "2026-12-03",
			// Cumulative from the first failure: 10, 10, 15, 30 minutes,
			// 1, 2 and 4 hours apart.
			Retries: 7,
			RetrySchedule: []time.Duration{
				10 * time.Minute, 20 * time.Minute, 35 * time.Minute, 65 * time.Minute,
				125 * time.Minute, 245 * time.Minute, mailgunRetrySpan,
			},
			RetryWindow: mailgunRetrySpan,
			DedupeKey:   "event-data.id (unique within a day) with event-data.timestamp",
			Notes: []string{
				"A 200 ends the delivery; a 406 (Not Acceptable) rejects it without retries; any other answer is retried 10, 10, 15 and 30 minutes and 1, 2 and 4 hours apart.",
				"The signature object in the body covers only its timestamp and token, not event-data; Mailgun suggests refusing a token seen before and checking the timestamp leniently.",
				"event-data.id is unique within a day; event-data.timestamp is unix seconds with a fraction.",
				"Account-level and domain-level webhooks post the same payload, with account.id and domain.name.",
			},
		},
		Sample: "delivered",
		Fill:   mailgunSample,
	}
}

// mailgunCheck bounds a configured tolerance: not 0 (which would fall back
// to the default), not above a day, and a warning below Mailgun's retry
// schedule, whose retries are refused once their signature is older.
//
// Every Mailgun source is also warned about, at its kind: the signature
// covers no event data, and whoever runs the source must know it (serve
// and lint --config say so at every start, as for an open /metrics).
func mailgunCheck(s Source) []Problem {
	signsNoEvent := Problem{Field: "kind", Warning: true, Msg: "Mailgun signs a timestamp and a token, never the event: " +
		"anyone who has read one delivered request can post any event under its signature until the tolerance passes " +
		"(docs/signatures.md, mailgun: restrict the source at the proxy and keep stored bodies private)"}
	switch {
	case s.Tolerance == nil:
		return []Problem{signsNoEvent}
	case *s.Tolerance == 0:
		return []Problem{{Field: "tolerance", Msg: "a tolerance of 0 would fall back to the default; remove it or use a positive value such as 8h30m"}}
	case *s.Tolerance > mailgunMaxTolerance:
		return []Problem{{Field: "tolerance", Msg: "a Mailgun tolerance above 24h keeps a captured signature object usable for that long, with any event: Mailgun signs none of it; use at most 24h"}}
	case *s.Tolerance < mailgunRetrySpan:
		return []Problem{signsNoEvent, {Field: "tolerance", Warning: true, Msg: fmt.Sprintf("Mailgun retries a failed delivery for %s, reportedly with the first attempt's signature: a tolerance of %s refuses the later retries, and a refused retry is an event lost", shortDuration(mailgunRetrySpan), shortDuration(*s.Tolerance))}}
	}
	return []Problem{signsNoEvent}
}

// shortDuration writes d without trailing zero units: 8h5m, 5m, 90s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// mailgunEventID joins event-data.id with event-data.timestamp, both
// required. Mailgun's event structure page says the id is "unique within a
// day"; the timestamp, as sent, narrows any reuse to the same instant, and
// a retry resends the same event-data, so it keeps both (IP02).
func mailgunEventID(ev Doc) (string, error) {
	id, err := ev.Required("event-data.id")
	if err != nil {
		return "", err
	}
	ts, err := ev.Required("event-data.timestamp")
	if err != nil {
		return "", err
	}
	return id + ":" + ts, nil
}

// mailgunOccurredAt reads event-data.timestamp: unix seconds with a
// fraction (1767225595.658528), to the nanosecond.
func mailgunOccurredAt(ev Doc) (time.Time, error) {
	s, err := ev.Str("event-data.timestamp")
	if err != nil || s == "" {
		return time.Time{}, err
	}
	t, ok := fractionalUnix(s)
	if !ok {
		return time.Time{}, malformed("event-data.timestamp", "is not a time (unix seconds, with a fraction)")
	}
	return t, nil
}

// fractionalUnix parses "<seconds>[.<fraction>]", digits only; digits
// past the nanosecond are dropped.
func fractionalUnix(s string) (time.Time, bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if !allDigits(whole) || (frac != "" && !allDigits(frac)) || (frac == "" && strings.HasSuffix(s, ".")) {
		return time.Time{}, false
	}
	secs, err := strconv.ParseInt(whole, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	if len(frac) > 9 {
		frac = frac[:9]
	}
	nanos, _ := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	return time.Unix(secs, nanos), true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// mailgunSample gives a sample a fresh event id and the send time, and the
// source's account. The time is part of the event's identity: a fixed
// --event-id keeps the sample's, so a resend is the same event. send
// writes the signature object (signature.BodySigner).
func mailgunSample(s *SampleDoc) {
	if s.ID == "" {
		s.Set("event-data.id", s.Fresh(""))
		s.Set("event-data.timestamp", json.Number(fmt.Sprintf("%d.%06d", s.Now.Unix(), s.Now.Nanosecond()/1000)))
	} else {
		s.Set("event-data.id", s.ID)
	}
	if s.Account != "" {
		s.Set("event-data.account.id", s.Account)
	}
}
