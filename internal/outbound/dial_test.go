package outbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Every non-public range is refused in each of its spellings, with the
// rule that names it; public addresses pass in theirs.
func TestCheckAddr(t *testing.T) {
	for _, tc := range []struct{ addr, rule string }{
		{"127.0.0.1", "loopback (127.0.0.0/8)"},
		{"127.255.255.254", "loopback"},
		{"::1", "loopback (::1/128)"},
		{"::ffff:127.0.0.1", "loopback (127.0.0.0/8) as IPv4-mapped IPv6"},
		{"::ffff:7f00:1", "loopback (127.0.0.0/8) as IPv4-mapped IPv6"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified (this network)"},
		{"::", "unspecified (::/128)"},
		{"::ffff:0.0.0.0", "unspecified"},
		{"10.0.0.1", "private (10.0.0.0/8)"},
		{"10.255.255.255", "private"},
		{"172.16.0.1", "private (172.16.0.0/12)"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private (192.168.0.0/16)"},
		{"::ffff:192.168.1.1", "private (192.168.0.0/16) as IPv4-mapped IPv6"},
		{"::ffff:10.0.0.1", "private"},
		{"fc00::1", "unique local (private) (fc00::/7)"},
		{"fd12:3456:789a::1", "unique local"},
		{"169.254.169.254", "cloud metadata (169.254.169.254/32)"},
		{"::ffff:169.254.169.254", "cloud metadata (169.254.169.254/32) as IPv4-mapped IPv6"},
		{"fd00:ec2::254", "cloud metadata (fd00:ec2::254/128)"},
		{"169.254.0.1", "link-local (169.254.0.0/16)"},
		{"fe80::1", "link-local (fe80::/10)"},
		{"fe80::1%eth0", "link-local (fe80::/10)"},
		{"febf::1", "link-local"},
		{"fec0::1", "site-local"},
		{"100.64.0.1", "shared (carrier-grade NAT) (100.64.0.0/10)"},
		{"100.127.255.255", "carrier-grade NAT"},
		{"192.0.0.8", "IETF protocol assignment"},
		{"192.0.2.1", "documentation"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"2001:db8::1", "documentation"},
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"192.88.99.1", "6to4 relay anycast"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"240.0.0.1", "reserved"},
		{"255.255.255.255", "reserved"},
		{"::127.0.0.1", "IPv4-compatible"},
		{"64:ff9b::7f00:1", "loopback (127.0.0.0/8) through NAT64"},
		{"64:ff9b::a9fe:a9fe", "cloud metadata (169.254.169.254/32) through NAT64"},
		{"64:ff9b:1::1", "local-use NAT64"},
		{"2002:7f00:1::1", "loopback (127.0.0.0/8) through 6to4"},
		{"2002:c0a8:101::1", "private (192.168.0.0/16) through 6to4"},
		{"2001::1", "IETF protocol assignment"},
		{"100::1", "discard-only"},
	} {
		if got := CheckAddr(netip.MustParseAddr(tc.addr)); !strings.Contains(got, tc.rule) {
			t.Errorf("CheckAddr(%s) = %q, want %q", tc.addr, got, tc.rule)
		}
	}
	for _, a := range []string{
		"8.8.8.8", "1.1.1.1", "93.184.216.34", "100.63.255.255", "100.128.0.0", "172.15.255.255", "172.32.0.0",
		"169.253.255.255", "11.0.0.1", "223.255.255.255", "::ffff:8.8.8.8", "2606:4700:4700::1111",
		"2a00:1450:4001:81c::200e", "64:ff9b::808:808", "2002:808:808::1",
	} {
		if got := CheckAddr(netip.MustParseAddr(a)); got != "" {
			t.Errorf("CheckAddr(%s) = %q, want public", a, got)
		}
	}
	if CheckAddr(netip.Addr{}) == "" {
		t.Error("the zero address passed")
	}
}

// fakeResolver answers from a table, and counts lookups.
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr // per name, one answer per lookup (the last repeats)
	lookups int
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	as, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	i := min(r.lookups, len(as)-1)
	r.lookups++
	return as[i], nil
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// counting is a listener that counts the requests that reach it.
func counting(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { n.Add(1) }))
	t.Cleanup(s.Close)
	return s, &n
}

