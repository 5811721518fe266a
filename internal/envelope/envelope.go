package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/senderkind"
)

// Kind names, as the registry of sender kinds defines them.
const (
	KindStripe           = senderkind.Stripe
	KindHubSpot          = senderkind.HubSpot
	KindKlaviyo          = senderkind.Klaviyo
	KindStandardWebhooks = senderkind.StandardWebhooks
	KindPipedrive        = senderkind.Pipedrive
	KindHMAC             = senderkind.HMAC
	KindGitHub           = senderkind.GitHub
	KindShopify          = senderkind.Shopify
	KindSlack            = senderkind.Slack
	KindTwilio           = senderkind.Twilio
	KindPaddle           = senderkind.Paddle
	KindSquare           = senderkind.Square
)

// MaxHubSpotBatch is the most events HubSpot puts in one request.
const MaxHubSpotBatch = senderkind.MaxHubSpotBatch

// Event is one event's identity, extracted from a verified body.
type Event struct {
	EventID    string    // the sender's stable event identity
	Type       string    // the sender's event type
	Entity     string    // the business object id (may be empty)
	Account    string    // tenant/portal/account named by the payload (may be empty)
	OccurredAt time.Time // zero when the payload gives none; never the receipt time (OR03)
	Body       []byte    // this event's own JSON bytes: the element's raw bytes in a batch
}

// Paths override the kind's default field paths; empty keeps the default.
// Syntax: dotted object keys ("data.object.id"), an all-digit segment
// indexes an array ("items.0.id"), a leading "$." resolves from the
// document root rather than from the batch element ("$.meta.account"), and
// "header:Name" reads a request header ("header:X-GitHub-Delivery").
type Paths = senderkind.Fields

// MalformedError says which field of the body breaks the sender's contract.
// The receiver answers 400 with its text. Field is the path as configured,
// prefixed with the element's index in a batch ("[3].eventId").
type MalformedError struct {
	Field string
	Msg   string
}

func (e *MalformedError) Error() string { return e.Field + ": " + e.Msg }

// Kinds returns the kinds Extract understands, in a fresh slice.
func Kinds() []string { return senderkind.Builtin().Names() }

// ValidatePaths checks the syntax of every non-empty override, so that a bad
// path is refused when the config loads rather than on the first delivery.
func ValidatePaths(p Paths) error {
	for _, f := range []struct{ name, v string }{
		{"event_id", p.EventID}, {"type", p.Type}, {"occurred_at", p.OccurredAt}, {"entity", p.Entity}, {"account", p.Account},
	} {
		if f.v == "" {
			continue
		}
		if _, err := parsePath(f.v); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return nil
}

// Extract returns the events in body, which must already be verified. kind
// is one of Kinds(); an unknown kind is a configuration error, not a
// *MalformedError. For single-event kinds Event.Body is body itself.
func Extract(kind string, paths Paths, header http.Header, body []byte) ([]Event, error) {
	k, ok := senderkind.Builtin().Lookup(kind)
	if !ok {
		return nil, fmt.Errorf("envelope: unknown kind %q", kind)
	}
	return ExtractIdentity(k.Identity, paths, header, body)
}

// ExtractIdentity is Extract with the kind's identity rules already looked
// up, for a receiver that resolved its sources' kinds once.
func ExtractIdentity(id senderkind.Identity, paths Paths, header http.Header, body []byte) ([]Event, error) {
	if err := ValidatePaths(paths); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	var root any
	var err error
	if id.Form && !looksJSON(body) {
		var q url.Values
		if q, err = decodeForm(body); err == nil {
			if id.Rule == senderkind.RuleTwilio {
				if merr := checkTwilioForm(q, id.Params); merr != nil {
					return nil, merr
				}
			}
			root = formObject(q)
		}
	} else {
		root, err = parseBody(body)
	}
	if err != nil {
		return nil, &MalformedError{Field: "body", Msg: err.Error()}
	}
	if id.Rule == senderkind.RuleTwilio {
		if _, ok := mustPath("specversion").lookup(root, root, nil); ok {
			// A JSON body from Twilio (signed with bodySHA256) is a
			// CloudEvent: its id names the event and stays the same on
			// every delivery of it, per the CloudEvents specification.
			id = senderkind.Identity{
				EventID: "id", Type: "type", TypeRequired: true, OccurredAt: "time",
				Entity: "data.messageSid", Account: "data.accountSid", Unit: time.Second,
			}
		}
	}
	x := extractor{id: id, paths: paths, header: header, root: root}

	switch id.Rule {
	case senderkind.RuleKlaviyo:
		if err := x.klaviyoWebhookID(); err != nil {
			return nil, err
		}
	case senderkind.RulePipedrive:
		if err := x.pipedriveVersion(); err != nil {
			return nil, err
		}
	}
	if b := id.Batch; b.Array || b.Key != "" {
		return x.batch(b.Key, b.Max)
	}
	if !isObject(root) {
		return nil, &MalformedError{Field: "body", Msg: "must be a JSON object"}
	}
	ev, merr := x.event(root, "")
	if merr != nil {
		return nil, merr
	}
	ev.Body = body
	return []Event{ev}, nil
}

// parseBody validates a JSON body as a whole, which it then stays as; an
// object is indexed by its members.
func parseBody(b []byte) (any, error) {
	if validJSON(b) {
		return rawJSON(b).indexed(), nil
	}
	if _, err := decode(b); err != nil {
		return nil, err // names what is wrong
	}
	return nil, errors.New("is not valid JSON")
}

// isObject reports whether a body's root is an object.
func isObject(root any) bool {
	switch r := root.(type) {
	case map[string]any:
		return true
	case rawJSON:
		return r.kind() == '{'
	}
	return false
}

// decode parses exactly one JSON value with numbers kept as json.Number.
func decode(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("is empty")
		}
		return nil, errors.New("is not valid JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("has data after the JSON value")
	}
	return v, nil
}

