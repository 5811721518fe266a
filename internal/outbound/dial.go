package outbound

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"syscall"
	"time"
)

// Outbound calls go where configuration and payload data say. A base_url
// that names an internal service, or a DNS name that answers with one
// (set up once, or changed between two lookups: DNS rebinding), would turn
// hookledger into a way into the network it runs in: the cloud metadata
// service at 169.254.169.254 hands out credentials, an admin port on
// loopback trusts its callers. So the transport checks every address it
// is about to connect to, after DNS resolution, and refuses those that are
// not public unless the destination sets allow_private_networks.

// AddressError is a connection refused because the address it would reach
// is not public. Connecting again reaches the same address, so callers
// treat it as permanent.
type AddressError struct {
	// Host is the name the request asked for (or the address itself).
	Host string
	// Addr is the address the name resolved to and the dial would reach.
	Addr netip.Addr
	// Rule names the range Addr is in, such as "loopback (127.0.0.0/8)".
	Rule string
}

func (e *AddressError) Error() string {
	name := e.Addr.String()
	if e.Host != "" && e.Host != name {
		name = fmt.Sprintf("%s (resolved to %s)", e.Host, e.Addr)
	}
	return fmt.Sprintf("connection to %s refused: %s is not a public address (%s), and outbound calls reach public addresses only unless allow_private_networks is set", name, e.Addr, e.Rule)
}

// IsAddressError reports whether err is, or wraps, an AddressError.
func IsAddressError(err error) bool {
	var ae *AddressError
	return errors.As(err, &ae)
}

// AsAddressError returns the AddressError in err's chain, or nil.
func AsAddressError(err error) *AddressError {
	var ae *AddressError
	if errors.As(err, &ae) {
		return ae
	}
	return nil
}

type blockedRange struct {
	prefix netip.Prefix
	rule   string
}

func ranges(rs ...string) []blockedRange {
	out := make([]blockedRange, 0, len(rs)/2)
	for i := 0; i < len(rs); i += 2 {
		out = append(out, blockedRange{netip.MustParsePrefix(rs[i]), rs[i+1] + " (" + rs[i] + ")"})
	}
	return out
}

// blocked lists the ranges that are not the public internet (the IANA
// special-purpose registries for IPv4 and IPv6). More specific prefixes
// come first, so an address is named by its most telling rule (the
// metadata address before the rest of link-local).
var blocked = ranges(
	"169.254.169.254/32", "cloud metadata",
	"0.0.0.0/8", "unspecified (this network)",
	"10.0.0.0/8", "private",
	"100.64.0.0/10", "shared (carrier-grade NAT)",
	"127.0.0.0/8", "loopback",
	"169.254.0.0/16", "link-local",
	"172.16.0.0/12", "private",
	"192.0.0.0/24", "IETF protocol assignment",
	"192.0.2.0/24", "documentation",
	"192.88.99.0/24", "6to4 relay anycast",
	"192.168.0.0/16", "private",
	"198.18.0.0/15", "benchmarking",
	"198.51.100.0/24", "documentation",
	"203.0.113.0/24", "documentation",
	"224.0.0.0/4", "multicast",
	"240.0.0.0/4", "reserved",
	"::/128", "unspecified",
	"::1/128", "loopback",
	"fd00:ec2::254/128", "cloud metadata",
	"::/96", "IPv4-compatible (deprecated)",
	"64:ff9b:1::/48", "local-use NAT64",
	"100::/64", "discard-only",
	"2001::/23", "IETF protocol assignment",
	"2001:db8::/32", "documentation",
	"3fff::/20", "documentation",
	"5f00::/16", "segment routing",
	"fc00::/7", "unique local (private)",
	"fe80::/10", "link-local",
	"fec0::/10", "site-local (deprecated)",
	"ff00::/8", "multicast",
)

// embedded are IPv6 ranges that carry an IPv4 address in their low or
// middle bits and reach it through a translator or tunnel: the IPv4
// address decides.
var (
	nat64   = netip.MustParsePrefix("64:ff9b::/96")
	sixTo4  = netip.MustParsePrefix("2002::/16")
	mapped4 = netip.MustParsePrefix("::ffff:0:0/96")
)