// A guarded client refuses a listener on loopback however its address is
// written or resolved, with an error that names the address and the rule;
// the same listener answers an unguarded client, so the refusal is the
// guard's.
func TestGuardRefusesLoopback(t *testing.T) {
	srv, reached := counting(t)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	res := &fakeResolver{answers: map[string][][]netip.Addr{
		"api.example.test":    {addrs("127.0.0.1")},
		"mixed.example.test":  {addrs("10.0.0.7", "127.0.0.1")},
		"mapped.example.test": {addrs("::ffff:127.0.0.1")},
	}}
	guarded := Guard(nil, GuardOptions{Resolver: res})
	// Without a resolver of the caller's, net's own dialler resolves and
	// the check runs in its Control hook.
	system := Guard(nil, GuardOptions{})
	for _, tc := range []struct{ host, want string }{
		{"127.0.0.1", "connection to 127.0.0.1 refused: 127.0.0.1 is not a public address (loopback (127.0.0.0/8))"},
		{"[::ffff:127.0.0.1]", "as IPv4-mapped IPv6"},
		{"api.example.test", "connection to api.example.test (resolved to 127.0.0.1) refused"},
		{"mixed.example.test", "mixed.example.test (resolved to 10.0.0.7) refused: 10.0.0.7 is not a public address (private"},
		{"mapped.example.test", "as IPv4-mapped IPv6"},
		{"localhost", "loopback"}, // the system resolver
	} {
		c := guarded
		if tc.host == "localhost" {
			c = system
		}
		resp, err := c.Get(fmt.Sprintf("http://%s:%d/x?token=s3cret", tc.host, port))
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: answered %d", tc.host, resp.StatusCode)
			continue
		}
		ae := AsAddressError(err)
		if ae == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "allow_private_networks") {
			t.Errorf("%s: %v, want an AddressError with %q", tc.host, err, tc.want)
		}
	}
	for _, host := range []string{"127.0.0.1", "[::ffff:127.0.0.1]", "localhost"} {
		_, err := system.Get(fmt.Sprintf("http://%s:%d/x", host, port))
		if ae := AsAddressError(err); ae == nil || ae.Host != strings.Trim(host, "[]") || !ae.Addr.IsLoopback() {
			t.Errorf("%s through net's dialler: %v (%+v)", host, err, ae)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("the loopback listener was reached %d times", n)
	}
	resp, err := NoRedirects(nil).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if reached.Load() != 1 {
		t.Fatal("the listener is not reachable unguarded: the test proves nothing")
	}
}