// looksJSON reports whether a body of a form-posting sender is JSON
// instead (Twilio's bodySHA256 requests).
func looksJSON(b []byte) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

// decodeForm reads an application/x-www-form-urlencoded body.
func decodeForm(b []byte) (url.Values, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("is empty")
	}
	q, err := url.ParseQuery(string(b))
	if err != nil {
		return nil, errors.New("is not a valid form (application/x-www-form-urlencoded)")
	}
	return q, nil
}

// formObject is a form as an object of its parameters. A name sent
// several times holds all its values, which no identity can be read from:
// Twilio's signature covers the values of a repeated name sorted, not in
// the order sent, so "the first" is whichever the sender of the request
// chose.
func formObject(q url.Values) map[string]any {
	obj := make(map[string]any, len(q))
	for k, v := range q {
		if len(v) > 1 {
			obj[k] = repeatedParam(v)
			continue
		}
		obj[k] = v[0]
	}
	return obj
}

// repeatedParam is the value of a form parameter sent several times.
type repeatedParam []string

type extractor struct {
	id     senderkind.Identity
	paths  Paths
	header http.Header
	root   any
}

// batch splits an array (the body itself when key is empty, else the
// root's key) into events, keeping each element's raw bytes. limit 0 means no
// limit.
func (x extractor) batch(key string, limit int) ([]Event, error) {
	field := "body"
	list := x.root
	if key != "" {
		field = key
		if !isObject(x.root) {
			return nil, &MalformedError{Field: "body", Msg: "must be a JSON object"}
		}
		list, _ = path{text: key, segs: []string{key}}.lookup(x.root, x.root, nil)
	}
	var raws []rawJSON
	if r, ok := list.(rawJSON); ok && r.kind() == '[' {
		raws, _ = r.elements()
	} else if key == "" {
		return nil, &MalformedError{Field: field, Msg: "must be a JSON array of events"}
	} else {
		return nil, &MalformedError{Field: field, Msg: "must be an array of events"}
	}
	if len(raws) == 0 {
		return nil, &MalformedError{Field: field, Msg: "holds no events; the sender never sends an empty batch"}
	}
	if limit > 0 && len(raws) > limit {
		return nil, &MalformedError{Field: field, Msg: fmt.Sprintf("holds %d events; the sender's contract allows at most %d", len(raws), limit)}
	}
	events := make([]Event, 0, len(raws))
	for i, raw := range raws {
		prefix := fmt.Sprintf("%s[%d]", key, i)
		if raw.kind() != '{' {
			return nil, &MalformedError{Field: prefix, Msg: "must be a JSON object"}
		}
		ev, merr := x.event(raw.indexed(), prefix+".")
		if merr != nil {
			return nil, merr
		}
		ev.Body = raw
		events = append(events, ev)
	}
	return events, nil
}

// pick returns the configured or default path for one field.
func pick(override, def string) string {
	if override != "" {
		return override
	}
	return def
}

// str resolves a path to a scalar string; absent gives "" and ok.
func (x extractor) str(elem any, p, prefix string) (string, *MalformedError) {
	if p == "" {
		return "", nil
	}
	v, found := mustPath(p).lookup(x.root, elem, x.header)
	if !found {
		return "", nil
	}
	if r, ok := v.(repeatedParam); ok {
		return "", repeatedError(prefix+p, r)
	}
	s, ok := scalar(v)
	if !ok {
		return "", &MalformedError{Field: prefix + p, Msg: "must be a string or a number"}
	}
	return s, nil
}