// CheckAddr returns the rule that keeps a connection from addr, or "" for
// a public address. An IPv4-mapped IPv6 address (::ffff:127.0.0.1) is
// judged as the IPv4 address it is; NAT64 (64:ff9b::/96) and 6to4
// (2002::/16) addresses as the IPv4 address they lead to; a zone
// (fe80::1%eth0) is ignored.
func CheckAddr(addr netip.Addr) string {
	if !addr.IsValid() {
		return "invalid"
	}
	addr = addr.WithZone("") // a zoned address matches no prefix
	if mapped4.Contains(addr) {
		if r := CheckAddr(addr.Unmap()); r != "" {
			return r + " as IPv4-mapped IPv6"
		}
		return ""
	}
	b := addr.As16()
	switch {
	case addr.Is6() && nat64.Contains(addr):
		if r := CheckAddr(netip.AddrFrom4([4]byte(b[12:16]))); r != "" {
			return r + " through NAT64 (64:ff9b::/96)"
		}
		return ""
	case addr.Is6() && sixTo4.Contains(addr):
		if r := CheckAddr(netip.AddrFrom4([4]byte(b[2:6]))); r != "" {
			return r + " through 6to4 (2002::/16)"
		}
		return ""
	}
	for _, r := range blocked {
		if r.prefix.Contains(addr) {
			return r.rule
		}
	}
	return ""
}

// Resolver turns a host name into addresses (*net.Resolver is one).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// GuardOptions tune Guard; zero values take defaults.
type GuardOptions struct {
	// Resolver resolves host names; nil leaves resolution to net's
	// dialler, which checks each address it resolved just before
	// connecting to it. A resolver given here (a test's, or a program's
	// own DNS) answers once per connection, and the address it answers is
	// the one checked and the one dialled: nothing is resolved twice, so a
	// second, different answer cannot slip past.
	Resolver Resolver
}

// Guard returns a copy of c whose connections reach public addresses only
// (CheckAddr), and that never follows a redirect (NoRedirects). Its
// transport is a clone of c's, so c itself is left as it was, and its
// pool is its own: a connection opened for a destination that allows
// private networks is never reused for one that does not.
//
// The check is made on the address about to be dialled, after DNS
// resolution, so a name that resolves (or starts to resolve) to an
// internal address is refused however it is spelled. A transport that
// dials its own way (its DialContext) is given the checked address, never
// the name. Through an HTTP proxy (HTTPS_PROXY) the proxy resolves names:
// hookledger connects to the proxy, refuses a URL whose host is a
// non-public address literal, and leaves names to the proxy's own policy.
//
// c's transport must be an *http.Transport (nil means
// http.DefaultTransport); any other RoundTripper is the embedding
// program's own network, and Guard cannot see its connections: it is
// used as given.
func Guard(c *http.Client, opts GuardOptions) *http.Client {
	out := NoRedirects(c)
	var base *http.Transport
	switch t := out.Transport.(type) {
	case nil:
		base = http.DefaultTransport.(*http.Transport)
	case *http.Transport:
		base = t
	default:
		return out
	}
	g := &guard{resolver: opts.Resolver, dial: base.DialContext, proxyDial: base.DialContext, proxies: map[string]bool{}}
	if g.dial == nil && g.resolver == nil {
		// net's own dialler, which resolves, races IPv6 against IPv4
		// (Happy Eyeballs, RFC 6555) and calls the Control check on each
		// address it is about to connect to.
		g.std = checkedDialer()
	}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	if g.dial == nil {
		g.dial = checkedDialer().DialContext
		g.proxyDial = (&net.Dialer{Timeout: defaultDialTimeout, KeepAlive: defaultKeepAlive}).DialContext
	}
	tr := base.Clone()
	tr.DialContext = g.dialContext
	tr.DialTLSContext = nil // a TLS dialler would dial by name, unchecked
	if proxy := base.Proxy; proxy != nil {
		tr.Proxy = g.proxyFunc(proxy)
	}
	out.Transport = tr
	return out
}

