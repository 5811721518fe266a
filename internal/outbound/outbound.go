// Package outbound holds what every HTTP request hookledger makes to
// another system has in common (effect deliveries, lookups, refetches and
// notifications): a redirect is an answer and never followed, a URL is
// built from a configured base URL and a relative path that cannot leave
// it, header values cannot smuggle other headers (and those built from
// stored data are percent-encoded so that any header can carry them,
// headervalue.go), a connection reaches a
// public address only unless the configuration allows private networks
// (checked on the address dialled, dial.go), and errors name URLs without
// credentials or query strings, so that no error text stored on an effect,
// an attempt, an audit row or a log line carries a secret.
package outbound

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// NoRedirects returns a copy of c (http.DefaultClient when nil) that never
// follows a redirect: the 3xx comes back as the answer. Following one would
// send the request, its body and its credentials (Authorization, API-key
// headers) to an address nobody configured. The copy shares c's transport,
// so connections are still pooled; c itself is left as it was.
func NoRedirects(c *http.Client) *http.Client {
	if c == nil {
		c = http.DefaultClient
	}
	cp := *c
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// RequestError is a request refused before anything was sent because of
// what it would have asked for; sending it again cannot succeed, so callers
// treat it as permanent.
type RequestError struct {
	// Field names what was refused: "path", "header" or "base_url".
	Field string
	Msg   string
}

func (e *RequestError) Error() string { return e.Msg }

// IsRequestError reports whether err is, or wraps, a RequestError.
func IsRequestError(err error) bool {
	var re *RequestError
	return errors.As(err, &re)
}

// maxQuoted bounds how much of a refused value an error repeats.
const maxQuoted = 200

// quote renders a refused value for an error message: Go-quoted, so a CR,
// LF or other control character cannot forge a log line, and cut short.
func quote(s string) string {
	if len(s) > maxQuoted {
		s = s[:maxQuoted] + "…"
	}
	return fmt.Sprintf("%q", s)
}

func pathError(p, why string) error {
	return &RequestError{Field: "path", Msg: fmt.Sprintf("path %s %s", quote(p), why)}
}

// CheckPath refuses a path that could reach anything other than a resource
// below the base URL it is joined to. Paths are built from payload data, so
// a value such as "../../admin" or "x?admin=1" must not climb out of the
// base URL's path, add query parameters, or name another host. It refuses:
//
//   - control characters (CR and LF would split the request);
//   - "?" and "#": query parameters belong in the request's query map,
//     whose keys and values are escaped;
//   - "." and ".." segments, also percent-encoded (%2e) or between encoded
//     slashes (%2F) or backslashes, which servers and proxies resolve;
//   - backslashes, which some servers read as slashes;
//   - a leading "//" or a "://" anywhere, which name another host;
//   - a relative first segment with ":" or "@" ("evil.example:80",
//     "user@host"), which would read as a scheme or as credentials.
//
// A path escaped with url.PathEscape (the CEL function pathEscape) passes,
// except for a value that is itself "." or "..".
func CheckPath(p string) error {
	if !utf8.ValidString(p) {
		return pathError(p, "is not valid UTF-8")
	}
	for _, r := range p {
		if unicode.IsControl(r) {
			return pathError(p, "contains a control character (such as CR or LF)")
		}
	}
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return pathError(p, fmt.Sprintf("contains %q: a path carries no query string or fragment; pass query parameters in query:, which escapes them", p[i]))
	}
	if strings.Contains(p, `\`) {
		return pathError(p, "contains a backslash, which some servers read as a slash")
	}
	if strings.HasPrefix(p, "//") {
		return pathError(p, "begins with //, which names another host")
	}
	if strings.Contains(p, "://") {
		return pathError(p, "contains a URL (://); escape a value from the payload with pathEscape")
	}
	if !strings.HasPrefix(p, "/") {
		first, _, _ := strings.Cut(p, "/")
		if strings.ContainsAny(first, ":@") {
			return pathError(p, "begins with a segment that reads as a scheme or as credentials and a host; start the path with /")
		}
	}
	for _, seg := range segmentSplitter.Split(p, -1) {
		if s := dotDecoder.Replace(seg); s == "." || s == ".." {
			return pathError(p, "has a dot segment (. or ..), which moves the request to another resource, above base_url's path if repeated")
		}
	}
	return nil
}

// segmentSplitter cuts a path where a server may see a segment boundary:
// at a slash, or at one percent-encoded (a proxy or framework decoding
// %2F before routing turns "..%2F..%2Fadmin" into a climb).
var segmentSplitter = regexp.MustCompile(`(?i)/|%2f|%5c`)

var dotDecoder = strings.NewReplacer("%2e", ".", "%2E", ".")

// CheckHeader refuses a header that the transport would reject (an invalid
// name), or a value with a control character: CR and LF would start
// another header or end the request's head. HTAB is allowed, as in HTTP.
func CheckHeader(name, value string) error {
	if !ValidHeaderName(name) {
		return &RequestError{Field: "header", Msg: fmt.Sprintf("header name %s is not an HTTP token", quote(name))}
	}
	if err := CheckHeaderValue(value); err != nil {
		return &RequestError{Field: "header", Msg: fmt.Sprintf("header %s: %v", name, err)}
	}
	return nil
}

// CheckHeaderValue reports a control character other than HTAB in v.
func CheckHeaderValue(v string) error {
	for _, r := range v {
		if r != '\t' && unicode.IsControl(r) {
			return fmt.Errorf("value contains a control character (such as CR or LF), which would start another header")
		}
	}
	return nil
}

// ValidHeaderName reports whether name is an HTTP token (RFC 9110 5.1).
func ValidHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// URL joins base and the relative path p (checked by CheckPath) and adds
// query after base's own query string, each key and value escaped. The
// result has base's scheme and host and a path below base's path; base's
// userinfo and fragment are never part of it.
func URL(base, p string, query url.Values) (*url.URL, error) {
	b, err := url.Parse(base)
	if err != nil || b.Scheme == "" || b.Host == "" {
		return nil, &RequestError{Field: "base_url", Msg: fmt.Sprintf("base_url %s is not an absolute URL", RedactURL(base))}
	}
	if err := CheckPath(p); err != nil {
		return nil, err
	}
	// The path stays in its escaped form: pathEscape("a/b") must reach the
	// destination as one segment a%2Fb, not as two.
	joined := strings.TrimRight(b.EscapedPath(), "/") + "/" + strings.TrimLeft(p, "/")
	if p == "" {
		// No path: the URL as configured, without a slash it did not have
		// (an endpoint's url is the whole address).
		joined = b.EscapedPath()
	}
	ref, err := url.Parse(joined)
	if err != nil {
		return nil, pathError(p, "is not a valid URL path: "+strings.TrimPrefix(err.Error(), "parse "))
	}
	if ref.Scheme != "" || ref.Host != "" || ref.User != nil || ref.RawQuery != "" || ref.Fragment != "" {
		return nil, pathError(p, "does not stay a path below base_url")
	}
	u := &url.URL{Scheme: b.Scheme, Host: b.Host, Path: ref.Path, RawPath: ref.RawPath, RawQuery: b.RawQuery}
	if len(query) > 0 {
		if u.RawQuery != "" {
			u.RawQuery += "&"
		}
		u.RawQuery += query.Encode()
	}
	return u, nil
}

// RedactURL returns s without userinfo, query string or fragment: a URL
// fit for an error message, a log line or a stored reason. Query strings
// often carry tokens (api_key=..., sig=...), and userinfo is a password.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err == nil {
		u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
		return u.String()
	}
	// Unparseable: cut what could be secret by hand.
	if i := strings.IndexAny(s, "?#"); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, "://"); i >= 0 {
		if at := strings.LastIndexByte(s[i+3:], '@'); at >= 0 {
			s = s[:i+3] + s[i+3+at+1:]
		}
	}
	return s
}

// urlInText finds URLs in free text such as a transport error: a scheme,
// "://", then everything up to a space or a quote.
var urlInText = regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s"'<>]+`)

// RedactText applies RedactURL to every URL in s.
func RedactText(s string) string {
	return urlInText.ReplaceAllStringFunc(s, RedactURL)
}

// RedactError returns err with every URL in its text redacted (nil for
// nil). Go's transport errors (*url.Error) name the full URL, query string
// included; this is the boundary they cross before reaching any reason,
// attempt, audit row, notification or log line. The result unwraps to the
// cause below the *url.Error (a timeout, a refused connection), never to
// the error that holds the URL.
func RedactError(err error) error {
	if err == nil {
		return nil
	}
	cause := err
	var ue *url.Error
	if errors.As(err, &ue) {
		cause = ue.Err
	}
	return &redactedError{msg: RedactText(err.Error()), cause: cause}
}

type redactedError struct {
	msg   string
	cause error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.cause }