func (x extractor) required(elem any, p, prefix string) (string, *MalformedError) {
	s, err := x.str(elem, p, prefix)
	if err != nil {
		return "", err
	}
	if s == "" {
		return "", &MalformedError{Field: prefix + p, Msg: "is required"}
	}
	return s, nil
}

func (x extractor) event(elem any, prefix string) (Event, *MalformedError) {
	var ev Event
	var merr *MalformedError
	d := x.id

	// Event id.
	switch {
	case x.paths.EventID != "":
		ev.EventID, merr = x.required(elem, x.paths.EventID, prefix)
	case x.id.Rule == senderkind.RuleHubSpot:
		ev.EventID, merr = x.hubspotEventID(elem, prefix)
	case x.id.Rule == senderkind.RuleTwilio:
		ev.EventID, merr = x.twilioEventID(elem, prefix)
	case d.EventID == "" && len(d.EventIDHeaders) > 0:
		// The first id header present names the event (for Standard
		// Webhooks, webhook-id or svix-id, whichever set the sender used).
		for _, name := range d.EventIDHeaders {
			if ev.EventID = strings.TrimSpace(x.header.Get(name)); ev.EventID != "" {
				break
			}
		}
		if ev.EventID == "" {
			merr = &MalformedError{Field: d.EventIDHeaders[0], Msg: "header is required and names the event"}
		}
	default:
		ev.EventID, merr = x.required(elem, d.EventID, prefix)
	}
	if merr != nil {
		return Event{}, merr
	}

	// Type.
	switch {
	case x.paths.Type != "":
		ev.Type, merr = x.str(elem, x.paths.Type, prefix)
	case x.id.Rule == senderkind.RulePipedrive:
		ev.Type, merr = x.pipedriveType(elem, prefix)
	case x.id.Rule == senderkind.RuleTwilio:
		ev.Type, merr = x.twilioType(elem, prefix)
	case x.id.TypeRequired:
		ev.Type, merr = x.required(elem, d.Type, prefix)
	default:
		ev.Type, merr = x.str(elem, d.Type, prefix)
	}
	if merr != nil {
		return Event{}, merr
	}

	if ev.Entity, merr = x.str(elem, pick(x.paths.Entity, d.Entity), prefix); merr != nil {
		return Event{}, merr
	}
	if x.id.Rule == senderkind.RuleTwilio && x.paths.Entity == "" {
		// The message or call is the entity: its status callbacks are
		// ordered against each other.
		if ev.Entity, merr = x.twilioSid(elem, prefix); merr != nil {
			return Event{}, merr
		}
	}
	if ev.Account, merr = x.str(elem, pick(x.paths.Account, d.Account), prefix); merr != nil {
		return Event{}, merr
	}

	if p := pick(x.paths.OccurredAt, d.OccurredAt); p != "" {
		if v, found := mustPath(p).lookup(x.root, elem, x.header); found {
			if r, ok := v.(repeatedParam); ok {
				return Event{}, repeatedError(prefix+p, r)
			}
			t, ok := parseTime(v, x.unit())
			if !ok {
				return Event{}, &MalformedError{Field: prefix + p, Msg: "is not a time (RFC 3339, or a unix time in " + unitName(x.unit()) + ")"}
			}
			ev.OccurredAt = t
		}
	}
	return ev, nil
}

// unit is the kind's unit of numeric times, seconds when it names none.
func (x extractor) unit() time.Duration {
	if x.id.Unit == 0 {
		return time.Second
	}
	return x.id.Unit
}

func unitName(u time.Duration) string {
	if u == time.Millisecond {
		return "milliseconds"
	}
	return "seconds"
}