// As net/http's default transport.
const (
	defaultDialTimeout = 30 * time.Second
	defaultKeepAlive   = 30 * time.Second
)

type guard struct {
	// std, when set, dials: the transport has no dialler of its own and
	// names are resolved by the system.
	std      *net.Dialer
	resolver Resolver
	dial     func(ctx context.Context, network, addr string) (net.Conn, error)
	// proxyDial connects to a proxy the environment names, unchecked.
	proxyDial func(ctx context.Context, network, addr string) (net.Conn, error)

	mu      sync.Mutex
	proxies map[string]bool // host:port of proxies the environment names
}

// dialContext connects to addr through an address that passes CheckAddr:
// with net's dialler, checked by its Control hook on each address it
// resolved; with the caller's resolver or dialler, by resolving the host
// once, checking every address, and dialling the allowed ones in order
// until one connects. Either way the address checked is the one dialled.
func (g *guard) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	g.mu.Lock()
	isProxy := g.proxies[addr]
	g.mu.Unlock()
	if isProxy {
		// The operator's own proxy, named by the environment: it is
		// where every call goes, and it resolves the destination itself.
		return g.proxyDial(ctx, network, addr)
	}
	if g.std != nil {
		return g.std.DialContext(context.WithValue(ctx, hostKey{}, host), network, addr)
	}
	// A resolver or a dialler of the caller's: resolve once, check each
	// address, and give the dialler the checked address, never the name.
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		lookup := "ip"
		switch network {
		case "tcp4":
			lookup = "ip4"
		case "tcp6":
			lookup = "ip6"
		}
		if ips, err = g.resolver.LookupNetIP(ctx, lookup, host); err != nil {
			return nil, err
		}
		if len(ips) == 0 {
			return nil, &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
		}
	}
	var refused, failed error
	for _, ip := range ips {
		if rule := CheckAddr(ip); rule != "" {
			if refused == nil {
				refused = &AddressError{Host: host, Addr: ip.WithZone(""), Rule: rule}
			}
			continue
		}
		conn, err := g.dial(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return conn, nil
		}
		if failed == nil {
			failed = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if failed != nil {
		return nil, failed
	}
	return nil, refused
}

// checkedDialer is the dialer a guard uses when the transport has none of
// its own: net/http's defaults, and the check again on the socket.
func checkedDialer() *net.Dialer {
	return &net.Dialer{Timeout: defaultDialTimeout, KeepAlive: defaultKeepAlive, ControlContext: controlCheck}
}

// controlCheck runs on the socket about to connect, with the numeric
// address the kernel is given: the last word, whatever resolved it.
func controlCheck(ctx context.Context, _, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: not a numeric address", address)
	}
	if rule := CheckAddr(ap.Addr()); rule != "" {
		host, _ := ctx.Value(hostKey{}).(string)
		return &AddressError{Host: host, Addr: ap.Addr().WithZone(""), Rule: rule}
	}
	return nil
}

// hostKey carries the name being dialled to controlCheck, for its error.
type hostKey struct{}

// proxyFunc wraps the transport's proxy choice: a request that goes
// through a proxy has its host checked when it is an address literal
// (the proxy would connect to it unchecked), and the proxy's own address
// is let through the dial check.
func (g *guard) proxyFunc(proxy func(*http.Request) (*url.URL, error)) func(*http.Request) (*url.URL, error) {
	return func(req *http.Request) (*url.URL, error) {
		pu, err := proxy(req)
		if err != nil || pu == nil {
			return pu, err
		}
		host := req.URL.Hostname()
		if lit, perr := netip.ParseAddr(host); perr == nil {
			if rule := CheckAddr(lit); rule != "" {
				return nil, &AddressError{Host: host, Addr: lit.WithZone(""), Rule: rule}
			}
		}
		port := pu.Port()
		if port == "" {
			port = map[string]string{"http": "80", "https": "443", "socks5": "1080", "socks5h": "1080"}[pu.Scheme]
		}
		g.mu.Lock()
		g.proxies[net.JoinHostPort(pu.Hostname(), port)] = true
		g.mu.Unlock()
		return pu, nil
	}
}
