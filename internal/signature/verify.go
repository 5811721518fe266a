package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"net/http"
	"strings"
	"time"
)

// Scheme names, as Options.Kind takes them. The sender kinds a config names
// are defined in package senderkind: each built-in kind uses the scheme of
// the same name, and a kind may pin the options of a shared scheme (a kind
// built on the generic hmac scheme with its sender's header).
const (
	KindStripe           = "stripe"
	KindHubSpot          = "hubspot"
	KindKlaviyo          = "klaviyo"
	KindStandardWebhooks = "standard-webhooks"
	KindPipedrive        = "pipedrive"
	KindHMAC             = "hmac"
	KindGitHub           = "github"
	KindShopify          = "shopify"
	KindSlack            = "slack"
	KindTwilio           = "twilio"
	KindPaddle           = "paddle"
	KindSquare           = "square"
)

// HubSpot signature versions. A source is pinned to exactly one.
const (
	HubSpotV1 = "v1"
	HubSpotV2 = "v2"
	HubSpotV3 = "v3"
)

// Kinds returns the scheme names in a fresh slice.
func Kinds() []string {
	return []string{
		KindStripe, KindHubSpot, KindKlaviyo, KindStandardWebhooks, KindPipedrive, KindHMAC,
		KindGitHub, KindShopify, KindSlack, KindTwilio, KindPaddle, KindSquare,
	}
}

// DefaultTolerance is the timestamp window used when Options.Tolerance is 0.
// It is 0 for the schemes whose sender signs no timestamp (pipedrive,
// github, shopify, twilio, square). For hubspot it applies to v3 only and
// for hmac only when a timestamp header is configured.
func DefaultTolerance(kind string) time.Duration {
	switch kind {
	case KindStripe, KindHubSpot, KindKlaviyo, KindStandardWebhooks, KindHMAC:
		// Stripe's libraries, HubSpot's v3 guide and the Standard Webhooks
		// reference libraries all use five minutes.
		return 5 * time.Minute
	case KindSlack:
		return SlackDefaultTolerance
	case KindPaddle:
		return PaddleDefaultTolerance
	default:
		return 0
	}
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
	if o.Kind != KindHubSpot && o.Version != "" {
		return nil, optErr("version", "only kind hubspot takes a version")
	}
	if o.Kind != KindHMAC && o.HMAC != nil {
		return nil, optErr("hmac", "only kind hmac takes hmac options")
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
	tol := o.Tolerance
	if tol == 0 {
		tol = DefaultTolerance(o.Kind)
	}
	switch o.Kind {
	case KindStripe:
		return newStripe(o.Secrets, tol), nil
	case KindHubSpot:
		return newHubSpot(o.Version, o.Secrets, o.Tolerance, tol)
	case KindKlaviyo:
		return newKlaviyo(o.Secrets, tol), nil
	case KindStandardWebhooks:
		return newStandardWebhooks(o.Secrets, tol)
	case KindPipedrive:
		if o.Tolerance != 0 {
			return nil, optErr("tolerance", "pipedrive sends no timestamp, so no tolerance applies")
		}
		return newPipedrive(o.Secrets)
	case KindHMAC:
		return newHMAC(o.HMAC, o.Secrets, o.Tolerance, tol)
	case KindSlack:
		return newSlack(o.Secrets, tol), nil
	case KindPaddle:
		return newPaddle(o.Secrets, tol), nil
	case KindGitHub, KindShopify, KindTwilio, KindSquare:
		// These senders sign no timestamp: replays are caught by the event
		// identity in the inbox, and a tolerance would check nothing.
		if o.Tolerance != 0 {
			return nil, optErr("tolerance", "%s signs no timestamp, so no tolerance applies", o.Kind)
		}
		switch o.Kind {
		case KindGitHub:
			g, err := newGitHub(o.Secrets)
			if err != nil {
				return nil, err
			}
			return g, nil
		case KindShopify:
			s, err := newShopify(o.Secrets)
			if err != nil {
				return nil, err
			}
			return s, nil
		case KindTwilio:
			return newTwilio(o.Secrets), nil
		default:
			return newSquare(o.Secrets), nil
		}
	case "":
		return nil, optErr("kind", "is required (one of %s)", strings.Join(Kinds(), ", "))
	default:
		return nil, optErr("kind", "unknown kind %q (one of %s)", o.Kind, strings.Join(Kinds(), ", "))
	}
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
			return "", false, failf(ReasonMalformed, "%s: header %s appears %d times with different values", scheme, name, len(vals))
		}
	}
	return strings.TrimSpace(vals[0]), true, nil
}

// checkWindow refuses a signed time outside [now-tol, now+tol]. Both
// directions matter: a stale timestamp is a replay, and a far-future one
// would stay replayable for longer than the tolerance.
func checkWindow(scheme string, signed, now time.Time, tol time.Duration) *Error {
	if d := now.Sub(signed); d > tol {
		return failf(ReasonTimestamp, "%s: signed timestamp is %s old, beyond the %s tolerance", scheme, d.Round(time.Second), tol)
	}
	if d := signed.Sub(now); d > tol {
		return failf(ReasonTimestamp, "%s: signed timestamp is %s in the future, beyond the %s tolerance", scheme, d.Round(time.Second), tol)
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
