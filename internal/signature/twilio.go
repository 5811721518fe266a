package signature

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Twilio's auth-token signature is HMAC-SHA1; HMAC does not rely on SHA-1's collision resistance.
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// KindTwilio is the scheme's name, as Options.Kind takes it.
const KindTwilio = "twilio"

// twilioScheme is Twilio's X-Twilio-Signature; Twilio signs no timestamp.
var twilioScheme = schemeDef{
	name: KindTwilio,
	build: func(o Options, _ time.Duration) (Scheme, error) {
		if err := noTolerance(o); err != nil {
			return nil, err
		}
		return newTwilio(o.Secrets), nil
	},
}

// Twilio webhook headers and parameters.
const (
	// twilioSignatureHeader carries the base64 HMAC-SHA1, keyed with the
	// account's auth token, of the full URL Twilio called followed by the
	// POST form parameters (see TwilioSignedContent).
	twilioSignatureHeader = "X-Twilio-Signature"
	// twilioSignatureSettingsHeader is sent by webhooks signed with a
	// SharedKey instead of the auth token; it names the algorithm. This
	// scheme is pinned to the auth token's HMAC-SHA1 and refuses a request
	// whose settings name another algorithm.
	twilioSignatureSettingsHeader = "X-Twilio-Webhooks-Signature-Settings"
	// TwilioIdempotencyHeader is the token Twilio keeps across its retries
	// of one webhook request.
	TwilioIdempotencyHeader = "I-Twilio-Idempotency-Token"
	// twilioBodySHA256Param is the query parameter Twilio adds when the
	// body is not form-encoded (JSON): the signature then covers the URL
	// only, and this parameter binds the body by its SHA-256 in hex.
	twilioBodySHA256Param = "bodySHA256"
	// TwilioFirstParam is the first form parameter of every request
	// Twilio signs: it is always sent and sorts before the others.
	TwilioFirstParam = "AccountSid"
)

// twilio verifies Twilio's X-Twilio-Signature. The signed URL is the one
// Twilio called, so the source needs its public URL configured (plus the
// query of each request, which Request.URL carries). Twilio signs no
// timestamp: no tolerance applies, and replays are caught by the event
// identity in the inbox.
type twilio struct {
	secrets [][]byte
}

func newTwilio(secrets []string) *twilio {
	return &twilio{secrets: secretKeys(secrets)}
}

// TwilioSignedContent returns what Twilio signs for a request to rawURL
// with body, and the body hash the URL asks for ("" for a form request).
//
// With a bodySHA256 query parameter the content is the URL alone. Without
// it the body must be application/x-www-form-urlencoded, and the content is
// the URL followed by every parameter, sorted by name, written as name then
// value with no separator; a name sent several times contributes each of
// its distinct values in sorted order, as Twilio's own libraries do. Names
// and values are sorted by bytes, which matches Twilio's sort for every
// name it sends (ASCII).
func TwilioSignedContent(rawURL string, body []byte) (content, bodyHash string, err error) {
	u, perr := url.Parse(rawURL)
	if perr != nil || u.Scheme == "" || u.Host == "" {
		return "", "", failf(reasonMalformed, "twilio: the public URL is not an absolute URL")
	}
	// In the signed string the form's parameters follow the URL with no
	// separator, and the first of them is AccountSid: Twilio sends it with
	// every request, and it sorts before every other name. A query that
	// holds it may have taken the start of the parameters of the request
	// that was signed (docs/signatures.md); Twilio calls no such URL.
	if strings.Contains(u.RawQuery, TwilioFirstParam) {
		return "", "", failf(reasonMalformed, "twilio: the URL's query holds %s, the first of the signed form parameters", TwilioFirstParam)
	}
	q, qerr := url.ParseQuery(u.RawQuery)
	if hs, ok := q[twilioBodySHA256Param]; ok {
		if qerr != nil {
			return "", "", failf(reasonMalformed, "twilio: the URL query cannot be parsed")
		}
		for _, h := range hs[1:] {
			if h != hs[0] {
				return "", "", failf(reasonMalformed, "twilio: the URL has %s several times with different values", twilioBodySHA256Param)
			}
		}
		if hs[0] == "" {
			return "", "", failf(reasonMalformed, "twilio: the URL's %s parameter is empty", twilioBodySHA256Param)
		}
		// Twilio appends bodySHA256 to the URL it calls, so it is the
		// query's last parameter. Anywhere else the URL may be the signed
		// string of a form request read as a URL: an inbound SMS whose
		// text is "x&bodySHA256=<hash>&z=" makes one whose signature would
		// vouch for any JSON body with that hash (docs/signatures.md).
		// After the last parameter comes nothing the form's later
		// parameters could have supplied.
		last := u.RawQuery[strings.LastIndexByte(u.RawQuery, '&')+1:]
		if name, _, _ := strings.Cut(last, "="); name != twilioBodySHA256Param {
			return "", "", failf(reasonMalformed, "twilio: %s is not the URL's last query parameter, where Twilio appends it", twilioBodySHA256Param)
		}
		return rawURL, hs[0], nil
	}
	params, ferr := url.ParseQuery(string(body))
	if ferr != nil {
		return "", "", failf(reasonMalformed, "twilio: the body is not form-encoded and the URL has no %s parameter", twilioBodySHA256Param)
	}
	var b strings.Builder
	b.WriteString(rawURL)
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range params {
			if !yield(k) {
				return
			}
		}
	}) {
		vals := slices.Clone(params[k])
		slices.Sort(vals)
		for _, v := range slices.Compact(vals) {
			b.WriteString(k)
			b.WriteString(v)
		}
	}
	return b.String(), "", nil
}

