package signature

import "fmt"

// Reason classifies a verification failure. Every reason maps to HTTP 401 in
// the receiver; the distinction is for operators, logs and metrics.
type Reason string

const (
	// ReasonMissing: a header the pinned scheme needs is absent, or it holds
	// no signature of the pinned version (for example only a v1 HubSpot
	// signature on a source pinned to v3).
	ReasonMissing Reason = "missing"
	// reasonMalformed: a header is present but cannot be parsed (bad hex,
	// bad base64, a Stripe-Signature without t=, conflicting duplicates).
	reasonMalformed Reason = "malformed"
	// reasonMismatch: no configured secret produces the presented signature
	// or credentials.
	reasonMismatch Reason = "mismatch"
	// reasonTimestamp: the signed timestamp is unparseable, too old or too
	// far in the future for the tolerance.
	reasonTimestamp Reason = "timestamp"
)

// Error is a verification failure. Msg names the scheme and the header
// involved; it never contains a secret, a signature or credentials.
type Error struct {
	Reason Reason
	Msg    string
}

func (e *Error) Error() string { return "signature " + string(e.Reason) + ": " + e.Msg }

func failf(r Reason, format string, args ...any) *Error {
	return &Error{Reason: r, Msg: fmt.Sprintf(format, args...)}
}

// OptionError reports one invalid field of Options. Field uses the config
// file's spelling (secrets, tolerance, version, hmac.header ...) so the config
// layer can point at the right line.
type OptionError struct {
	Field string
	Msg   string
}

func (e *OptionError) Error() string { return e.Field + ": " + e.Msg }

func optErr(field, format string, args ...any) *OptionError {
	return &OptionError{Field: field, Msg: fmt.Sprintf(format, args...)}
}
