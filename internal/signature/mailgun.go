package signature

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"
)

// KindMailgun is the scheme's name, as Options.Kind takes it.
const KindMailgun = "mailgun"

// MailgunDefaultTolerance is the window a Mailgun source applies unless it
// sets one. Mailgun retries a failed delivery 10, 10, 15 and 30 minutes
// and 1, 2 and 4 hours apart, the last 8 h 5 min after the first attempt,
// and retries are reported to resend the first attempt's signature object
// (Mailgun's pages do not say either way). A shorter window would refuse
// those retries, and a refused retry is an event lost; the window also
// leaves room for the processing delays Mailgun's guide warns about.
const MailgunDefaultTolerance = 8*time.Hour + 30*time.Minute

// mailgunScheme is Mailgun's signature object in the JSON body.
var mailgunScheme = schemeDef{
	name: KindMailgun, tolerance: MailgunDefaultTolerance,
	build: func(o Options, tol time.Duration) (Scheme, error) { return newMailgun(o.Secrets, tol), nil },
}

// Mailgun's signature object: the body member that holds it and its
// fields.
const (
	mailgunSignatureMember = "signature"
	mailgunTimestamp       = "timestamp"
	mailgunToken           = "token"
	mailgunSignature       = "signature"
	// mailgunParentSignature is sent for an event of a subaccount: the
	// same HMAC keyed with the primary account's signing key.
	mailgunParentSignature = "parent-signature"
)

// mailgunTokenBytes is the random part of a token Sign writes: Mailgun's
// tokens are 50 characters, here 25 random bytes in hex.
const mailgunTokenBytes = 25

// mailgun verifies Mailgun's webhook signature. Mailgun puts it in the
// JSON body, beside the event-data object: {"signature": {"timestamp":
// "<unix seconds>", "token": "<50 characters>", "signature": "<hex>"}},
// the signature being the HMAC-SHA256, keyed with the account's HTTP
// webhook signing key, of the timestamp followed by the token. The
// event-data object is not signed: the signature proves only that someone
// with the key signed that timestamp and token (docs/signatures.md).
type mailgun struct {
	secrets [][]byte
	tol     time.Duration
}

func newMailgun(secrets []string, tol time.Duration) *mailgun {
	return &mailgun{secrets: secretKeys(secrets), tol: tol}
}

// mailgunSigned is a parsed signature object.
type mailgunSigned struct {
	timestamp, token string
	signed           time.Time
	// sigs are the signature and, for a subaccount's event, the
	// parent-signature.
	sigs [][]byte
}

func (m *mailgun) Verify(req *Request, now time.Time) error {
	s, e := parseMailgunSignature(req.Body)
	if e != nil {
		return e
	}
	// One HMAC per secret over "{timestamp}{token}", compared with each
	// signature the object carries.
	matched := false
	for _, key := range m.secrets {
		mac := hmacSHA256(key, []byte(s.timestamp), []byte(s.token))
		for _, sig := range s.sigs {
			if hmac.Equal(mac, sig) {
				matched = true
			}
		}
	}
	if !matched {
		return failf(reasonMismatch, "mailgun: the body's signature object does not match any configured signing key")
	}
	if e := checkWindow("mailgun", s.signed, now, m.tol); e != nil {
		return e
	}
	return nil
}

// parseMailgunSignature reads the body's signature object. Its members are
// matched exactly (encoding/json alone would match "Signature" too), and a
// timestamp may be a string of digits, as Mailgun sends it, or a number.
func parseMailgunSignature(body []byte) (*mailgunSigned, *Error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return nil, failf(reasonMalformed, "mailgun: the body is not a JSON object; Mailgun's webhooks post JSON with a signature object (the legacy form-encoded webhooks are not accepted)")
	}
	raw, ok := top[mailgunSignatureMember]
	if !ok || string(raw) == "null" {
		return nil, failf(ReasonMissing, "mailgun: the body has no signature object")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, failf(reasonMalformed, "mailgun: signature is not an object")
	}
	s := &mailgunSigned{}
	var e *Error
	if s.timestamp, e = mailgunField(obj, mailgunTimestamp, true); e != nil {
		return nil, e
	}
	secs, err := strconv.ParseInt(s.timestamp, 10, 64)
	if err != nil || secs < 0 || !isDigits(s.timestamp) {
		return nil, failf(reasonMalformed, "mailgun: signature.timestamp is not a unix time in seconds")
	}
	s.signed = time.Unix(secs, 0)
	if s.token, e = mailgunField(obj, mailgunToken, false); e != nil {
		return nil, e
	}
	for _, name := range []string{mailgunSignature, mailgunParentSignature} {
		v, e := mailgunField(obj, name, false)
		if e != nil && (name == mailgunSignature || e.Reason != ReasonMissing) {
			return nil, e
		}
		if v == "" {
			continue
		}
		sig, err := hex.DecodeString(v)
		if err != nil || len(sig) != 32 {
			return nil, failf(reasonMalformed, "mailgun: signature.%s is not 64 hex digits", name)
		}
		s.sigs = append(s.sigs, sig)
	}
	return s, nil
}

// mailgunField returns a member of the signature object as text: a JSON
// string, or, when number is set, also a JSON number.
func mailgunField(obj map[string]json.RawMessage, name string, number bool) (string, *Error) {
	raw, ok := obj[name]
	if !ok || string(raw) == "null" {
		return "", failf(ReasonMissing, "mailgun: signature.%s is missing", name)
	}
	var v string
	if err := json.Unmarshal(raw, &v); err == nil {
		if v == "" {
			return "", failf(ReasonMissing, "mailgun: signature.%s is empty", name)
		}
		return v, nil
	}
	if number && len(raw) > 0 && raw[0] >= '0' && raw[0] <= '9' {
		return string(raw), nil
	}
	return "", failf(reasonMalformed, "mailgun: signature.%s is not a string", name)
}

// errMailgunHeaders is Sign's answer: Mailgun's signature travels in the
// body.
var errMailgunHeaders = errors.New("mailgun: the signature is written into the body's signature object, not into headers; hookledger send signs and posts a Mailgun body")

// Sign reports that Mailgun sends no signature headers; SignBody signs.
func (m *mailgun) Sign(*Request, time.Time, string) (http.Header, error) {
	return nil, errMailgunHeaders
}

// SignBody returns req.Body with its signature object replaced by one
// Mailgun would write at now: the timestamp, a fresh random token and the
// signature with the first secret. The body's other members are kept as
// they are, compacted, in the order encoding/json writes an object's keys.
func (m *mailgun) SignBody(req *Request, now time.Time) ([]byte, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(req.Body, &top); err != nil || top == nil {
		return nil, errors.New("mailgun: the body must be a JSON object to carry a signature object")
	}
	if len(m.secrets) == 0 {
		return nil, errors.New("mailgun: no signing key")
	}
	var nonce [mailgunTokenBytes]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	ts := strconv.FormatInt(now.Unix(), 10)
	token := hex.EncodeToString(nonce[:])
	sig, err := json.Marshal(map[string]string{
		mailgunTimestamp: ts,
		mailgunToken:     token,
		mailgunSignature: hex.EncodeToString(hmacSHA256(m.secrets[0], []byte(ts), []byte(token))),
	})
	if err != nil {
		return nil, err
	}
	top[mailgunSignatureMember] = sig
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// The event's text stays as sent: no <, > or & escaped.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(top); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