// hubspotEventID builds HubSpot's event identity. HubSpot's classic eventId
// is not guaranteed unique, so it is combined with the fields that scope it:
// the portal, the subscription, the occurrence time in milliseconds and the
// object (plus the property for property changes). All of them are the same
// on every retry of a delivery; attemptNumber, which changes per retry, is
// never part of the identity (IP02).
func (x extractor) hubspotEventID(elem any, prefix string) (string, *MalformedError) {
	parts := make([]string, 0, 6)
	for _, f := range []string{"portalId", "subscriptionId", "eventId", "occurredAt"} {
		s, err := x.required(elem, f, prefix)
		if err != nil {
			return "", err
		}
		parts = append(parts, s)
	}
	for _, f := range []string{"objectId", "propertyName"} {
		s, err := x.str(elem, f, prefix)
		if err != nil {
			return "", err
		}
		if s != "" || f == "objectId" {
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, ":"), nil
}

// twilioSid is the resource a Twilio request is about: MessageSid for
// messaging, else CallSid for voice.
func (x extractor) twilioSid(elem any, prefix string) (string, *MalformedError) {
	for _, f := range []string{"MessageSid", "CallSid"} {
		s, err := x.str(elem, f, prefix)
		if err != nil || s != "" {
			return s, err
		}
	}
	return "", &MalformedError{Field: prefix + "MessageSid", Msg: "is required (or CallSid): it names the message or call"}
}

// twilioStatus is the status a Twilio request reports and the resource
// class it belongs to.
func (x extractor) twilioStatus(elem any, prefix string) (class, status string, merr *MalformedError) {
	class = "call"
	if s, err := x.str(elem, "MessageSid", prefix); err != nil {
		return "", "", err
	} else if s != "" {
		class = "message"
	}
	for _, f := range []string{"MessageStatus", "SmsStatus", "CallStatus"} {
		s, err := x.str(elem, f, prefix)
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
func (x extractor) twilioEventID(elem any, prefix string) (string, *MalformedError) {
	sid, err := x.twilioSid(elem, prefix)
	if err != nil {
		return "", err
	}
	class, status, err := x.twilioStatus(elem, prefix)
	if err != nil {
		return "", err
	}
	if status == "" {
		return "", twilioStatusRequired(class, prefix)
	}
	id := sid + ":" + status
	if class == "call" {
		// Only a call's status callbacks are numbered. A message's
		// SequenceNumber is not read: Twilio documents none, and one
		// could only have been split out of a value a texter wrote
		// (a WhatsApp ProfileName).
		seq, err := x.str(elem, "SequenceNumber", prefix)
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
func twilioStatusRequired(class, prefix string) *MalformedError {
	if class == "message" {
		return &MalformedError{Field: prefix + "MessageStatus", Msg: "is required (or SmsStatus): Twilio sends a message's status with every request, and the event is named by it"}
	}
	return &MalformedError{Field: prefix + "CallStatus", Msg: "is required: Twilio sends a call's status with every request, and the event is named by it"}
}

// twilioType is "message." or "call." followed by the status
// (message.received, message.delivered, call.completed), or the class alone
// when the request reports no status.
func (x extractor) twilioType(elem any, prefix string) (string, *MalformedError) {
	class, status, err := x.twilioStatus(elem, prefix)
	if err != nil {
		return "", err
	}
	if status == "" {
		return class, nil
	}
	return class + "." + status, nil
}

func (x extractor) pipedriveType(elem any, prefix string) (string, *MalformedError) {
	entity, err := x.required(elem, "meta.entity", prefix)
	if err != nil {
		return "", err
	}
	action, err := x.required(elem, "meta.action", prefix)
	if err != nil {
		return "", err
	}
	return entity + "." + action, nil
}

// pipedriveVersion refuses webhooks v1 bodies. Their meta.id is the object's
// id, not the event's, so taking it as the event identity would collapse
// every change to one object into a single event.
func (x extractor) pipedriveVersion() *MalformedError {
	if !isObject(x.root) {
		return nil
	}
	if v, ok := mustPath("v").lookup(x.root, x.root, nil); ok {
		if s, _ := scalar(v); s == "1" {
			return &MalformedError{Field: "v", Msg: "is a Pipedrive webhooks v1 payload; create the webhook with version 2.0"}
		}
	}
	if v, ok := mustPath("meta.version").lookup(x.root, x.root, nil); ok {
		if s, _ := scalar(v); s != "" && !strings.HasPrefix(s, "2") {
			return &MalformedError{Field: "meta.version", Msg: "is " + strconv.Quote(s) + "; only Pipedrive webhooks v2 payloads are supported"}
		}
	}
	return nil
}

// klaviyoWebhookID enforces Klaviyo's rule that meta.klaviyo_webhook_id
// matches the Klaviyo-Webhook-Id header: a mismatch means the body was
// produced for another webhook.
func (x extractor) klaviyoWebhookID() *MalformedError {
	h := strings.TrimSpace(x.header.Get("Klaviyo-Webhook-Id"))
	if h == "" {
		return nil
	}
	v, ok := mustPath("meta.klaviyo_webhook_id").lookup(x.root, x.root, nil)
	if !ok {
		return nil
	}
	if s, _ := scalar(v); s != h {
		return &MalformedError{Field: "meta.klaviyo_webhook_id", Msg: "does not match the Klaviyo-Webhook-Id header"}
	}
	return nil
}