// twilioURLCandidates returns the URLs Twilio may have signed for rawURL:
// as given, without its port and with the default port added. Twilio's back
// end is not consistent about the port, and its libraries try each; rawURL
// itself always comes first.
func twilioURLCandidates(rawURL string) []string {
	out := []string{rawURL}
	pre, auth, rest, ok := splitAuthority(rawURL)
	if !ok {
		return out
	}
	userInfo := ""
	if i := strings.LastIndexByte(auth, '@'); i >= 0 {
		userInfo, auth = auth[:i+1], auth[i+1:]
	}
	host, port := auth, ""
	if i := strings.IndexByte(auth[strings.LastIndexByte(auth, ']')+1:], ':'); i >= 0 {
		i += strings.LastIndexByte(auth, ']') + 1
		host, port = auth[:i], auth[i:]
	}
	without := pre + userInfo + host + rest
	if port == "" {
		def := ":80"
		if strings.EqualFold(pre, "https://") {
			def = ":443"
		}
		return append(out, pre+userInfo+host+def+rest)
	}
	return append(out, without)
}

// splitAuthority splits "scheme://authority/rest" into its prefix
// (scheme://), the authority and the rest, without normalising anything.
func splitAuthority(raw string) (pre, auth, rest string, ok bool) {
	i := strings.Index(raw, "://")
	if i <= 0 {
		return "", "", "", false
	}
	for j := 0; j < i; j++ {
		c := raw[j]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || j > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", "", "", false
		}
	}
	pre = raw[:i+3]
	after := raw[i+3:]
	end := strings.IndexAny(after, "/?#")
	if end < 0 {
		end = len(after)
	}
	return pre, after[:end], after[end:], true
}

// twilioNotForm reports whether a request without bodySHA256 carries a body
// that is not a form, which Twilio never signs that way: its Content-Type
// names another media type, or, without a Content-Type, the body is JSON.
func twilioNotForm(h http.Header, body []byte) bool {
	if ct := h.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		return err != nil || mt != "application/x-www-form-urlencoded"
	}
	b := bytes.TrimSpace(body)
	return len(b) > 0 && (b[0] == '{' || b[0] == '[')
}

func hmacSHA1(key []byte, s string) []byte {
	m := hmac.New(sha1.New, key)
	m.Write([]byte(s))
	return m.Sum(nil)
}

// twilioAlgorithm returns the algorithm named in the signature-settings
// header, HMAC_SHA1 when the header is absent or names none.
func twilioAlgorithm(settings string) string {
	for part := range strings.SplitSeq(settings, ",") {
		if k, v, ok := strings.Cut(part, "="); ok && strings.TrimSpace(k) == "algorithm" && strings.TrimSpace(v) != "" {
			return strings.ToUpper(strings.TrimSpace(v))
		}
	}
	return "HMAC_SHA1"
}

