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

// Destination is the demo's fake downstream world on one loopback
// listener, scripted by path (see Config for which destination calls
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
type Destination struct {
	srv  *http.Server
	ln   net.Listener
	stop chan struct{}
	once sync.Once

	mu       sync.Mutex
	mails    map[string]bool // mail idempotency keys held
	contacts map[string]bool // CRM idempotency keys held
	booked   map[string]int  // carrier calls per order
	vat      map[string]bool // orders whose VAT number a person has added
	calls    map[string]int  // calls per path
}

// StartDestination serves the fake destination on 127.0.0.1, a free port.
func StartDestination() (*Destination, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fake destination: listen: %w", err)
	}
	d := &Destination{ln: ln, stop: make(chan struct{}), mails: map[string]bool{},
		contacts: map[string]bool{}, booked: map[string]int{}, vat: map[string]bool{}, calls: map[string]int{}}
	d.srv = &http.Server{Handler: d, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = d.srv.Serve(ln) }()
	return d, nil
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
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	var payload struct {
		Order string `json:"order"`
	}
	_ = json.Unmarshal(body, &payload)
	key := r.Header.Get("Idempotency-Key")
	path := r.URL.Path
	d.mu.Lock()
	d.calls[path]++
	d.mu.Unlock()

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
