package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KindHubSpot is the scheme's name, as Options.Kind takes it.
const KindHubSpot = "hubspot"

// hubspotScheme is HubSpot's signatures, pinned to one version. The five
// minutes of HubSpot's v3 guide apply to v3 only; v1 and v2 sign no
// timestamp.
var hubspotScheme = schemeDef{
	name: KindHubSpot, tolerance: 5 * time.Minute, versions: true,
	build: func(o Options, tol time.Duration) (Scheme, error) {
		h, err := newHubSpot(o.Version, o.Secrets, o.Tolerance, tol)
		if err != nil {
			return nil, err
		}
		return h, nil
	},
}

// HubSpot request-signature headers.
const (
	hubSpotSignatureV3Header      = "X-HubSpot-Signature-v3"
	hubSpotTimestampHeader        = "X-HubSpot-Request-Timestamp"
	hubSpotSignatureHeader        = "X-HubSpot-Signature"
	hubSpotSignatureVersionHeader = "X-HubSpot-Signature-Version"
)

// hubspot verifies one pinned HubSpot signature version.
//
//	v3: base64(HMAC-SHA256(client secret, method + decodedURI + body + timestamp))
//	v2: hex(SHA-256(client secret + method + URI + body))
//	v1: hex(SHA-256(client secret + body))
//
// HubSpot sends the older signatures next to v3 for backwards compatibility;
// a source pinned to v3 ignores them, and a source pinned to v1 or v2 refuses
// a request whose X-HubSpot-Signature-Version names another version.
type hubspot struct {
	version string
	secrets []string
	tol     time.Duration
}

func newHubSpot(version string, secrets []string, explicitTol, tol time.Duration) (*hubspot, error) {
	switch version {
	case HubSpotV3:
	case HubSpotV2, HubSpotV1:
		if explicitTol != 0 {
			return nil, optErr("tolerance", "hubspot %s signatures carry no timestamp, so no tolerance applies (only v3 is time-bound)", version)
		}
	case "":
		return nil, optErr("version", "hubspot requires a pinned signature version: v3, v2 or v1")
	default:
		return nil, optErr("version", "unknown hubspot signature version %q (v3, v2 or v1)", version)
	}
	return &hubspot{version: version, secrets: secrets, tol: tol}, nil
}

// hubspotUnescape reports the character for the only escapes HubSpot's
// request-validation guide says to decode in the URI before computing a v3
// signature. Everything else (%20, %26, %3D, %2B, %23, %25 ...) is signed as
// sent.
func hubspotUnescape(hi, lo byte) (byte, bool) {
	switch string([]byte{upper(hi), upper(lo)}) {
	case "3A":
		return ':', true
	case "2F":
		return '/', true
	case "3F":
		return '?', true
	case "40":
		return '@', true
	case "21":
		return '!', true
	case "24":
		return '$', true
	case "27":
		return '\'', true
	case "28":
		return '(', true
	case "29":
		return ')', true
	case "2A":
		return '*', true
	case "2C":
		return ',', true
	case "3B":
		return ';', true
	}
	return 0, false
}

