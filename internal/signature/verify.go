package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"net/http"
	"strings"
	"time"
)

// HubSpot signature versions. A source is pinned to exactly one.
const (
	HubSpotV1 = "v1"
	HubSpotV2 = "v2"
	HubSpotV3 = "v3"
)

// schemeDef describes one signature scheme: its name as Options.Kind takes
// it, the window of its signed timestamp, the options it takes, and how it
// is built. Each scheme's file declares its own; New, Kinds and
// DefaultTolerance read them from schemes, so no code here switches on a
// scheme's name.
//
// Scheme names are not the sender kinds a config names (package senderkind
// defines those): each built-in kind uses the scheme of the same name, and a
// kind may pin the options of a shared scheme (a kind built on the generic
// hmac scheme with its sender's header).
type schemeDef struct {
	name string
	// tolerance is the default window of the signed timestamp, used when
	// Options.Tolerance is 0; 0 when the scheme signs no timestamp.
	tolerance time.Duration
	// versions says the scheme takes Options.Version (hubspot); the scheme
	// checks the value itself.
	versions bool
	// hmac says the scheme takes Options.HMAC (the generic hmac scheme).
	hmac bool
	// build makes the scheme from checked options; tol is the tolerance
	// to apply (Options.Tolerance, or the default). A scheme that signs no
	// timestamp refuses a non-zero Options.Tolerance here.
	build func(o Options, tol time.Duration) (Scheme, error)
}

// schemes lists every scheme in the order Kinds reports them. Adding a
// scheme is its own file, which declares its schemeDef, plus its line here.
var schemes = []*schemeDef{
	&stripeScheme, &hubspotScheme, &klaviyoScheme, &standardWebhooksScheme, &pipedriveScheme, &hmacSchemeDef,
	&githubScheme, &shopifyScheme, &slackScheme, &twilioScheme, &paddleScheme, &squareScheme, &mailgunScheme,
}

// lookupScheme returns the scheme with the given name.
func lookupScheme(name string) (*schemeDef, bool) {
	for _, d := range schemes {
		if d.name == name {
			return d, true
		}
	}
	return nil, false
}

// kinds returns the scheme names in a fresh slice.
func kinds() []string {
	names := make([]string, len(schemes))
	for i, d := range schemes {
		names[i] = d.name
	}
	return names
}

// schemesWith names the schemes for which has is true, for messages.
func schemesWith(has func(*schemeDef) bool) string {
	var names []string
	for _, d := range schemes {
		if has(d) {
			names = append(names, d.name)
		}
	}
	return strings.Join(names, ", ")
}

// DefaultTolerance is the timestamp window used when Options.Tolerance is 0.
// It is 0 for the schemes whose sender signs no timestamp (pipedrive,
// github, shopify, twilio, square) and for an unknown name. For hubspot it
// applies to v3 only and for hmac only when a timestamp header is
// configured.
func DefaultTolerance(kind string) time.Duration {
	if d, ok := lookupScheme(kind); ok {
		return d.tolerance
	}
	return 0
}

// noTolerance refuses a configured tolerance for a scheme that signs no
// timestamp: replays are caught by the event identity in the inbox, and a
// tolerance would check nothing.
func noTolerance(o Options) error {
	if o.Tolerance != 0 {
		return optErr("tolerance", "%s signs no timestamp, so no tolerance applies", o.Kind)
	}
	return nil
}

// Request is what a scheme sees: the raw body bytes exactly as received, and
// metadata.
type Request struct {
	Method string
	// URL is the full public URL the sender called, for example
	// https://hooks.example.com/hooks/crm?x=1. It is configured per source
	// because behind a proxy the Host the server sees differs. Only the
	// HubSpot v2 and v3 schemes sign it.
	URL    string
	Header http.Header
	Body   []byte
}

// Scheme verifies and signs requests for one source.
type Scheme interface {
	// Verify checks req at time now. On failure it returns an *Error. The
	// error text never contains a secret or a signature value.
	Verify(req *Request, now time.Time) error
	// Sign returns the headers this scheme's sender would add for req. The
	// first secret that can sign is used. eventID is used by schemes that
	// carry an event id in headers (standard-webhooks webhook-id); the
	// others ignore it.
	Sign(req *Request, now time.Time, eventID string) (http.Header, error)
}

// BodySigner is a Scheme whose sender signs inside the body rather than in
// headers (Mailgun's signature object). SignBody returns req.Body with the
// signature the sender would write for it at now, using the first secret;
// such a scheme's Sign reports that it has no headers to give.
type BodySigner interface {
	SignBody(req *Request, now time.Time) ([]byte, error)
}

