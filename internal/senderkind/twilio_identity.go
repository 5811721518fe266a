package senderkind

import (
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Twilio's identity rules. A status callback is sent once per status of
// the same message or call, so the event id joins the resource's sid
// (MessageSid, else CallSid) with its status and, for a call,
// SequenceNumber; the type is "message." or "call." plus the status. Twilio
// signs the form's names and values with no separator, so a form body must
// name only Params, each value of its shape, AccountSid and the status must
// be present, and what the identity reads must be sent once: else one
// captured request, its boundaries moved, would verify as new events.

// twilioForm checks a Twilio form. Twilio signs the URL it called followed
// by every form parameter, sorted by name, written as name then value with
// no separator. The signature therefore holds however the boundary between
// a name and its value, or between a value and the next name, is moved:
// the signature of "...&MessageStatus=delivered&SmsSid=SM...&..." also
// verifies "...&MessageStatus=deliveredSmsSidSM...&...", and that of
// "...&SequenceNumber=3&..." also "...&SequenceNumber3=&...". Twilio signs
// no timestamp either, so one captured request could be posted again in
// such a form forever, each time under a new event id. twilioForm refuses
// every form a moved boundary can produce from a genuine request that
// would name another event (docs/signatures.md):
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
// What the identity reads must also be sent once (envelope refuses reading
// a repeated parameter), and the status must be present (twilioEventID). A
// test parses the signed strings of genuine requests in every way Twilio's
// names allow and checks that each form hookledger accepts names the same
// event.
func twilioForm(q url.Values, params Params) error {
	names := slices.Sorted(maps.Keys(q))
	for _, name := range names {
		if name == "" {
			return malformed("body", "has a parameter without a name")
		}
		shape, ok := params[name]
		if params != nil && !ok {
			return malformed(name, "is not a parameter Twilio documents for messaging or voice requests; if Twilio sends it, list it in the source's extra_params")
		}
		for _, v := range q[name] {
			if !shape.Match(v) {
				return malformed(name, fmt.Sprintf("is %s, not %s", quoteValue(v), shape.What))
			}
		}
	}
	if q.Get("AccountSid") == "" {
		return malformed("AccountSid", "is required: Twilio sends it with every request")
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
				return malformed(prev, fmt.Sprintf("holds the name %s, which the request lacks: a boundary between a name and a value was moved, which Twilio's signature does not show", name))
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

// twilioCloudEvent reads a JSON body from Twilio (signed with bodySHA256)
// as the CloudEvent it is: its id names the event and stays the same on
// every delivery of it, per the CloudEvents specification.
func twilioCloudEvent(body Doc) (Identity, bool) {
	if _, ok := body.Lookup("specversion"); !ok {
		return Identity{}, false
	}
	return Identity{
		EventID: "id", Type: "type", TypeRequired: true, OccurredAt: "time",
		Entity: "data.messageSid", Account: "data.accountSid", Unit: time.Second,
	}, true
}

// twilioSid is the resource a Twilio request is about, and its entity:
// MessageSid for messaging, else CallSid for voice. A message's or call's
// status callbacks are ordered against each other.
func twilioSid(ev Doc) (string, error) {
	for _, f := range []string{"MessageSid", "CallSid"} {
		s, err := ev.Str(f)
		if err != nil || s != "" {
			return s, err
		}
	}
	return "", malformed("MessageSid", "is required (or CallSid): it names the message or call")
}

// twilioStatus is the status a Twilio request reports and the resource
// class it belongs to.
func twilioStatus(ev Doc) (class, status string, err error) {
	class = "call"
	if s, err := ev.Str("MessageSid"); err != nil {
		return "", "", err
	} else if s != "" {
		class = "message"
	}
	for _, f := range []string{"MessageStatus", "SmsStatus", "CallStatus"} {
		s, err := ev.Str(f)
		if err != nil || s != "" {
			return class, s, err
		}
	}
	return class, "", nil
}

// twilioEventID builds a Twilio event's identity: the sid, its status and
// the SequenceNumber a call's status callbacks carry. Twilio sends a status
// callback per status of one message or call, so the sid alone would make
// "sent" and "delivered" one event; a retry resends the same parameters
// and keeps the identity (IP02). I-Twilio-Idempotency-Token is not used:
// Twilio's reference does not document what it stays the same across.
func twilioEventID(ev Doc) (string, error) {
	sid, err := twilioSid(ev)
	if err != nil {
		return "", err
	}
	class, status, err := twilioStatus(ev)
	if err != nil {
		return "", err
	}
	if status == "" {
		return "", twilioStatusRequired(class)
	}
	id := sid + ":" + status
	if class == "call" {
		// Only a call's status callbacks are numbered. A message's
		// SequenceNumber is not read: Twilio documents none, and one
		// could only have been split out of a value a texter wrote
		// (a WhatsApp ProfileName).
		seq, err := ev.Str("SequenceNumber")
		if err != nil {
			return "", err
		}
		if seq != "" {
			id += ":" + seq
		}
	}
	return id, nil
}

// twilioStatusRequired refuses a request without a status: Twilio sends
// one with every message and call request, and the event is named by it.
func twilioStatusRequired(class string) error {
	if class == "message" {
		return malformed("MessageStatus", "is required (or SmsStatus): Twilio sends a message's status with every request, and the event is named by it")
	}
	return malformed("CallStatus", "is required: Twilio sends a call's status with every request, and the event is named by it")
}

// twilioType is "message." or "call." followed by the status
// (message.received, message.delivered, call.completed), or the class alone
// when the request reports no status.
func twilioType(ev Doc) (string, error) {
	class, status, err := twilioStatus(ev)
	if err != nil {
		return "", err
	}
	if status == "" {
		return class, nil
	}
	return class + "." + status, nil
}
