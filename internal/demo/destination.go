package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// The orders the fake destination misbehaves for. Every other call of the
// same kind succeeds.
const (
	orderHangCRM     = "ord-1003" // the CRM creates the contact, then never answers
	orderHangLedger  = "ord-1004" // the ledger posts the entry, then never answers
	orderForgetMail  = "ord-1008" // the mailer answers 201 and loses the mail
	retryAfterSecond = "1"        // the carrier's Retry-After on its first answer
)

// Destination is a fake downstream world on one loopback listener. It
// records every call, answers first by its fail rules (Rule), then either
// by the demo's script or, for `hookledger dev-destination`, with 200.
//
// The demo's script goes by path (see demoConfig for which destination calls
// which path):
//
//	POST /notify/...          201
//	POST /mail/messages       201; kept by Idempotency-Key, except ord-1008's (lost)
//	GET  /mail/messages/KEY   200 when kept, else 404 (lookups and verification)
//	POST /mail/void           503: the void endpoint is down
//	POST /crm/contacts        201; for ord-1003 the contact is kept, then the call hangs
//	GET  /crm/contacts/KEY    200 when kept, else 404
//	POST /ledger/entries      201; for ord-1004 it hangs
//	POST /carrier/bookings    429 with Retry-After: 1 on an order's first call, then 201
//	POST /warehouse/invoices  422: the invoice is refused, until its order has a VAT number
//	POST /warehouse/vat-numbers  204: a person adds the order's VAT number at the warehouse
//	POST /warehouse/reorders  201
//	POST /marketing/members   200 with {"errors": [...]}: a hidden failure
//	POST /dunning/mails       503
//	GET  /inventory-api/...   503: the source API is down
//	POST /contacts            201 (the echoing systems)
//
// In both modes GET /_dev/calls lists the calls recorded (CallsPath).
type Destination struct {
	srv  *http.Server
	ln   net.Listener
	stop chan struct{}
	once sync.Once

	scripted bool       // the demo's script; false: every call not failed by a rule gets 200
	rules    []*Rule    // answered first, in order
	out      io.Writer  // a line per call, nil for none
	outMu    sync.Mutex // one call's line at a time on out
	now      func() time.Time

	mu       sync.Mutex
	mails    map[string]bool // mail idempotency keys held
	contacts map[string]bool // CRM idempotency keys held
	booked   map[string]int  // carrier calls per order
	vat      map[string]bool // orders whose VAT number a person has added
	calls    map[string]int  // calls per path
	hits     map[*Rule]int   // calls each rule answered
	log      []Call          // the newest maxLog calls
	n        int             // calls recorded so far
}

// maxLog bounds the calls a long-running destination keeps for CallsPath.
const maxLog = 1000

// startDestination serves the demo's scripted destination on 127.0.0.1, a
// free port.
func startDestination() (*Destination, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake destination: listen: %w", err)
	}
	return serveDestination(ln, true, DevOptions{}), nil
}

// DevOptions configure the destination `hookledger dev-destination` serves.
type DevOptions struct {
	Rules []*Rule   // calls a rule matches get its status, first match wins
	Out   io.Writer // a line per call; nil for none
	// Now stamps the call log (time.Now when nil).
	Now func() time.Time
}

// StartDevDestination serves a destination for trying flows out on ln:
// every call is recorded and answered 200 with {"ok":true,"call":N},
// unless one of o.Rules matches it.
func StartDevDestination(ln net.Listener, o DevOptions) *Destination {
	return serveDestination(ln, false, o)
}

func serveDestination(ln net.Listener, scripted bool, o DevOptions) *Destination {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	d := &Destination{ln: ln, stop: make(chan struct{}), scripted: scripted, rules: o.Rules, out: o.Out, now: now,
		mails: map[string]bool{}, contacts: map[string]bool{}, booked: map[string]int{}, vat: map[string]bool{},
		calls: map[string]int{}, hits: map[*Rule]int{}}
	d.srv = &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.srv.Serve(ln) }()
	return d
}

// URL is the destination's base URL.
func (d *Destination) URL() string { return "http://" + d.ln.Addr().String() }

// Calls is how many requests reached path.
func (d *Destination) Calls(path string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[path]
}

