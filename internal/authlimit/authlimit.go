// Package authlimit limits wrong admin tokens per client address: the
// admin API and the console count each refused token against the address
// it came from, and an address that has spent its tries in a window is
// refused (429 with Retry-After) until the window has passed, whatever it
// sends, the right token too, so that the answer never tells a guesser it
// guessed right. Another address is never affected, so nobody can lock
// the operator out from elsewhere.
//
// The client address is the connection's peer. Behind a reverse proxy
// every client would share the proxy's address, so a peer listed in
// receive.trusted_proxies is believed about the client it forwards
// (Forwarded: for=, else X-Forwarded-For), read from the right, where the
// proxies nearest to this server wrote it: the first address that is not
// itself a trusted proxy is the client. From any other peer those headers
// are ignored, or a guesser could name a new address with every try.
//
// Memory is bounded: an address's count is dropped once its window has
// passed, and at most MaxClients are kept; past that the oldest window is
// forgotten first. IPv6 clients are counted by their /64 prefix, the
// block one subscriber is usually given, so that walking through one's
// own addresses buys no new tries.
package authlimit

import (
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults: ten wrong tokens per address per minute.
const (
	DefaultTries      = 10
	defaultWindow     = time.Minute
	defaultMaxClients = 10000
)

// Options configure a Limiter; zero values take the defaults.
type Options struct {
	// Now is the clock (the server's injected clock; time.Now when nil).
	Now func() time.Time
	// Tries is how many wrong tokens an address may send in one window.
	Tries int
	// Window starts at an address's first wrong token; once Tries are
	// spent, the address waits until it ends.
	Window time.Duration
	// MaxClients bounds the addresses remembered at once.
	MaxClients int
	// TrustedProxies are the peers whose forwarding headers name the
	// client (receive.trusted_proxies).
	TrustedProxies []netip.Prefix
}

// Limiter counts wrong tokens per client address; it is safe for
// concurrent use.
type Limiter struct {
	now     func() time.Time
	tries   int
	window  time.Duration
	max     int
	proxies []netip.Prefix

	mu      sync.Mutex
	clients map[netip.Prefix]*window
}

// window is one address's count since its first wrong token.
type window struct {
	start time.Time
	fails int
}

// New returns a Limiter with o's settings.
func New(o Options) *Limiter {
	l := &Limiter{now: o.Now, tries: o.Tries, window: o.Window, max: o.MaxClients,
		proxies: o.TrustedProxies, clients: map[netip.Prefix]*window{}}
	if l.now == nil {
		l.now = time.Now
	}
	if l.tries <= 0 {
		l.tries = DefaultTries
	}
	if l.window <= 0 {
		l.window = defaultWindow
	}
	if l.max <= 0 {
		l.max = defaultMaxClients
	}
	return l
}

// Tries is how many wrong tokens an address may send in one window.
func (l *Limiter) Tries() int { return l.tries }

// Client is the address a request is counted under, as text for the log:
// the peer, or the client a trusted proxy names. A peer that is not an IP
// address (a Unix socket, a test's pipe) is "unknown", and all such share
// one count.
func (l *Limiter) Client(r *http.Request) string {
	a, ok := l.clientAddr(r)
	if !ok {
		return "unknown"
	}
	return a.String()
}

// Wait is how long client must wait before its next try; 0 when it may
// try now.
func (l *Limiter) Wait(client string) time.Duration {
	k := key(client)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.clients[k]
	if w == nil || w.fails < l.tries {
		return 0
	}
	left := w.start.Add(l.window).Sub(now)
	if left <= 0 {
		delete(l.clients, k)
		return 0
	}
	return left
}

// Fail records one wrong token from client. It returns how long the
// client is now locked out when this token spent its last try (so the
// caller logs the lock once), else 0.
func (l *Limiter) Fail(client string) time.Duration {
	k := key(client)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.clients[k]
	if w == nil || !now.Before(w.start.Add(l.window)) {
		if w == nil {
			l.makeRoomLocked(now)
		}
		w = &window{start: now}
		l.clients[k] = w
	}
	w.fails++
	if w.fails == l.tries {
		return w.start.Add(l.window).Sub(now)
	}
	return 0
}

// makeRoomLocked keeps the map under max before an address is added:
// first the windows that have passed go, then the oldest.
func (l *Limiter) makeRoomLocked(now time.Time) {
	if len(l.clients) < l.max {
		return
	}
	for k, w := range l.clients {
		if !now.Before(w.start.Add(l.window)) {
			delete(l.clients, k)
		}
	}
	for len(l.clients) >= l.max {
		var oldest netip.Prefix
		var at time.Time
		for k, w := range l.clients {
			if at.IsZero() || w.start.Before(at) {
				oldest, at = k, w.start
			}
		}
		delete(l.clients, oldest)
	}
}

// key is what an address is counted under: an IPv4 address itself, an
// IPv6 address's /64. Text that is no address ("unknown") is the zero
// prefix.
func key(client string) netip.Prefix {
	a, err := netip.ParseAddr(client)
	if err != nil {
		return netip.Prefix{}
	}
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// RetryAfter is a wait as a Retry-After value: whole seconds, rounded up,
// at least 1.
func RetryAfter(d time.Duration) string {
	s := (d + time.Second - 1) / time.Second
	return strconv.FormatInt(max(int64(s), 1), 10)
}

// clientAddr is the peer, or the client a trusted proxy forwards for.
func (l *Limiter) clientAddr(r *http.Request) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return netip.Addr{}, false
	}
	peer := ap.Addr().Unmap()
	if !l.trusted(peer) {
		return peer, true
	}
	hops := forwardedFor(r.Header)
	for i := len(hops) - 1; i >= 0; i-- {
		a, ok := parseHop(hops[i])
		if !ok {
			// A hop that is no address (obfuscated, "unknown" or
			// garbled) hides who is behind it: count the request under
			// the last address that could be read.
			return peer, true
		}
		if !l.trusted(a) {
			return a, true
		}
		peer = a
	}
	return peer, true
}

func (l *Limiter) trusted(a netip.Addr) bool {
	for _, p := range l.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedFor lists the addresses the proxies recorded, outermost first:
// the for= parameters of RFC 7239 Forwarded when the request has that
// header, else the entries of X-Forwarded-For.
func forwardedFor(h http.Header) []string {
	var hops []string
	if fs := h.Values("Forwarded"); len(fs) > 0 {
		for _, f := range fs {
			for _, elem := range strings.Split(f, ",") {
				for _, pair := range strings.Split(elem, ";") {
					k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
					if ok && strings.EqualFold(k, "for") {
						hops = append(hops, v)
					}
				}
			}
		}
		return hops
	}
	for _, x := range h.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(x, ",")...)
	}
	return hops
}

// parseHop reads one forwarded address: 192.0.2.1, 192.0.2.1:4711,
// "[2001:db8::1]:4711" or 2001:db8::1, quoted or not.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.Trim(strings.TrimSpace(s), `"`)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap(), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}