func upper(c byte) byte {
	if c >= 'a' && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// hubSpotDecodeURI decodes the percent escapes HubSpot's v3 scheme decodes
// (%3A : %2F / %3F ? %40 @ %21 ! %24 $ %27 ' %28 ( %29 ) %2A * %2C , %3B ;),
// hex digits in either case, and leaves every other byte untouched.
func hubSpotDecodeURI(uri string) string {
	if !strings.Contains(uri, "%") {
		return uri
	}
	b := make([]byte, 0, len(uri))
	for i := 0; i < len(uri); i++ {
		if uri[i] == '%' && i+2 < len(uri) {
			if c, ok := hubspotUnescape(uri[i+1], uri[i+2]); ok {
				b = append(b, c)
				i += 2
				continue
			}
		}
		b = append(b, uri[i])
	}
	return string(b)
}

func (h *hubspot) scheme() string { return "hubspot " + h.version }

func method(req *Request) string {
	if req.Method == "" {
		return http.MethodPost
	}
	return req.Method
}

func (h *hubspot) Verify(req *Request, now time.Time) error {
	if h.version == HubSpotV3 {
		return h.verifyV3(req, now)
	}
	return h.verifyLegacy(req)
}

func (h *hubspot) verifyV3(req *Request, now time.Time) error {
	sc := h.scheme()
	sigRaw, ok, herr := header(req.Header, hubSpotSignatureV3Header, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing (this source accepts only v3 signatures)", sc, hubSpotSignatureV3Header)
	}
	tsRaw, ok, herr := header(req.Header, hubSpotTimestampHeader, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", sc, hubSpotTimestampHeader)
	}
	ms, err := strconv.ParseInt(tsRaw, 10, 64)
	if err != nil || ms < 0 {
		return failf(reasonTimestamp, "%s: %s is not a unix time in milliseconds", sc, hubSpotTimestampHeader)
	}
	if req.URL == "" {
		return failf(ReasonMissing, "%s: the request URL is not known, and v3 signs it", sc)
	}
	got, err := base64.StdEncoding.DecodeString(sigRaw)
	if err != nil {
		return failf(reasonMalformed, "%s: %s is not base64", sc, hubSpotSignatureV3Header)
	}
	uri := hubSpotDecodeURI(req.URL)
	matched := false
	for _, sec := range h.secrets {
		want := hmacSHA256([]byte(sec), []byte(method(req)), []byte(uri), req.Body, []byte(tsRaw))
		if hmac.Equal(want, got) {
			matched = true
		}
	}
	if !matched {
		return failf(reasonMismatch, "%s: signature matches no configured client secret", sc)
	}
	// HubSpot's guide and libraries only refuse timestamps older than five
	// minutes. A timestamp far in the future is refused too: it would keep
	// a captured request replayable for longer than the window.
	if e := checkWindow(sc, time.UnixMilli(ms), now, h.tol); e != nil {
		return e
	}
	return nil
}

func (h *hubspot) verifyLegacy(req *Request) error {
	sc := h.scheme()
	ver, ok, herr := header(req.Header, hubSpotSignatureVersionHeader, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", sc, hubSpotSignatureVersionHeader)
	}
	if ver != h.version {
		return failf(ReasonMissing, "%s: request carries a %s signature but this source is pinned to %s", sc, ver, h.version)
	}
	sigRaw, ok, herr := header(req.Header, hubSpotSignatureHeader, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", sc, hubSpotSignatureHeader)
	}
	got, err := hex.DecodeString(sigRaw)
	if err != nil {
		return failf(reasonMalformed, "%s: %s is not hex", sc, hubSpotSignatureHeader)
	}
	if h.version == HubSpotV2 && req.URL == "" {
		return failf(ReasonMissing, "%s: the request URL is not known, and v2 signs it", sc)
	}
	matched := false
	for _, sec := range h.secrets {
		if hmac.Equal(h.legacyDigest(sec, req), got) {
			matched = true
		}
	}
	if !matched {
		return failf(reasonMismatch, "%s: signature matches no configured client secret", sc)
	}
	return nil
}

// legacyDigest is the v1 or v2 SHA-256. The URI is used exactly as sent:
// HubSpot's v2 guide says it must match the original request, including
// the protocol and the order of query parameters.
func (h *hubspot) legacyDigest(secret string, req *Request) []byte {
	d := sha256.New()
	d.Write([]byte(secret))
	if h.version == HubSpotV2 {
		d.Write([]byte(method(req)))
		d.Write([]byte(req.URL))
	}
	d.Write(req.Body)
	return d.Sum(nil)
}

func (h *hubspot) Sign(req *Request, now time.Time, _ string) (http.Header, error) {
	out := http.Header{}
	sec := h.secrets[0]
	switch h.version {
	case HubSpotV3:
		if req.URL == "" {
			return nil, optErr("public_url", "hubspot v3 signs the request URL; set the source's public_url")
		}
		ts := strconv.FormatInt(now.UnixMilli(), 10)
		mac := hmacSHA256([]byte(sec), []byte(method(req)), []byte(hubSpotDecodeURI(req.URL)), req.Body, []byte(ts))
		out.Set(hubSpotSignatureV3Header, base64.StdEncoding.EncodeToString(mac))
		out.Set(hubSpotTimestampHeader, ts)
	default:
		if h.version == HubSpotV2 && req.URL == "" {
			return nil, optErr("public_url", "hubspot v2 signs the request URL; set the source's public_url")
		}
		out.Set(hubSpotSignatureHeader, hex.EncodeToString(h.legacyDigest(sec, req)))
		out.Set(hubSpotSignatureVersionHeader, h.version)
	}
	return out, nil
}
