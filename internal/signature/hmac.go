package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KindHMAC is the scheme's name, as Options.Kind takes it.
const KindHMAC = "hmac"

// hmacSchemeDef is the generic HMAC scheme, configured by Options.HMAC. Its
// five-minute default applies only when a timestamp header is configured.
var hmacSchemeDef = schemeDef{
	name: KindHMAC, tolerance: 5 * time.Minute, hmac: true,
	build: func(o Options, tol time.Duration) (Scheme, error) {
		h, err := newHMAC(o.HMAC, o.Secrets, o.Tolerance, tol)
		if err != nil {
			return nil, err
		}
		return h, nil
	},
}

// HMACOptions configure the generic hmac kind, which covers senders that
// sign the body (and optionally a timestamp) with a shared secret: GitHub,
// Shopify and most in-house senders.
type HMACOptions struct {
	// Header carries the signature, e.g. X-Hub-Signature-256. Required.
	Header string
	// Algorithm is sha256 (default) or sha512.
	Algorithm string
	// Encoding of the signature: hex (default) or base64. Hex is compared
	// case-insensitively.
	Encoding string
	// Prefix precedes the encoded signature in the header, e.g. "sha256=".
	// A header without it is refused.
	Prefix string
	// TimestampHeader, when set, names the header holding the signing time;
	// it is then checked against the tolerance and must appear in Template.
	TimestampHeader string
	// Template is the signed content. Placeholders: {body} (required),
	// {timestamp}, {method}, {url}. Default "{body}"; "{timestamp}.{body}" is
	// the common timestamped form.
	Template string
	// TimestampUnit is s (default) or ms.
	TimestampUnit string
}

type hmacScheme struct {
	opt     HMACOptions
	newHash func() hash.Hash
	parts   []tmplPart
	secrets [][]byte
	tol     time.Duration
}

type tmplPart struct {
	lit string
	ph  string // body, timestamp, method, url; empty for a literal
}

func parseTemplate(t string) ([]tmplPart, error) {
	var parts []tmplPart
	seen := map[string]int{}
	for t != "" {
		i := strings.IndexByte(t, '{')
		if i < 0 {
			parts = append(parts, tmplPart{lit: t})
			break
		}
		if i > 0 {
			parts = append(parts, tmplPart{lit: t[:i]})
		}
		j := strings.IndexByte(t[i:], '}')
		if j < 0 {
			return nil, optErr("hmac.template", "unclosed { in template")
		}
		name := t[i+1 : i+j]
		switch name {
		case "body", "timestamp", "method", "url":
		default:
			return nil, optErr("hmac.template", "unknown placeholder {%s} (use {body}, {timestamp}, {method}, {url})", name)
		}
		seen[name]++
		parts = append(parts, tmplPart{ph: name})
		t = t[i+j+1:]
	}
	if seen["body"] != 1 {
		return nil, optErr("hmac.template", "must contain {body} exactly once, otherwise the body is not protected")
	}
	return parts, nil
}

func newHMAC(o *HMACOptions, secrets []string, explicitTol, tol time.Duration) (*hmacScheme, error) {
	if o == nil {
		return nil, optErr("hmac", "kind hmac needs hmac options (at least hmac.header)")
	}
	opt := *o
	if strings.TrimSpace(opt.Header) == "" {
		return nil, optErr("hmac.header", "is required: the header that carries the signature")
	}
	s := &hmacScheme{}
	switch opt.Algorithm {
	case "", "sha256":
		opt.Algorithm = "sha256"
		s.newHash = sha256.New
	case "sha512":
		s.newHash = sha512.New
	default:
		return nil, optErr("hmac.algorithm", "unknown algorithm %q (sha256 or sha512)", opt.Algorithm)
	}
	switch opt.Encoding {
	case "":
		opt.Encoding = "hex"
	case "hex", "base64":
	default:
		return nil, optErr("hmac.encoding", "unknown encoding %q (hex or base64)", opt.Encoding)
	}
	switch opt.TimestampUnit {
	case "":
		opt.TimestampUnit = "s"
	case "s", "ms":
	default:
		return nil, optErr("hmac.timestamp_unit", "unknown unit %q (s or ms)", opt.TimestampUnit)
	}
	if opt.Template == "" {
		opt.Template = "{body}"
	}
	parts, err := parseTemplate(opt.Template)
	if err != nil {
		return nil, err
	}
	hasTS := strings.Contains(opt.Template, "{timestamp}")
	switch {
	case hasTS && opt.TimestampHeader == "":
		return nil, optErr("hmac.timestamp_header", "is required because the template signs {timestamp}")
	case !hasTS && opt.TimestampHeader != "":
		// A timestamp that is not signed can be rewritten by anyone, so
		// checking its freshness would only give false comfort.
		return nil, optErr("hmac.template", "must contain {timestamp} when hmac.timestamp_header is set, otherwise the timestamp is not signed")
	case opt.TimestampHeader == "" && explicitTol != 0:
		return nil, optErr("tolerance", "applies only with hmac.timestamp_header")
	}
	if opt.TimestampHeader == "" {
		tol = 0
	}
	s.opt, s.parts, s.tol = opt, parts, tol
	for _, sec := range secrets {
		s.secrets = append(s.secrets, []byte(sec))
	}
	return s, nil
}

