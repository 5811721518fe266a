package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/senderkind"
)

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
// prefixed with the element's index in a batch ("[3].eventId"). It is the
// registry's type, so that a kind's identity rules can refuse a body too.
type MalformedError = senderkind.MalformedError

// validatePaths checks the syntax of every non-empty override, so that a bad
// path is refused when the config loads rather than on the first delivery.
func validatePaths(p Paths) error {
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
// is one of the registry's kinds (senderkind.Builtin); an unknown kind is a configuration error, not a
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
	if err := validatePaths(paths); err != nil {
		return nil, fmt.Errorf("envelope: %w", err)
	}
	var root any
	var err error
	if id.Form && !looksJSON(body) {
		var q url.Values
		if q, err = decodeForm(body); err == nil {
			if id.Rules.Form != nil {
				if err := id.Rules.Form(q, id.Params); err != nil {
					return nil, asMalformed(err, "")
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
	x := extractor{id: id, paths: paths, header: header, root: root}
	if id.Rules.Reshape != nil {
		if other, ok := id.Rules.Reshape(x.doc(root)); ok {
			x.id = other
		}
	}
	if x.id.Rules.Body != nil {
		if err := x.id.Rules.Body(x.doc(root)); err != nil {
			return nil, asMalformed(err, "")
		}
	}
	id = x.id
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
	// The kind's rules read the event through one doc, made only for a
	// kind that has rules.
	var doc senderkind.Doc
	if r := d.Rules; r.EventID != nil || r.Type != nil || r.Entity != nil || r.OccurredAt != nil {
		doc = x.doc(elem)
	}

	// Event id.
	switch {
	case x.paths.EventID != "":
		ev.EventID, merr = x.required(elem, x.paths.EventID, prefix)
	case d.Rules.EventID != nil:
		ev.EventID, merr = x.rule(d.Rules.EventID, doc, prefix)
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
	case d.Rules.Type != nil:
		ev.Type, merr = x.rule(d.Rules.Type, doc, prefix)
	case d.TypeRequired:
		ev.Type, merr = x.required(elem, d.Type, prefix)
	default:
		ev.Type, merr = x.str(elem, d.Type, prefix)
	}
	if merr != nil {
		return Event{}, merr
	}

	if x.paths.Entity == "" && d.Rules.Entity != nil {
		ev.Entity, merr = x.rule(d.Rules.Entity, doc, prefix)
	} else {
		ev.Entity, merr = x.str(elem, pick(x.paths.Entity, d.Entity), prefix)
	}
	if merr != nil {
		return Event{}, merr
	}
	if ev.Account, merr = x.str(elem, pick(x.paths.Account, d.Account), prefix); merr != nil {
		return Event{}, merr
	}

	if ev.OccurredAt, merr = x.occurredAt(elem, prefix, doc); merr != nil {
		return Event{}, merr
	}
	return ev, nil
}

// occurredAt reads the event's occurrence time: the source's path, else the
// kind's rule, else the kind's path. Absent is the zero time.
func (x extractor) occurredAt(elem any, prefix string, doc senderkind.Doc) (time.Time, *MalformedError) {
	d := x.id
	if x.paths.OccurredAt == "" && d.Rules.OccurredAt != nil {
		t, err := d.Rules.OccurredAt(doc)
		if err != nil {
			return time.Time{}, asMalformed(err, prefix)
		}
		if t.IsZero() {
			return t, nil
		}
		if t, ok := inRange(t); ok {
			return t, nil
		}
		return time.Time{}, &MalformedError{Field: prefix + d.OccurredAt, Msg: "is not a time between 1970 and 9999"}
	}
	p := pick(x.paths.OccurredAt, d.OccurredAt)
	if p == "" {
		return time.Time{}, nil
	}
	v, found := mustPath(p).lookup(x.root, elem, x.header)
	if !found {
		return time.Time{}, nil
	}
	if r, ok := v.(repeatedParam); ok {
		return time.Time{}, repeatedError(prefix+p, r)
	}
	t, ok := parseTime(v, x.unit())
	if !ok {
		return time.Time{}, &MalformedError{Field: prefix + p, Msg: "is not a time (RFC 3339, or a unix time in " + unitName(x.unit()) + ")"}
	}
	return t, nil
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

// rule runs one of the kind's identity rules on an event.
func (x extractor) rule(fn func(senderkind.Doc) (string, error), doc senderkind.Doc, prefix string) (string, *MalformedError) {
	v, err := fn(doc)
	if err != nil {
		return "", asMalformed(err, prefix)
	}
	return v, nil
}

// asMalformed is a rule's refusal with the batch element's prefix added to
// its field. A rule refuses only with a *MalformedError; any other error
// is reported against the body rather than lost.
func asMalformed(err error, prefix string) *MalformedError {
	var m *MalformedError
	if !errors.As(err, &m) {
		return &MalformedError{Field: prefix + "body", Msg: err.Error()}
	}
	return &MalformedError{Field: prefix + m.Field, Msg: m.Msg}
}

// doc is what a kind's rules read of one event (elem) or of the whole body
// (elem is the root); it implements senderkind.Doc. Its errors name fields
// relative to the event: rule adds the batch prefix once.
func (x extractor) doc(elem any) senderkind.Doc {
	return &ruleDoc{root: x.root, header: x.header, elem: elem}
}

// ruleDoc holds only what a path reads (the root, the event, the
// headers), so handing it to a rule copies no more than that.
type ruleDoc struct {
	root, elem any
	header     http.Header
}

// x is an extractor over the doc, for its path reading.
func (d *ruleDoc) x() extractor { return extractor{root: d.root, header: d.header} }

func (d *ruleDoc) Str(p string) (string, error) {
	s, merr := d.x().str(d.elem, p, "")
	if merr != nil {
		return "", merr
	}
	return s, nil
}

func (d *ruleDoc) Required(p string) (string, error) {
	s, merr := d.x().required(d.elem, p, "")
	if merr != nil {
		return "", merr
	}
	return s, nil
}

func (d *ruleDoc) Lookup(p string) (string, bool) {
	v, ok := mustPath(p).lookup(d.root, d.elem, d.header)
	if !ok {
		return "", false
	}
	s, _ := scalar(v)
	return s, true
}

func (d *ruleDoc) Header(name string) string { return strings.TrimSpace(d.header.Get(name)) }

// repeatedError refuses reading an identity from a parameter sent several
// times.
func repeatedError(field string, vals repeatedParam) *MalformedError {
	return &MalformedError{Field: field, Msg: fmt.Sprintf("is sent %d times; the event's identity is read from it, and the signature does not cover which value comes first", len(vals))}
}
