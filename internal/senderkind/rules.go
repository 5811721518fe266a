package senderkind

import (
	"net/url"
	"time"
)

// Rules are a kind's identity rules that paths cannot express: HubSpot's
// composite event id, Klaviyo's webhook-id check, Pipedrive's type and
// version check, Twilio's form contract. Each is a function the kind's own
// file declares; package envelope calls the ones set, so no other package
// knows which kind has which rule. Every field is optional.
//
// A rule reads the body through a Doc and refuses it with a
// *MalformedError naming the field, relative to the event: envelope adds a
// batch element's index.
type Rules struct {
	// Form checks a form body's parameters before anything is read from
	// them (Identity.Form kinds). params is the identity's parameter set,
	// with the source's extra_params.
	Form func(q url.Values, params Params) error
	// Reshape returns another identity to read a parsed body with, and
	// true; false keeps the kind's. Twilio's JSON bodies are CloudEvents,
	// named by their own paths.
	Reshape func(body Doc) (Identity, bool)
	// Body checks the whole body before its events are read.
	Body func(body Doc) error
	// EventID, Type and Entity compute that field of one event; a path the
	// source names in fields: takes precedence over each.
	EventID func(ev Doc) (string, error)
	Type    func(ev Doc) (string, error)
	Entity  func(ev Doc) (string, error)
	// OccurredAt reads the event's occurrence time where the kind's unit
	// cannot say how (a fractional unix time); the zero time means the
	// event names none. A path in fields: takes precedence.
	OccurredAt func(ev Doc) (time.Time, error)
}

// Doc is what a rule reads of a verified request: one event (a batch's
// element) or the whole body, and the request's headers. Paths use
// envelope's syntax (Identity).
type Doc interface {
	// Str returns the string or number at path as text, "" when it is
	// absent or null. Any other value, or a form parameter sent several
	// times, is a *MalformedError naming the path.
	Str(path string) (string, error)
	// Required is Str refusing an absent or empty value.
	Required(path string) (string, error)
	// Lookup reports whether path holds a value, with its text when it is
	// a string or a number ("" otherwise): for checks that must not
	// refuse a value of another type.
	Lookup(path string) (string, bool)
	// Header returns a request header's value, trimmed.
	Header(name string) string
}

// MalformedError says which field of a body breaks the sender's contract.
// The receiver answers 400 with its text. Package envelope returns it as
// envelope.MalformedError, with Field prefixed by the element's index in a
// batch ("[3].eventId").
type MalformedError struct {
	Field string
	Msg   string
}

func (e *MalformedError) Error() string { return e.Field + ": " + e.Msg }

// malformed is a *MalformedError as an error.
func malformed(field, msg string) error {
	return &MalformedError{Field: field, Msg: msg}
}
