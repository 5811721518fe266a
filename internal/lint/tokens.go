package lint

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokens splits an identifier-like text into lower-case words: on every
// character that is not a letter or digit, between a lower-case letter and
// an upper-case one (receivedAt), before the last capital of a run that
// starts a new word (HTTPRetry -> http, retry) and between letters and
// digits (attempt2 -> attempt, 2).
//
// Matching whole words is what keeps ordinary words from raising alarms:
// "known_id" holds no word "now", "nowhere" is one word, "snowflake_id" is
// one word.
func tokens(s string) []string {
	var out []string
	start := -1
	var prev rune
	flush := func(end int) {
		if start >= 0 && end > start {
			out = append(out, strings.ToLower(s[start:end]))
		}
		start = -1
	}
	for i, r := range s {
		alnum := unicode.IsLetter(r) || unicode.IsDigit(r)
		if !alnum {
			flush(i)
			prev = 0
			continue
		}
		if start >= 0 {
			switch {
			case unicode.IsLower(prev) && unicode.IsUpper(r):
				flush(i)
			case unicode.IsUpper(prev) && unicode.IsUpper(r) && nextIsLower(s[i+utf8.RuneLen(r):]):
				flush(i)
			case unicode.IsLetter(prev) != unicode.IsLetter(r):
				flush(i)
			}
		}
		if start < 0 {
			start = i
		}
		prev = r
	}
	flush(len(s))
	return out
}

func nextIsLower(rest string) bool {
	r, _ := utf8.DecodeRuneInString(rest)
	return unicode.IsLower(r)
}

// attemptWords maps each word that marks attempt or arrival data to the
// rule word it is a form of. Plurals and verb forms are listed so that
// "retries" and "retrying" count as "retry"; words that merely share
// letters ("nowhere", "known", "receipt", "arrivederci") do not.
func attemptWord(tok string) (string, bool) {
	switch tok {
	case "attempt", "attempts", "attempted", "attempting":
		return "attempt", true
	case "delivery", "deliveries":
		return "delivery", true
	case "received", "receive", "receives", "receiving":
		return "received", true
	case "arrival", "arrivals", "arrive", "arrives", "arrived", "arriving":
		return "arrival", true
	case "now":
		return "now", true
	case "random", "randomly", "randomised", "randomized":
		return "random", true
	case "retry", "retries", "retried", "retrying":
		return "retry", true
	}
	return "", false
}

// findAttemptWord returns the first attempt or arrival word in a key part.
// "delivery" directly followed by "id" is left out here: delivery_id is a
// delivery key, which IP02 judges with its WARN clause.
func findAttemptWord(part string) (string, bool) {
	toks := tokens(part)
	for i, t := range toks {
		w, ok := attemptWord(t)
		if !ok {
			continue
		}
		if w == "delivery" && i+1 < len(toks) && toks[i+1] == "id" {
			continue
		}
		return w, true
	}
	// A version-4 UUID is random per call; the word is written in many
	// ways (uuid4, uuid.uuid4(), UUIDv4, uuid_v4), so look at the letters
	// and digits alone. A plain "uuid" is left alone: an object's own UUID
	// is a stable key.
	compact := compactLower(part)
	if strings.Contains(compact, "uuid4") || strings.Contains(compact, "uuidv4") {
		return "uuid4", true
	}
	return "", false
}

func compactLower(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// namesDeliveryKey reports whether a key part names a delivery key:
// event_id, message_id, webhook_id or delivery_id, with or without the
// underscore, in any case and wrapped in anything (hash(event_id),
// headers.webhook-id, {{messageId}}).
func namesDeliveryKey(part string) bool {
	toks := tokens(part)
	for i, t := range toks {
		switch t {
		case "eventid", "messageid", "webhookid", "deliveryid":
			return true
		case "event", "message", "webhook", "delivery":
			if i+1 < len(toks) && toks[i+1] == "id" {
				return true
			}
		}
	}
	return false
}

// namesFlow reports whether a key part names the flow itself: its own
// flow_id (billing_to_crm, "billing-to-crm") or the words flow, flow_id,
// flow_name.
func namesFlow(part, flowID string) bool {
	pt := tokens(part)
	switch strings.Join(pt, "_") {
	case "flow", "flow_id", "flowid", "flow_name", "flowname":
		return true
	case "":
		return false
	}
	ft := tokens(flowID)
	if len(pt) != len(ft) {
		return false
	}
	for i := range pt {
		if pt[i] != ft[i] {
			return false
		}
	}
	return true
}