// DNS rebinding: a name that answers a public address to one lookup and
// loopback to the next. The guard resolves once per connection and dials
// exactly the address it checked, so the second answer can never be the
// one connected to; a name that answers loopback first is never dialled.
func TestGuardDialsTheAddressItChecked(t *testing.T) {
	var mu sync.Mutex
	var dialled []string
	errNoNet := errors.New("test: no network")
	tr := &http.Transport{DialContext: func(_ context.Context, _, addr string) (net.Conn, error) {
		mu.Lock()
		dialled = append(dialled, addr)
		mu.Unlock()
		return nil, errNoNet // never reaches the internet
	}}
	res := &fakeResolver{answers: map[string][][]netip.Addr{
		"rebind.example.test": {addrs("93.184.216.34"), addrs("127.0.0.1")},
	}}
	c := Guard(&http.Client{Transport: tr}, GuardOptions{Resolver: res})
	_, err := c.Get("http://rebind.example.test:8080/x")
	if !errors.Is(err, errNoNet) || len(dialled) != 1 || dialled[0] != "93.184.216.34:8080" || res.lookups != 1 {
		t.Fatalf("first: %v, dialled %q after %d lookups; want only the checked public address", err, dialled, res.lookups)
	}
	// The name now answers loopback: refused, nothing dialled.
	_, err = c.Get("http://rebind.example.test:8080/x")
	if !IsAddressError(err) || len(dialled) != 1 || res.lookups != 2 {
		t.Fatalf("second: %v, dialled %q after %d lookups", err, dialled, res.lookups)
	}
	// Several answers: the non-public ones are skipped, the public one
	// dialled; the transport's own dialler gets the address, not the name.
	res.answers["several.example.test"] = [][]netip.Addr{addrs("127.0.0.1", "169.254.169.254", "2606:4700:4700::1111")}
	res.lookups = 0
	dialled = nil
	_, err = c.Get("http://several.example.test/x")
	if !errors.Is(err, errNoNet) || len(dialled) != 1 || dialled[0] != "[2606:4700:4700::1111]:80" {
		t.Fatalf("several: %v, dialled %q", err, dialled)
	}
	// The check does not depend on the transport's dialler: the guard's
	// own dialler checks the socket's address again (Control), for a
	// dial that reaches it with a numeric loopback address.
	srv, reached := counting(t)
	if _, err := checkedDialer().DialContext(context.Background(), "tcp", srv.Listener.Addr().String()); !IsAddressError(err) {
		t.Fatalf("the dialer's Control hook let %s through: %v", srv.Listener.Addr(), err)
	}
	if reached.Load() != 0 {
		t.Fatal("the listener was reached")
	}
}

// Through an HTTP proxy the guard connects to the proxy (the operator's
// own, on any address), refuses a URL whose host is a non-public literal
// before anything is sent, and leaves names to the proxy.
func TestGuardThroughAProxy(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	proxy := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.String())
		mu.Unlock()
	}))
	defer proxy.Close()
	pu, _ := url.Parse(proxy.URL)
	c := Guard(&http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}, GuardOptions{})
	resp, err := c.Get("http://api.example.test/v1/x")
	if err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	resp.Body.Close()
	for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://127.0.0.1:9/x", "http://[::1]/x", "http://10.1.2.3/x"} {
		if _, err := c.Get(u); !IsAddressError(err) {
			t.Errorf("%s through the proxy: %v, want an AddressError", u, err)
		}
	}
	if len(asked) != 1 || asked[0] != "http://api.example.test/v1/x" {
		t.Fatalf("the proxy was asked for %q", asked)
	}
}

// A guarded client never follows a redirect, and leaves the client it was
// made from as it was; a RoundTripper the guard cannot see into is the
// embedding program's own network and is used as given.
func TestGuardKeepsTheClientAndRedirects(t *testing.T) {
	second, reached := counting(t)
	first := httptest.NewServer(http.RedirectHandler(second.URL+"/stolen", http.StatusFound))
	defer first.Close()
	res := &fakeResolver{answers: map[string][][]netip.Addr{"public.example.test": {addrs("93.184.216.34")}}}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		// Stands in for the internet: every checked public address reaches
		// the first listener.
		return (&net.Dialer{}).DialContext(ctx, network, first.Listener.Addr().String())
	}}
	base := &http.Client{Transport: tr}
	resp, err := Guard(base, GuardOptions{Resolver: res}).Get("http://public.example.test/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || reached.Load() != 0 {
		t.Fatalf("answer %d, second listener reached %d times", resp.StatusCode, reached.Load())
	}
	if base.Transport != tr || base.CheckRedirect != nil {
		t.Fatal("the base client was changed")
	}
	type custom struct{ http.RoundTripper }
	rt := custom{http.DefaultTransport}
	if g := Guard(&http.Client{Transport: rt}, GuardOptions{}); g.Transport != rt {
		t.Fatal("a custom RoundTripper was replaced")
	}
}
