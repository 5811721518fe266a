package authlimit

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
)

var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

func TestLockPerAddressForTheRestOfTheWindow(t *testing.T) {
	clk := clock.NewFake(t0)
	l := New(Options{Now: clk.Now})
	for i := range DefaultTries {
		if w := l.Wait("192.0.2.1"); w != 0 {
			t.Fatalf("before wrong token %d: wait %s, want none", i+1, w)
		}
		locked := l.Fail("192.0.2.1")
		if last := i == DefaultTries-1; last != (locked > 0) {
			t.Fatalf("wrong token %d: locked for %s", i+1, locked)
		}
		clk.Advance(time.Second)
	}
	// Ten tries took 10 s of the minute: 50 s are left.
	if w := l.Wait("192.0.2.1"); w != 50*time.Second {
		t.Fatalf("after the tenth wrong token: wait %s, want 50s", w)
	}
	if w := l.Wait("192.0.2.2"); w != 0 {
		t.Fatalf("another address: wait %s, want none", w)
	}
	clk.Advance(50*time.Second - time.Millisecond)
	if w := l.Wait("192.0.2.1"); w != time.Millisecond || RetryAfter(w) != "1" {
		t.Fatalf("a millisecond before the window ends: wait %s (Retry-After %s), want 1ms (1)", w, RetryAfter(w))
	}
	clk.Advance(time.Millisecond)
	if w := l.Wait("192.0.2.1"); w != 0 {
		t.Fatalf("once the window has passed: wait %s, want none", w)
	}
	// A new window, with all its tries.
	for range DefaultTries - 1 {
		l.Fail("192.0.2.1")
	}
	if w := l.Wait("192.0.2.1"); w != 0 {
		t.Fatalf("nine wrong tokens into a new window: wait %s, want none", w)
	}
}

func TestRetryAfterInWholeSeconds(t *testing.T) {
	for d, want := range map[time.Duration]string{
		time.Nanosecond: "1", time.Second: "1", time.Second + time.Nanosecond: "2", 59500 * time.Millisecond: "60", time.Minute: "60",
	} {
		if got := RetryAfter(d); got != want {
			t.Errorf("RetryAfter(%s) = %s, want %s", d, got, want)
		}
	}
}

// An IPv6 client is counted by its /64: its other addresses in the block
// buy no new tries, a neighbouring block is not affected.
func TestIPv6CountedByPrefix(t *testing.T) {
	l := New(Options{Now: clock.NewFake(t0).Now, Tries: 3})
	for i := range 3 {
		l.Fail(fmt.Sprintf("2001:db8:1:2::%x", i+1))
	}
	if l.Wait("2001:db8:1:2:ffff::9") == 0 {
		t.Error("another address in the same /64 is not locked")
	}
	if l.Wait("2001:db8:1:3::1") != 0 {
		t.Error("an address in the next /64 is locked")
	}
	if l.Wait("::ffff:192.0.2.1") != 0 {
		t.Error("an IPv4-mapped address is locked")
	}
}

// However many addresses guess, the limiter keeps at most MaxClients:
// first it forgets the windows that have passed, then the oldest.
func TestMemoryIsBounded(t *testing.T) {
	clk := clock.NewFake(t0)
	l := New(Options{Now: clk.Now, Tries: 2, MaxClients: 100})
	for i := range 1000 {
		l.Fail(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String())
		clk.Advance(time.Millisecond)
		if n := len(l.clients); n > 100 {
			t.Fatalf("%d addresses kept after %d, want at most 100", n, i+1)
		}
	}
	// The newest are kept: the last address is locked after its second.
	last := netip.AddrFrom4([4]byte{10, 0, 3, 231}).String()
	l.Fail(last)
	if l.Wait(last) == 0 {
		t.Fatal("the newest address lost its count")
	}
	clk.Advance(defaultWindow)
	l.Fail("192.0.2.9")
	if n := len(l.clients); n != 1 {
		t.Fatalf("after every window passed: %d addresses kept, want 1", n)
	}
}

