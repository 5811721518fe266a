package receive

import (
	"net/http"
	"strings"
	"testing"
)

// FuzzForwarded: the forwarding headers of a trusted proxy are parsed
// without panicking, and what comes out is only what the headers said: a
// lower-case scheme and a host with no spaces around it.
func FuzzForwarded(f *testing.F) {
	for _, seed := range [][2]string{
		{`for=192.0.2.60;proto=https;host="hooks.example.com", for=10.0.0.1`, ""},
		{"", "https, http"},
		{`proto=HTTP;host=`, ""},
		{`;;=;"`, "\x00"},
	} {
		f.Add(seed[0], seed[1], "hooks.example.com")
	}
	f.Fuzz(func(t *testing.T, fwd, xproto, xhost string) {
		h := http.Header{}
		if fwd != "" {
			h.Set("Forwarded", fwd)
		}
		h.Set("X-Forwarded-Proto", xproto)
		h.Set("X-Forwarded-Host", xhost)
		proto, host := forwarded(h)
		if proto != strings.ToLower(proto) {
			t.Fatalf("scheme %q is not lower case", proto)
		}
		if host != strings.TrimSpace(host) && fwd == "" {
			t.Fatalf("host %q keeps surrounding spaces", host)
		}
	})
}
