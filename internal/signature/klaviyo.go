package signature

import (
	"crypto/hmac"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KindKlaviyo is the scheme's name, as Options.Kind takes it.
const KindKlaviyo = "klaviyo"

// klaviyoScheme is Klaviyo's Klaviyo-Signature over the body and
// Klaviyo-Timestamp.
var klaviyoScheme = schemeDef{
	name: KindKlaviyo, tolerance: 5 * time.Minute,
	build: func(o Options, tol time.Duration) (Scheme, error) { return newKlaviyo(o.Secrets, tol), nil },
}

// Klaviyo system-webhook headers.
const (
	klaviyoSignatureHeader = "Klaviyo-Signature"
	klaviyoTimestampHeader = "Klaviyo-Timestamp"
	klaviyoWebhookIDHeader = "Klaviyo-Webhook-Id"
)

// klaviyo verifies Klaviyo system webhooks: hex(HMAC-SHA256(webhook secret,
// body + Klaviyo-Timestamp)), the body first and the timestamp header value
// appended verbatim with no separator. See docs/signatures.md for the
// evidence behind this construction and its limits.
type klaviyo struct {
	secrets [][]byte
	tol     time.Duration
}

func newKlaviyo(secrets []string, tol time.Duration) *klaviyo {
	k := &klaviyo{tol: tol}
	for _, s := range secrets {
		k.secrets = append(k.secrets, []byte(s))
	}
	return k
}

// parseKlaviyoTimestamp reads a Klaviyo-Timestamp value. Published examples
// disagree on its format, so the forms seen in the wild are all accepted:
// an HTTP date (IMF-fixdate), RFC 3339, or a unix time in seconds (or in
// milliseconds when it has 13 or more digits). The signature always covers
// the raw header text, so the format only matters for the tolerance check.
func parseKlaviyoTimestamp(v string) (time.Time, bool) {
	if v == "" {
		return time.Time{}, false
	}
	if isDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, false
		}
		if len(v) >= 13 {
			return time.UnixMilli(n), true
		}
		return time.Unix(n, 0), true
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return t, true
	}
	return time.Time{}, false
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func (k *klaviyo) Verify(req *Request, now time.Time) error {
	const sc = "klaviyo"
	sigRaw, ok, herr := header(req.Header, klaviyoSignatureHeader, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", sc, klaviyoSignatureHeader)
	}
	tsRaw, ok, herr := header(req.Header, klaviyoTimestampHeader, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", sc, klaviyoTimestampHeader)
	}
	got, err := hex.DecodeString(strings.TrimSpace(sigRaw))
	if err != nil {
		return failf(reasonMalformed, "%s: %s is not hex", sc, klaviyoSignatureHeader)
	}
	matched := false
	for _, key := range k.secrets {
		if hmac.Equal(hmacSHA256(key, req.Body, []byte(tsRaw)), got) {
			matched = true
		}
	}
	if !matched {
		return failf(reasonMismatch, "%s: signature matches no configured secret", sc)
	}
	t, ok := parseKlaviyoTimestamp(tsRaw)
	if !ok {
		return failf(reasonTimestamp, "%s: %s is neither an HTTP date, RFC 3339 nor a unix time", sc, klaviyoTimestampHeader)
	}
	if e := checkWindow(sc, t, now, k.tol); e != nil {
		return e
	}
	return nil
}

// Sign writes the timestamp as an HTTP date (IMF-fixdate), the form the
// most specific third-party evidence reports.
func (k *klaviyo) Sign(req *Request, now time.Time, _ string) (http.Header, error) {
	ts := now.UTC().Format(http.TimeFormat)
	h := http.Header{}
	h.Set(klaviyoSignatureHeader, hex.EncodeToString(hmacSHA256(k.secrets[0], req.Body, []byte(ts))))
	h.Set(klaviyoTimestampHeader, ts)
	return h, nil
}