func TestClientBehindTrustedProxies(t *testing.T) {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}
	l := New(Options{TrustedProxies: proxies})
	for _, c := range []struct {
		peer string
		hdr  map[string]string
		want string
	}{
		{"192.0.2.1:5000", nil, "192.0.2.1"},
		// An untrusted peer names any address it likes: ignored.
		{"192.0.2.1:5000", map[string]string{"X-Forwarded-For": "198.51.100.7"}, "192.0.2.1"},
		{"192.0.2.1:5000", map[string]string{"Forwarded": "for=198.51.100.7"}, "192.0.2.1"},
		{"[::ffff:192.0.2.1]:5000", nil, "192.0.2.1"},
		// A trusted proxy without the header: the proxy.
		{"10.0.0.5:5000", nil, "10.0.0.5"},
		{"10.0.0.5:5000", map[string]string{"X-Forwarded-For": "198.51.100.7"}, "198.51.100.7"},
		// A client's own X-Forwarded-For entries come first: read from
		// the right, past the trusted proxies.
		{"10.0.0.5:5000", map[string]string{"X-Forwarded-For": "203.0.113.66, 198.51.100.7, 10.1.1.1"}, "198.51.100.7"},
		{"10.0.0.5:5000", map[string]string{"X-Forwarded-For": "10.1.1.1, 10.2.2.2"}, "10.1.1.1"},
		{"10.0.0.5:5000", map[string]string{"Forwarded": `for="[2001:db8:cafe::17]:4711";proto=https, for=10.1.1.1`}, "2001:db8:cafe::17"},
		{"10.0.0.5:5000", map[string]string{"Forwarded": `For=198.51.100.7:80`, "X-Forwarded-For": "203.0.113.66"}, "198.51.100.7"},
		{"[2001:db8:ffff::1]:5000", map[string]string{"X-Forwarded-For": "2001:db8:cafe::17"}, "2001:db8:cafe::17"},
		// A hop that cannot be read hides who is behind it.
		{"10.0.0.5:5000", map[string]string{"Forwarded": "for=_hidden, for=10.1.1.1"}, "10.1.1.1"},
		{"10.0.0.5:5000", map[string]string{"X-Forwarded-For": "unknown"}, "10.0.0.5"},
		{"pipe", nil, "unknown"},
	} {
		r := httptest.NewRequest("GET", "/api/v1/events", nil)
		r.RemoteAddr = c.peer
		for k, v := range c.hdr {
			r.Header.Set(k, v)
		}
		if got := l.Client(r); got != c.want {
			t.Errorf("peer %s %v: client %q, want %q", c.peer, c.hdr, got, c.want)
		}
	}
}

// The forwarding headers come from the network: whatever they hold, the
// client is the peer or an address written in them, never a panic.
func FuzzClient(f *testing.F) {
	f.Add("for=198.51.100.7", "203.0.113.66, 10.1.1.1")
	f.Add(`for="[2001:db8::1]:80";by=x, For=unknown`, "")
	f.Add("", "[::1], ,, 10.0.0.1:80")
	l := New(Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	f.Fuzz(func(t *testing.T, fwd, xff string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.5:5000"
		r.Header = http.Header{}
		if fwd != "" {
			r.Header.Set("Forwarded", fwd)
		}
		if xff != "" {
			r.Header.Set("X-Forwarded-For", xff)
		}
		got := l.Client(r)
		a, err := netip.ParseAddr(got)
		if err != nil {
			t.Fatalf("client %q is no address", got)
		}
		if got != "10.0.0.5" && !namedIn(r.Header, a) {
			t.Fatalf("client %s is written in neither header (%q, %q)", got, fwd, xff)
		}
	})
}

// namedIn reports whether a is one of the hops the headers name.
func namedIn(h http.Header, a netip.Addr) bool {
	for _, hop := range forwardedFor(h) {
		if b, ok := parseHop(hop); ok && b == a {
			return true
		}
	}
	return false
}