func (t *twilio) Verify(req *Request, _ time.Time) error {
	const sc = "twilio"
	if req.URL == "" {
		return failf(reasonMalformed, "%s: the public URL is unknown; configure the source's public URL exactly as in Twilio", sc)
	}
	settings, _, herr := header(req.Header, twilioSignatureSettingsHeader, sc)
	if herr != nil {
		return herr
	}
	if alg := twilioAlgorithm(settings); alg != "HMAC_SHA1" {
		return failf(ReasonMissing, "%s: %s names an algorithm other than HMAC_SHA1; the source is pinned to the auth-token signature", sc, twilioSignatureSettingsHeader)
	}
	v, ok, herr := header(req.Header, twilioSignatureHeader, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", sc, twilioSignatureHeader)
	}
	got, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return failf(reasonMalformed, "%s: %s is not base64", sc, twilioSignatureHeader)
	}
	matched := false
	var bodyHash string
	if !twilioHasBodyHash(req.URL) && twilioNotForm(req.Header, req.Body) {
		return failf(reasonMalformed, "%s: the body is not form-encoded and the URL has no %s parameter", sc, twilioBodySHA256Param)
	}
	for _, cand := range twilioURLCandidates(req.URL) {
		content, bh, cerr := TwilioSignedContent(cand, req.Body)
		if cerr != nil {
			return cerr
		}
		bodyHash = bh
		for _, key := range t.secrets {
			if hmac.Equal(hmacSHA1(key, content), got) {
				matched = true
			}
		}
	}
	if !matched {
		return failf(reasonMismatch, "%s: %s matches no configured auth token for the configured public URL", sc, twilioSignatureHeader)
	}
	if bodyHash != "" {
		want, err := hex.DecodeString(bodyHash)
		sum := sha256.Sum256(req.Body)
		if err != nil || !hmac.Equal(want, sum[:]) {
			return failf(reasonMismatch, "%s: the body's SHA-256 does not match the URL's %s parameter", sc, twilioBodySHA256Param)
		}
	}
	return nil
}

func twilioHasBodyHash(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Query().Has(twilioBodySHA256Param)
}

// TwilioURLWithBodySHA256 adds the bodySHA256 parameter Twilio sends with a
// JSON body to rawURL, for signing such a request.
func TwilioURLWithBodySHA256(rawURL string, body []byte) string {
	sum := sha256.Sum256(body)
	sep := "?"
	if strings.Contains(rawURL, "?") {
		sep = "&"
	}
	return rawURL + sep + twilioBodySHA256Param + "=" + hex.EncodeToString(sum[:])
}

// Sign signs req.URL as it is. A form body is signed with its parameters;
// for a JSON body req.URL must already carry the body's bodySHA256 (see
// TwilioURLWithBodySHA256), because Twilio signs the URL it calls.
func (t *twilio) Sign(req *Request, _ time.Time, _ string) (http.Header, error) {
	if req.URL == "" {
		return nil, fmt.Errorf("twilio: signing needs the public URL")
	}
	if !twilioHasBodyHash(req.URL) && twilioNotForm(req.Header, req.Body) {
		return nil, fmt.Errorf("twilio: a body that is not a form is signed over a URL with %s; see TwilioURLWithBodySHA256", twilioBodySHA256Param)
	}
	content, bodyHash, err := TwilioSignedContent(req.URL, req.Body)
	if err != nil {
		return nil, err
	}
	if bodyHash != "" {
		sum := sha256.Sum256(req.Body)
		if !strings.EqualFold(bodyHash, hex.EncodeToString(sum[:])) {
			return nil, fmt.Errorf("twilio: the URL's %s parameter is not the body's SHA-256", twilioBodySHA256Param)
		}
	}
	h := http.Header{}
	h.Set(twilioSignatureHeader, base64.StdEncoding.EncodeToString(hmacSHA1(t.secrets[0], content)))
	return h, nil
}
