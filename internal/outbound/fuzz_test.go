package outbound

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// Paths come from payload data: whatever a path is, a URL built from it
// keeps base_url's scheme, host and path prefix, carries no query beyond
// the parameters given, and holds no dot segment a server would resolve.
func FuzzURL(f *testing.F) {
	for _, s := range []string{"/charges", "../../admin", "x?admin=1&y=2", "//evil.example/x", "@evil.example",
		"http://evil.example", `..\admin`, "%2e%2e/x", "..%2F..%2Fadmin", "a\r\nb", "/a/%zz", "/%2E", "evil:80/x", "",
		"//127.0.0.1:8081/x", "@127.0.0.1:8081/x", "127.0.0.1:8081/x", "http://169.254.169.254/", "/a/..", "/a/%2e%2E/b",
		"/a\\b", "/a\x00b", "/a%00b", "/a%0d%0aHost:%20evil", "/./x", "/%252e%252e/x", "/a;/../b", "/a/.%2e/b"} {
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
		if u.Scheme != "https" || u.Host != "api.example" || u.User != nil || !(strings.HasPrefix(u.EscapedPath(), "/v1/") || p == "" && u.EscapedPath() == "/v1") {
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

// Every address gets the same verdict as its IPv4-mapped IPv6 form, and
// every address inside a listed range is refused.
func FuzzCheckAddr(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "8.8.8.8", "169.254.169.254", "10.1.2.3", "100.64.0.1", "0.0.0.0", "255.255.255.255"} {
		a := netip.MustParseAddr(s).As4()
		f.Add(a[:])
	}
	for _, s := range []string{"::1", "fe80::1", "fc00::1", "2606:4700::1", "64:ff9b::7f00:1", "2002:7f00:1::1", "::ffff:127.0.0.1"} {
		a := netip.MustParseAddr(s).As16()
		f.Add(a[:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var addr netip.Addr
		switch len(b) {
		case 4:
			addr = netip.AddrFrom4([4]byte(b))
		case 16:
			addr = netip.AddrFrom16([16]byte(b))
		default:
			return
		}
		rule := CheckAddr(addr)
		if addr.Is4() {
			mapped := netip.AddrFrom16(addr.As16())
			if (CheckAddr(mapped) == "") != (rule == "") {
				t.Fatalf("%s: %q, but %s: %q", addr, rule, mapped, CheckAddr(mapped))
			}
		}
		for _, r := range blocked {
			if r.prefix.Contains(addr) && rule == "" {
				t.Fatalf("%s is in %s and passed", addr, r.prefix)
			}
		}
		if addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() || addr.IsUnspecified() || addr.IsMulticast() {
			if rule == "" {
				t.Fatalf("%s passed", addr)
			}
		}
	})
}
