package envelope

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/hookledger/hookledger/internal/senderkind"
)

// Twilio signs the URL it called followed by every form parameter, sorted
// by name, written as name then value with no separator. The signature
// therefore holds however the boundary between a name and its value, or
// between a value and the next name, is moved: the signature of
// "...&MessageStatus=delivered&SmsSid=SM...&..." also verifies
// "...&MessageStatus=deliveredSmsSidSM...&...", and that of
// "...&SequenceNumber=3&..." also "...&SequenceNumber3=&...". Twilio signs
// no timestamp either, so one captured request could be posted again in
// such a form forever, each time under a new event id. checkTwilioForm
// refuses every form a moved boundary can produce from a genuine request
// that would name another event (docs/signatures.md):
//
//   - a name outside the documented set (plus the source's extra_params)
//     is refused, so no boundary can move into or out of a name: merged
//     names such as SequenceNumber3 are not in it;
//   - a value not of its parameter's documented shape is refused, so no
//     name can be merged into a SID, a status or a number;
//   - AccountSid is required. It is the first of Twilio's names in sort
//     order and always sent, so the signed string's parameters start with
//     it, and nothing can move between the URL's query and the form;
//   - a parameter the identity reads but the request lacks must not be
//     written inside the value sorted just before it: free text (FromZip)
//     followed by SequenceNumber could otherwise absorb it.
//
// What the identity reads must also be sent once (repeatedError), and the
// status must be present (twilioEventID). A test parses the signed strings
// of genuine requests in every way Twilio's names allow and checks that
// each form hookledger accepts names the same event.
func checkTwilioForm(q url.Values, params senderkind.Params) *MalformedError {
	names := slices.Sorted(maps.Keys(q))
	for _, name := range names {
		if name == "" {
			return &MalformedError{Field: "body", Msg: "has a parameter without a name"}
		}
		shape, ok := params[name]
		if params != nil && !ok {
			return &MalformedError{Field: name, Msg: "is not a parameter Twilio documents for messaging or voice requests; if Twilio sends it, list it in the source's extra_params"}
		}
		for _, v := range q[name] {
			if !shape.Match(v) {
				return &MalformedError{Field: name, Msg: fmt.Sprintf("is %s, not %s", quoteValue(v), shape.What)}
			}
		}
	}
	if q.Get("AccountSid") == "" {
		return &MalformedError{Field: "AccountSid", Msg: "is required: Twilio sends it with every request"}
	}
	absorbable := []string{"MessageSid", "MessageStatus", "SmsStatus"}
	if !q.Has("MessageSid") {
		absorbable = append(absorbable, "SequenceNumber")
	}
	for _, name := range absorbable {
		if q.Has(name) {
			continue
		}
		// The name sorted just before where name would stand.
		i, _ := slices.BinarySearch(names, name)
		if i == 0 {
			continue
		}
		prev := names[i-1]
		for _, v := range q[prev] {
			if strings.Contains(v, name) {
				return &MalformedError{Field: prev, Msg: fmt.Sprintf("holds the name %s, which the request lacks: a boundary between a name and a value was moved, which Twilio's signature does not show", name)}
			}
		}
	}
	return nil
}

// quoteValue quotes a refused value for an error, cut short: the value is
// the sender's own and tells which boundary moved.
func quoteValue(v string) string {
	const max = 64
	if len(v) > max {
		return strconv.Quote(v[:max]) + "…"
	}
	return strconv.Quote(v)
}

// repeatedError refuses reading an identity from a parameter sent several
// times.
func repeatedError(field string, vals repeatedParam) *MalformedError {
	return &MalformedError{Field: field, Msg: fmt.Sprintf("is sent %d times; the event's identity is read from it, and the signature does not cover which value comes first", len(vals))}
}