func (s *hmacScheme) mac(key []byte, req *Request, ts string) []byte {
	m := hmac.New(s.newHash, key)
	for _, p := range s.parts {
		switch p.ph {
		case "":
			m.Write([]byte(p.lit))
		case "body":
			m.Write(req.Body)
		case "timestamp":
			m.Write([]byte(ts))
		case "method":
			m.Write([]byte(method(req)))
		case "url":
			m.Write([]byte(req.URL))
		}
	}
	return m.Sum(nil)
}

func (s *hmacScheme) decode(v string) ([]byte, bool) {
	if s.opt.Encoding == "base64" {
		b, err := base64.StdEncoding.DecodeString(v)
		return b, err == nil
	}
	b, err := hex.DecodeString(v)
	return b, err == nil
}

func (s *hmacScheme) Verify(req *Request, now time.Time) error {
	const sc = "hmac"
	v, ok, herr := header(req.Header, s.opt.Header, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", sc, s.opt.Header)
	}
	if !strings.HasPrefix(v, s.opt.Prefix) {
		return failf(reasonMalformed, "%s: %s does not start with the configured prefix %q", sc, s.opt.Header, s.opt.Prefix)
	}
	got, ok := s.decode(strings.TrimPrefix(v, s.opt.Prefix))
	if !ok {
		return failf(reasonMalformed, "%s: %s is not %s", sc, s.opt.Header, s.opt.Encoding)
	}
	var tsRaw string
	var signed time.Time
	if s.opt.TimestampHeader != "" {
		tsRaw, ok, herr = header(req.Header, s.opt.TimestampHeader, sc)
		if herr != nil {
			return herr
		}
		if !ok {
			return failf(ReasonMissing, "%s: %s header is missing", sc, s.opt.TimestampHeader)
		}
		n, err := strconv.ParseInt(tsRaw, 10, 64)
		if err != nil || n < 0 {
			return failf(reasonTimestamp, "%s: %s is not a unix time in %s", sc, s.opt.TimestampHeader, s.unitName())
		}
		if s.opt.TimestampUnit == "ms" {
			signed = time.UnixMilli(n)
		} else {
			signed = time.Unix(n, 0)
		}
	}
	matched := false
	for _, key := range s.secrets {
		if hmac.Equal(s.mac(key, req, tsRaw), got) {
			matched = true
		}
	}
	if !matched {
		return failf(reasonMismatch, "%s: %s matches no configured secret", sc, s.opt.Header)
	}
	if s.opt.TimestampHeader != "" {
		if e := checkWindow(sc, signed, now, s.tol); e != nil {
			return e
		}
	}
	return nil
}

func (s *hmacScheme) unitName() string {
	if s.opt.TimestampUnit == "ms" {
		return "milliseconds"
	}
	return "seconds"
}

func (s *hmacScheme) Sign(req *Request, now time.Time, _ string) (http.Header, error) {
	h := http.Header{}
	var ts string
	if s.opt.TimestampHeader != "" {
		if s.opt.TimestampUnit == "ms" {
			ts = strconv.FormatInt(now.UnixMilli(), 10)
		} else {
			ts = strconv.FormatInt(now.Unix(), 10)
		}
		h.Set(s.opt.TimestampHeader, ts)
	}
	mac := s.mac(s.secrets[0], req, ts)
	var enc string
	if s.opt.Encoding == "base64" {
		enc = base64.StdEncoding.EncodeToString(mac)
	} else {
		enc = hex.EncodeToString(mac)
	}
	h.Set(s.opt.Header, s.opt.Prefix+enc)
	return h, nil
}
