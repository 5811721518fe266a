package deliver_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/store"
)

// Two listeners on loopback: the destination (allowed by
// allow_private_networks, as a destination on an internal network would
// be) and another service beside it. Payload data crafted to move the call
// to the other one (its host and port in the path, an absolute URL,
// credentials syntax, climbing segments in every spelling, CR, LF or NUL
// in the path or a header) is refused before sending, permanently, and
// neither listener is ever called; an honest value reaches the destination.
func TestCraftedPathsNeverReachAnotherListener(t *testing.T) {
	other := newRecorder(t)
	victim := strings.TrimPrefix(other.URL, "http://") // 127.0.0.1:port
	const key = `X-Episode-Key: '"orders:" + entity + ":r" + string(version) + ":charge"'`
	for _, tc := range []struct {
		name, id, path, headers, want string
	}{
		{"another host", "//" + victim + "/stolen", `'entity'`, "", "another host"},
		{"another host after the base path", "/" + victim + "/stolen", `'"/" + entity'`, "", "another host"},
		{"absolute URL", "http://" + victim + "/stolen", `'entity'`, "", "URL"},
		{"absolute URL inside the path", "http://" + victim + "/stolen", `'"/orders/" + entity'`, "", "URL"},
		{"credentials and host", "@" + victim + "/stolen", `'entity'`, "", "credentials"},
		{"host and port as a first segment", victim + "/stolen", `'entity'`, "", "scheme"},
		{"climb out of the base path", "../../../stolen", `'"/orders/" + entity'`, "", "dot segment"},
		{"climb, percent-encoded", "%2e%2e/%2E%2e/stolen", `'"/orders/" + entity'`, "", "dot segment"},
		{"climb, encoded slashes", "..%2F..%2Fstolen", `'"/orders/" + entity'`, "", "dot segment"},
		{"climb, escaped by the flow", "../../stolen", `'"/orders/" + pathEscape(entity)'`, "", "dot segment"},
		{"backslashes", `..\..\stolen`, `'"/orders/" + entity'`, "", "backslash"},
		{"backslash host", `\\` + victim + `\stolen`, `'"/orders/" + entity'`, "", "backslash"},
		// An entity is an identity and holds no control character; a path
		// can still be computed from other fields.
		{"CRLF in the path", "o1", `'"/orders/" + entity + (entity == "o1" ? " HTTP/1.1\r\nHost: ` + victim + `\r\n\r\nGET /stolen" : "")'`, "", "control character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := newRecorder(t)
			headers := key
			if tc.headers != "" {
				headers += ", " + tc.headers
			}
			x := newWorld(t, setup{baseURL: dest.URL + "/api", dest: "auth: {bearer: api-token}",
				request: "path: " + tc.path + "\nheaders: {" + headers + "}"})
			e := x.order(tc.id, 1)
			x.drain()
			e = x.get(e.ID)
			x.wantState(e, store.EffectDead)
			if e.ErrorClass != store.ClassPermanent || !strings.Contains(e.Reason, "refused before sending") ||
				!strings.Contains(e.Reason, tc.want) || !e.NextAttemptAt.IsZero() {
				t.Fatalf("[%s] %q next %v, want a permanent refusal about %q", e.ErrorClass, e.Reason, e.NextAttemptAt, tc.want)
			}
			x.clk.Advance(7 * time.Hour)
			x.drain()
			if got := other.requests(); len(got) != 0 {
				t.Fatalf("the other listener was called: %q", got)
			}
			if got := dest.requests(); len(got) != 0 {
				t.Fatalf("the destination was called with a crafted request: %q", got)
			}
		})
	}
	// A header value computed from the payload with CR, LF or NUL is
	// refused when the effect would be made: the event is dead-lettered
	// with the reason, and no effect exists that no retry could deliver.
	for _, tc := range []struct{ name, id, header string }{
		{"CRLF in a header", "o1", `X-Order: 'entity + (entity == "o1" ? "\r\nHost: ` + victim + `" : "")'`},
		{"NUL in a header", "o1", `X-Order: 'entity + (entity == "o1" ? "\u0000" : "")'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := newRecorder(t)
			x := newWorld(t, setup{baseURL: dest.URL + "/api", dest: "auth: {bearer: api-token}",
				request: `path: '"/orders/" + pathEscape(entity)'` + "\nheaders: {" + key + ", " + tc.header + "}"})
			x.commit(tc.id, 1)
			if es := x.effects(); len(es) != 0 {
				t.Fatalf("effects %+v, want none", es)
			}
			ev := x.event(fmt.Sprintf("evt_%s_1", tc.id))
			if ev.Disposition != store.DispositionDeadLettered || len(ev.Routes) != 1 ||
				!strings.Contains(ev.Routes[0].Reason, "request.headers.X-Order: value contains a control character") {
				t.Fatalf("event %s, routes %+v: want dead_lettered naming the header", ev.Disposition, ev.Routes)
			}
			x.clk.Advance(7 * time.Hour)
			x.drain()
			if got := append(other.requests(), dest.requests()...); len(got) != 0 {
				t.Fatalf("a listener was called: %q", got)
			}
		})
	}
	// The control: an honest value reaches the destination, below its
	// base path, and still not the other listener.
	dest := newRecorder(t)
	x := newWorld(t, setup{baseURL: dest.URL + "/api", request: `path: '"/orders/" + pathEscape(entity)'
headers: {` + key + `}`})
	e := x.order("o1", 1)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDone)
	if got := dest.requests(); len(got) != 1 || !strings.HasPrefix(got[0], "POST /api/orders/o1 ") {
		t.Fatalf("destination requests %q", got)
	}
	if got := other.requests(); len(got) != 0 {
		t.Fatalf("the other listener was called: %q", got)
	}
}

// staticResolver answers the names in its table with their addresses,
// and asks the system for the others.
type staticResolver map[string][]netip.Addr

func (r staticResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if as, ok := r[host]; ok {
		return as, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, network, host)
}

// A destination without allow_private_networks whose address is not
// public (written so, spelled as IPv4-mapped IPv6, or a name that resolves
// to loopback, as a rebinding name would) is refused on the address about
// to be dialled: nothing is sent, the effect is in the exception queue at
// once (never retried: the address is the same next time), the reason
// names the address, the rule and the key, and a person is told.
func TestNonPublicDestinationIsRefusedWhenDialled(t *testing.T) {
	dest := newRecorder(t)
	port := dest.Listener.Addr().(*net.TCPAddr).Port
	res := staticResolver{"api.partner.test": {netip.MustParseAddr("127.0.0.1")}}
	for _, tc := range []struct{ base, want string }{
		{fmt.Sprintf("http://127.0.0.1:%d", port), "127.0.0.1 is not a public address (loopback (127.0.0.0/8))"},
		{fmt.Sprintf("http://[::ffff:127.0.0.1]:%d", port), "as IPv4-mapped IPv6"},
		{fmt.Sprintf("http://api.partner.test:%d/v1", port), "api.partner.test (resolved to 127.0.0.1) refused"},
		{fmt.Sprintf("http://localhost:%d", port), "loopback"},
		{"http://169.254.169.254/latest", "169.254.169.254 is not a public address (cloud metadata (169.254.169.254/32))"},
	} {
		t.Run(tc.base, func(t *testing.T) {
			x := newWorld(t, setup{baseURL: tc.base, strictDest: true, resolver: res, dest: "auth: {bearer: api-token}"})
			e := x.order("o1", 1)
			x.drain()
			e = x.get(e.ID)
			x.wantState(e, store.EffectDead)
			if e.ErrorClass != store.ClassPermanent || !strings.Contains(e.Reason, tc.want) ||
				!strings.Contains(e.Reason, "allow_private_networks") || !strings.Contains(e.Reason, "destination dest") ||
				!strings.Contains(e.SuggestedRepair, "set allow_private_networks: true on it") || !e.NextAttemptAt.IsZero() {
				t.Fatalf("[%s] %q / %q next %v", e.ErrorClass, e.Reason, e.SuggestedRepair, e.NextAttemptAt)
			}
			if as := x.attempts(e.ID); len(as) != 1 || as[0].Status != 0 || as[0].Class != store.ClassPermanent {
				t.Fatalf("attempts %+v", as)
			}
			if texts := x.hook.all(); len(texts) != 1 || !strings.Contains(texts[0], "allow_private_networks") {
				t.Fatalf("notifications %q", texts)
			}
			x.clk.Advance(7 * 24 * time.Hour)
			x.drain()
			if got := x.get(e.ID); got.State != store.EffectDead || len(x.attempts(e.ID)) != 1 {
				t.Fatalf("the refusal was retried: %s, %d attempts", got.State, len(x.attempts(e.ID)))
			}
		})
	}
	if got := dest.requests(); len(got) != 0 {
		t.Fatalf("the loopback listener was called: %q", got)
	}
	// The key lifts the refusal for its destination only.
	x := newWorld(t, setup{baseURL: fmt.Sprintf("http://127.0.0.1:%d", port)})
	e := x.order("o1", 1)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDone)
	if got := dest.requests(); len(got) != 1 {
		t.Fatalf("with allow_private_networks the listener got %q", got)
	}
}

// A lookup that would reach a non-public address has not looked: a person
// decides, is told which key would allow it, and nothing is scheduled.
func TestLookupToANonPublicAddressGoesToAPerson(t *testing.T) {
	dest := newRecorder(t)
	x := newWorld(t, setup{baseURL: dest.URL, strictDest: true, dest: lookup})
	e := x.order("o1", 1)
	// A worker took the effect and died during its call: the next claim
	// reconciles by lookup.
	if _, err := x.st.EffectClaim(x.ctx, &store.EffectClaimParams{Owner: "worker-dead", Now: x.clk.Now(),
		LeaseFor: 30 * time.Second, Limit: 10, Destinations: []string{"dest"}, MaxRedrives: 3}); err != nil {
		t.Fatal(err)
	}
	x.clk.Advance(31 * time.Second)
	x.drain()
	e = x.get(e.ID)
	x.wantState(e, store.EffectNeedsReconciliation)
	if !strings.Contains(e.Reason, "lookup") || !strings.Contains(e.Reason, "loopback") ||
		!strings.Contains(e.SuggestedRepair, "allow_private_networks") || !e.NextAttemptAt.IsZero() {
		t.Fatalf("[%s] %q / %q next %v", e.ErrorClass, e.Reason, e.SuggestedRepair, e.NextAttemptAt)
	}
	if got := dest.requests(); len(got) != 0 {
		t.Fatalf("the lookup reached the listener: %q", got)
	}
}

// The notification webhook is an outbound call like any other: on a
// non-public address without notifications.allow_private_networks it is
// refused, and the failure is logged with the reason.
func TestNotificationWebhookOnANonPublicAddressIsRefused(t *testing.T) {
	x := newWorld(t, setup{strictHook: true, dest: "auth: {bearer: api-token}"})
	e := x.order("o1", 1)
	x.dest.Script(e.EpisodeKey, delivertest.Fail400)
	x.drain()
	x.wantState(x.get(e.ID), store.EffectDead)
	if texts := x.hook.all(); len(texts) != 0 {
		t.Fatalf("the webhook on loopback was called: %q", texts)
	}
	if logs := x.logs.String(); !strings.Contains(logs, "notification failed") || !strings.Contains(logs, "loopback") {
		t.Fatalf("log:\n%s", logs)
	}
}
