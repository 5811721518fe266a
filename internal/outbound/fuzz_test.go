package outbound

import (
	"net/url"
	"strings"
	"testing"
)

// Paths come from payload data: whatever a path is, a URL built from it
// keeps base_url's scheme, host and path prefix, carries no query beyond
// the parameters given, and holds no dot segment a server would resolve.
func FuzzURL(f *testing.F) {
	for _, s := range []string{"/charges", "../../admin", "x?admin=1&y=2", "//evil.example/x", "@evil.example",
		"http://evil.example", `..\admin`, "%2e%2e/x", "..%2F..%2Fadmin", "a\r\nb", "/a/%zz", "/%2E", "evil:80/x", ""} {
		f.Add(s)
	}
	const base = "https://api.example/v1"
	f.Fuzz(func(t *testing.T, p string) {
		u, err := URL(base, p, url.Values{"k": {p}})
		if err != nil {
			if !IsRequestError(err) {
				t.Fatalf("URL(%q): %v is not a RequestError", p, err)
			}
			return
		}
		if u.Scheme != "https" || u.Host != "api.example" || u.User != nil || !strings.HasPrefix(u.EscapedPath(), "/v1/") {
			t.Fatalf("URL(%q) = %s left base_url", p, u)
		}
		if q := u.Query(); len(q) != 1 || q.Get("k") != p {
			t.Fatalf("URL(%q) = %s: query %v", p, u, q)
		}
		for _, seg := range segmentSplitter.Split(u.EscapedPath(), -1) {
			if s := dotDecoder.Replace(seg); s == "." || s == ".." {
				t.Fatalf("URL(%q) = %s has a dot segment", p, u)
			}
		}
		if strings.ContainsAny(u.String(), "\r\n\\") {
			t.Fatalf("URL(%q) = %q holds CR, LF or a backslash", p, u)
		}
	})
}