// Close releases the hanging calls and stops the server.
func (d *Destination) Close() error {
	d.once.Do(func() { close(d.stop) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := d.srv.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("fake destination: shutdown: %w", err)
	}
	return nil
}

// hang holds a call whose side effect happened until the caller gives up.
func (d *Destination) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-d.stop:
	}
}

func (d *Destination) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == CallsPath {
		d.serveCalls(w, r)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	d.mu.Lock()
	d.calls[r.URL.Path]++
	d.n++
	n := d.n
	d.mu.Unlock()
	sw := &statusWriter{ResponseWriter: w}
	rule := d.match(r.Method, r.URL.Path, body)
	switch {
	case rule != nil:
		// A rule holds what the user typed: JSON-encode it, never %q.
		answer, _ := json.Marshal(map[string]string{"error": "dev-destination: the rule " + rule.String() + " matched this call"})
		sw.Header().Set("Content-Type", "application/json")
		sw.WriteHeader(rule.Status)
		_, _ = sw.Write(answer)
	case d.scripted:
		d.script(sw, r, body)
	default:
		sw.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(sw, `{"ok":true,"call":%d}`, n)
	}
	d.record(n, r, body, sw.status, rule)
}

// script answers a call as the demo's world does.
func (d *Destination) script(w http.ResponseWriter, r *http.Request, body []byte) {
	var payload struct {
		Order string `json:"order"`
	}
	_ = json.Unmarshal(body, &payload)
	key := r.Header.Get("Idempotency-Key")
	path := r.URL.Path

	created := func(id string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%q}`, id)
	}
	held := func(m map[string]bool, k string) {
		d.mu.Lock()
		ok := m[k]
		d.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":%q}`, k)
	}
	post := r.Method == http.MethodPost
	switch {
	case post && strings.HasPrefix(path, "/notify/"), post && path == "/contacts", post && path == "/warehouse/reorders":
		created("ok_" + payload.Order)
	case post && path == "/mail/messages":
		if payload.Order != orderForgetMail {
			d.mu.Lock()
			d.mails[key] = true
			d.mu.Unlock()
		}
		created("mail_" + payload.Order)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/mail/messages/"):
		held(d.mails, strings.TrimPrefix(path, "/mail/messages/"))
	case post && path == "/mail/void":
		http.Error(w, `{"error":"maintenance: voiding is off until tonight"}`, http.StatusServiceUnavailable)
	case post && path == "/crm/contacts":
		d.mu.Lock()
		d.contacts[key] = true
		d.mu.Unlock()
		if payload.Order == orderHangCRM {
			d.hang(r)
			return
		}
		created("contact_" + payload.Order)
	case r.Method == http.MethodGet && strings.HasPrefix(path, "/crm/contacts/"):
		held(d.contacts, strings.TrimPrefix(path, "/crm/contacts/"))
	case post && path == "/ledger/entries":
		if payload.Order == orderHangLedger {
			d.hang(r)
			return
		}
		created("entry_" + payload.Order)
	case post && path == "/carrier/bookings":
		d.mu.Lock()
		d.booked[payload.Order]++
		n := d.booked[payload.Order]
		d.mu.Unlock()
		if n == 1 {
			w.Header().Set("Retry-After", retryAfterSecond)
			http.Error(w, `{"error":"rate limited"}`, http.StatusTooManyRequests)
			return
		}
		created("booking_" + payload.Order)
	case post && path == "/warehouse/vat-numbers":
		// The repair of the permanent 422 happens at the warehouse, as
		// in life: hookledger never retries the invoice by itself, and
		// a retry from the exception queue succeeds once it is fixed.
		d.mu.Lock()
		d.vat[payload.Order] = true
		d.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case post && path == "/warehouse/invoices":
		d.mu.Lock()
		fixed := d.vat[payload.Order]
		d.mu.Unlock()
		if fixed {
			created("invoice_" + payload.Order)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		fmt.Fprintf(w, `{"error":"invoice for %s has no VAT number"}`, payload.Order)
	case post && path == "/marketing/members":
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"ok":true,"errors":[{"code":"invalid_email","message":"the address bounced"}]}`)
	case post && path == "/dunning/mails", strings.HasPrefix(path, "/inventory-api/"):
		http.Error(w, `{"error":"service unavailable"}`, http.StatusServiceUnavailable)
	default:
		http.NotFound(w, r)
	}
}