// Options configure one source's scheme.
type Options struct {
	// Kind is one of Kinds().
	Kind string
	// Version pins the HubSpot signature version: v3, v2 or v1. A pinned
	// source never accepts another version. Empty for the other kinds.
	Version string
	// Secrets hold several values during a rotation overlap; a request that
	// verifies with any one of them is accepted.
	Secrets []string
	// Tolerance is the accepted distance between the signed timestamp and
	// now, in both directions. 0 means DefaultTolerance(Kind); negative is
	// an error, and so is a non-zero value for a scheme without timestamp.
	Tolerance time.Duration
	// HMAC configures kind hmac and must be nil for the others.
	HMAC *HMACOptions
}

// New validates o and returns the scheme. Validation errors are
// *OptionError values naming the offending field.
func New(o Options) (Scheme, error) {
	if o.Tolerance < 0 {
		return nil, optErr("tolerance", "must not be negative (got %s)", o.Tolerance)
	}
	def, known := lookupScheme(o.Kind)
	if o.Version != "" && (!known || !def.versions) {
		return nil, optErr("version", "only kind %s takes a version", schemesWith(func(d *schemeDef) bool { return d.versions }))
	}
	if o.HMAC != nil && (!known || !def.hmac) {
		return nil, optErr("hmac", "only kind %s takes hmac options", schemesWith(func(d *schemeDef) bool { return d.hmac }))
	}
	if len(o.Secrets) == 0 {
		return nil, optErr("secrets", "at least one secret is required")
	}
	// Errors name the secret by its position and never quote it: a secret
	// pasted into the wrong field must not end up in a log.
	for i, s := range o.Secrets {
		switch {
		case s == "":
			return nil, optErr("secrets", "secret %d is empty", i+1)
		case strings.TrimSpace(s) == "":
			return nil, optErr("secrets", "secret %d is blank (only whitespace)", i+1)
		case strings.TrimSpace(s) != s:
			// Almost always a line ending kept from a file or a paste. No
			// sender signs with it, so the source would refuse every
			// delivery; saying so at load time beats a stream of 401s.
			return nil, optErr("secrets", "secret %d starts or ends with whitespace (a pasted newline?); remove it", i+1)
		}
	}
	// Beyond this, only Standard Webhooks defines a secret size (24 to 64
	// bytes decoded, checked in newStandardWebhooks). Stripe and HubSpot
	// issue their secrets themselves and publish no minimum a receiver
	// should check, and Klaviyo's API takes any secret_key string (its
	// reference states no minimum length), so no length is enforced for
	// them or for hmac and pipedrive: a limit of our own could refuse a
	// real secret.
	switch {
	case o.Kind == "":
		return nil, optErr("kind", "is required (one of %s)", strings.Join(kinds(), ", "))
	case !known:
		return nil, optErr("kind", "unknown kind %q (one of %s)", o.Kind, strings.Join(kinds(), ", "))
	}
	tol := o.Tolerance
	if tol == 0 {
		tol = def.tolerance
	}
	return def.build(o, tol)
}

// header returns the single value of a header. A header sent several times
// with different values is refused: which copy a proxy or framework would
// pick is not defined, and an attacker who can append a header must not be
// able to choose it.
func header(h http.Header, name, scheme string) (string, bool, *Error) {
	vals := h.Values(name)
	if len(vals) == 0 || (len(vals) == 1 && strings.TrimSpace(vals[0]) == "") {
		return "", false, nil
	}
	for _, v := range vals[1:] {
		if v != vals[0] {
			return "", false, failf(reasonMalformed, "%s: header %s appears %d times with different values", scheme, name, len(vals))
		}
	}
	return strings.TrimSpace(vals[0]), true, nil
}

// checkWindow refuses a signed time outside [now-tol, now+tol]. Both
// directions matter: a stale timestamp is a replay, and a far-future one
// would stay replayable for longer than the tolerance.
func checkWindow(scheme string, signed, now time.Time, tol time.Duration) *Error {
	if d := now.Sub(signed); d > tol {
		return failf(reasonTimestamp, "%s: signed timestamp is %s old, beyond the %s tolerance", scheme, d.Round(time.Second), tol)
	}
	if d := signed.Sub(now); d > tol {
		return failf(reasonTimestamp, "%s: signed timestamp is %s in the future, beyond the %s tolerance", scheme, d.Round(time.Second), tol)
	}
	return nil
}

// maxSignatures caps the entries of a signature list header
// (webhook-signature, Stripe-Signature). A sender puts one signature per
// active secret in the list, so a rotation needs two or three, and a sender
// that signs with both a symmetric and an asymmetric key a few more; 16
// leaves ample room. The cap bounds what one unauthenticated request can
// cost: HMACs are shared between entries, but each ed25519 entry needs its
// own signature check over the whole body, and a 64 KB header holds
// thousands of entries.
const maxSignatures = 16

func hmacSHA256(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// equalSecret compares two values of possibly different lengths in constant
// time. Hashing first hides the length, which subtle.ConstantTimeCompare
// would otherwise reveal by returning early.
func equalSecret(a, b string) bool {
	ha := sha256.Sum256([]byte(a))
	hb := sha256.Sum256([]byte(b))
	return hmac.Equal(ha[:], hb[:])
}
