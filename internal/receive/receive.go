// Package receive is the front door, POST /hooks/{source}: it reads the body
// once as raw bytes under a size limit, verifies the pinned signature scheme
// on those bytes before parsing anything, extracts identities, checks the
// tenant, and answers 2xx only after the group commit made the delivery
// durable (WH02, WH03, WH04, WH05). A verified set-up request of a sender
// kind with a handshake (Slack's url_verification) is answered as the kind
// says and stores nothing.
package receive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/envelope"
	"github.com/hookledger/hookledger/internal/logging"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// Submitter is the group-commit writer.
type Submitter interface {
	Submit(ctx context.Context, sub *store.Submission) (store.SubmissionResult, error)
}

// Auditor records refusals that never reach the inbox.
type Auditor interface {
	AuditInsert(ctx context.Context, p *store.AuditInsertParams) (int64, error)
}

// Router tells whether any flow wants an event type.
type Router interface {
	Subscribes(source, typ string) bool
}

// Options are the receiver's dependencies.
type Options struct {
	Writer Submitter
	// Router, when set, lets events no flow subscribes to be stored
	// unrouted at once (nil: the processor decides later).
	Router     Router
	Store      Auditor
	Clock      clock.Clock
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// Kinds are the sender kinds the sources name; nil means
	// senderkind.Builtin().
	Kinds *senderkind.Registry
}

type source struct {
	cfg       config.Source
	scheme    signature.Scheme
	identity  senderkind.Identity
	paths     envelope.Paths
	publicURL *url.URL
	// signsURL says whether the kind's scheme signs the URL, which a
	// refusal then names.
	signsURL bool
	keep     []string // headers kept as evidence beside the body
	// handshake recognises the sender's set-up requests (nil: none).
	handshake func([]byte) (senderkind.Reply, bool)
	// causation says whether this source may carry the causation headers
	// (config causation.trusted_sources).
	causation bool
}

// Handler serves POST /hooks/{source}.
type Handler struct {
	sources    map[string]*source
	causation  config.Causation
	maxBody    int64
	retryAfter string
	// commitWait bounds the wait for a durable commit; writeBy is how long
	// after the request started an answer must be written (the server's
	// write timeout less a margin), whichever ends first.
	commitWait time.Duration
	writeBy    time.Duration
	proxies    []netip.Prefix
	// storeErrs logs a failing store once per window, not per request.
	storeErrs *logging.Repeats
	w         Submitter
	router    Router
	audit     Auditor
	clk       clock.Clock
	log       *slog.Logger

	requests *prometheus.CounterVec
	ackDur   *prometheus.HistogramVec
}

// New builds the handler for every configured source.
func New(cfg *config.Config, o Options) (*Handler, error) {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	h := &Handler{
		sources:    map[string]*source{},
		causation:  cfg.Causation,
		maxBody:    cfg.Receive.MaxBodyBytes,
		retryAfter: strconv.Itoa(int(math.Ceil(cfg.Receive.RetryAfter.D().Seconds()))),
		commitWait: cfg.Receive.CommitTimeout.D(),
		storeErrs:  logging.NewRepeats(o.Logger, o.Clock, "storing webhooks", 0),
		writeBy:    writeBy(cfg.Receive.WriteTimeout.D()),
		w:          o.Writer,
		router:     o.Router,
		audit:      o.Store,
		clk:        o.Clock,
		log:        o.Logger,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_receive_requests_total",
			Help: "Inbound webhook requests by source and HTTP status.",
		}, []string{"source", "code"}),
		ackDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hookledger_receive_ack_seconds",
			Help:    "Time from reading the request to acknowledging it, by source.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}, []string{"source"}),
	}
	if o.Registerer != nil {
		o.Registerer.MustRegister(h.requests, h.ackDur)
	}
	for _, tp := range cfg.Receive.TrustedProxies {
		p, err := config.ParseTrustedProxy(tp)
		if err != nil {
			return nil, fmt.Errorf("receive.trusted_proxies: %w", err)
		}
		h.proxies = append(h.proxies, p)
	}
	kinds := o.Kinds
	if kinds == nil {
		kinds = senderkind.Builtin()
	}
	for _, sc := range cfg.Sources {
		kind, ok := kinds.Lookup(sc.Kind)
		if !ok {
			return nil, fmt.Errorf("source %s: unknown kind %q", sc.Name, sc.Kind)
		}
		ks := sc.KindSource()
		scheme, err := signature.New(kind.Options(ks, sc.Secrets))
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", sc.Name, err)
		}
		src := &source{
			cfg:      sc,
			scheme:   scheme,
			identity: kind.IdentityFor(ks),
			paths:    ks.Fields,
			// Identifiers and timestamps kept as evidence beside the
			// body, never signatures or credentials.
			keep:      kind.KeptHeaders(ks),
			handshake: kind.Handshake,
			causation: slices.Contains(cfg.Causation.TrustedSources, sc.Name),
			signsURL:  kind.SignsURL(ks),
		}
		if sc.PublicURL != "" {
			u, err := url.Parse(sc.PublicURL)
			if err != nil {
				return nil, fmt.Errorf("source %s: public_url: %w", sc.Name, err)
			}
			src.publicURL = u
		}
		h.sources[sc.Name] = src
	}
	return h, nil
}

// Response is the JSON body of every answer.
type Response struct {
	Status     string `json:"status,omitempty"`
	Events     int    `json:"events,omitempty"`
	Duplicates int    `json:"duplicates,omitempty"`
	Error      string `json:"error,omitempty"`
}

// writeBy leaves a margin between the last moment the handler decides its
// answer and the connection's write deadline, for the answer to be written.
func writeBy(writeTimeout time.Duration) time.Duration {
	if writeTimeout <= 0 {
		return 0
	}
	return writeTimeout - min(time.Second, writeTimeout/4)
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	name := r.PathValue("source")
	src, ok := h.sources[name]
	if !ok {
		h.requests.WithLabelValues("unknown", "404").Inc()
		writeJSON(w, http.StatusNotFound, Response{Error: "unknown source"})
		return
	}
	code := h.serve(w, r, src, start)
	h.requests.WithLabelValues(name, strconv.Itoa(code)).Inc()
	if code == http.StatusOK {
		h.ackDur.WithLabelValues(name).Observe(time.Since(start).Seconds())
	}
}

// bodyPrealloc bounds the buffer readBody allocates on the sender's word:
// a declared length is not yet a received body, and a client that declares
// the source's whole limit and sends nothing must not cost that much memory.
const bodyPrealloc = 64 << 10

// readBody reads a request body to its end. A body whose length is declared
// is read into one buffer of that size (up to bodyPrealloc), instead of
// io.ReadAll's doubling from 512 bytes, which allocated more than four
// times the size of a 2 KB webhook.
func readBody(r io.Reader, declared int64) ([]byte, error) {
	size := 512
	if declared >= 0 {
		size = int(min(declared, bodyPrealloc)) + 1 // +1: room to read the end without growing
	}
	buf := make([]byte, 0, size)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// serve stores one webhook and answers it: 200 only once every event it
// carries is durably committed.
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, src *source, start time.Time) int {
	receivedAt := h.clk.Now()
	body, code := h.readVerified(w, r, src, receivedAt)
	if code != 0 {
		return code
	}

	// A set-up request (Slack's url_verification) is answered only once
	// its signature verified, so nobody can use it to probe the endpoint,
	// and is not stored: it is no event and no flow could act on it.
	if src.handshake != nil {
		if rep, ok := src.handshake(body); ok {
			h.log.InfoContext(r.Context(), "handshake answered", "source", src.cfg.Name, "what", rep.What)
			w.Header().Set("Content-Type", rep.ContentType)
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write(rep.Body)
			return http.StatusOK
		}
	}

	events, code := h.acceptEvents(w, r, src, body, receivedAt)
	if code != 0 {
		return code
	}
	sub, code := h.submission(w, r, src, events, receivedAt)
	if code != 0 {
		return code
	}
	return h.commit(w, r, src, sub, start)
}

// readVerified reads the body within the source's limit and verifies its
// signature. A code other than 0 means the request was answered.
func (h *Handler) readVerified(w http.ResponseWriter, r *http.Request, src *source, receivedAt time.Time) (body []byte, code int) {
	body, err := readBody(http.MaxBytesReader(w, r.Body, h.maxBody), r.ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, reply(w, http.StatusRequestEntityTooLarge, Response{Error: fmt.Sprintf("body exceeds the %d byte limit", h.maxBody)})
		}
		return nil, reply(w, http.StatusBadRequest, Response{Error: "request body could not be read"})
	}

	signedURL, urlFrom := h.publicURL(r, src)
	vreq := &signature.Request{Method: r.Method, URL: signedURL, Header: r.Header, Body: body}
	_, span := tracing.Child(r.Context(), "verify", attribute.String("hookledger.scheme", src.cfg.Kind))
	err = src.scheme.Verify(vreq, receivedAt)
	if err != nil {
		// The reason names the scheme and header, never a value.
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	if err != nil {
		// verify errors name the scheme and header, never a secret or a
		// signature value, so they are safe to return and log. What the
		// signature was checked over is logged too (never the secret): a
		// URL-signing scheme most often fails on the URL, not the secret;
		// for the other kinds the URL is no part of it, and naming it
		// would send the reader the wrong way. A warning: a sender with a
		// wrong secret loses every event until someone looks.
		attrs := []any{"source", src.cfg.Name, "reason", err.Error(), "body_bytes", len(body)}
		if urlFrom != "" && src.signsURL {
			attrs = append(attrs, "signed_url", outbound.RedactURL(signedURL), "url_from", urlFrom)
		}
		h.log.WarnContext(r.Context(), "webhook refused", attrs...)
		return nil, reply(w, http.StatusUnauthorized, Response{Error: err.Error()})
	}
	return body, 0
}

// acceptEvents extracts the events of a verified body and refuses the
// request when one of them has a malformed identity or names another
// tenant. A code other than 0 means the request was answered.
func (h *Handler) acceptEvents(w http.ResponseWriter, r *http.Request, src *source, body []byte, receivedAt time.Time) (events []envelope.Event, code int) {
	events, err := envelope.ExtractIdentity(src.identity, src.paths, r.Header, body)
	if err != nil {
		h.log.InfoContext(r.Context(), "malformed webhook", "source", src.cfg.Name, "err", err)
		return nil, reply(w, http.StatusBadRequest, Response{Error: err.Error()})
	}
	if len(events) == 0 {
		return nil, reply(w, http.StatusBadRequest, Response{Error: "payload carries no event"})
	}
	for i, ev := range events {
		if err := checkIdentities(ev); err != nil {
			return nil, reply(w, http.StatusBadRequest, Response{Error: fmt.Sprintf("event %d: %v", i, err)})
		}
	}
	tracing.Annotate(r.Context(), func() []attribute.KeyValue { return eventAttrs(events) })

	// WH04: the tenant is checked only after the signature, and a payload
	// field only ever refuses; it never selects secrets or partitions.
	if want := src.cfg.Account; want != "" {
		for _, ev := range events {
			if ev.Account != "" && ev.Account != want {
				h.auditTenantMismatch(r.Context(), src, ev, receivedAt)
				return nil, reply(w, http.StatusForbidden, Response{Error: "payload names an account this source does not serve"})
			}
		}
	}
	return events, 0
}

// submission builds one delivery per event, sharing the request's id, its
// kept headers and its causation. A code other than 0 means the request
// was answered.
func (h *Handler) submission(w http.ResponseWriter, r *http.Request, src *source, events []envelope.Event, receivedAt time.Time) (*store.Submission, int) {
	requestID, err := uuid.NewV7()
	if err != nil {
		return nil, h.unavailable(w, src, fmt.Errorf("request id: %w", err))
	}
	headers := map[string]string{}
	for _, k := range src.keep {
		if v := r.Header.Get(k); v != "" {
			headers[k] = v
		}
	}
	var causation string
	var hop int
	if src.causation {
		if causation, hop, err = h.causationOf(r); err != nil {
			return nil, reply(w, http.StatusBadRequest, Response{Error: err.Error()})
		}
	}
	sub := &store.Submission{Deliveries: make([]*store.DeliveryInput, len(events))}
	traceparent := tracing.Traceparent(r.Context())
	for i, ev := range events {
		sub.Deliveries[i] = &store.DeliveryInput{
			RequestID: requestID.String(), BatchIndex: i, Source: src.cfg.Name,
			EventID: ev.EventID, Type: ev.Type, Entity: ev.Entity, Account: ev.Account,
			OccurredAt: ev.OccurredAt, ReceivedAt: receivedAt, Headers: headers, Body: ev.Body,
			CausationID: causation, Hop: hop, TraceContext: traceparent,
			Unrouted: h.router != nil && !h.router.Subscribes(src.cfg.Name, ev.Type),
		}
	}
	return sub, 0
}

// commit submits the deliveries to the group commit and answers: 200 once
// they are stored, 400 when the store refuses their values, 503 when it
// cannot commit in time.
func (h *Handler) commit(w http.ResponseWriter, r *http.Request, src *source, sub *store.Submission, start time.Time) int {
	// The wait for the commit is bounded so that a busy or locked store
	// still gets the sender a 503 with Retry-After before the connection's
	// write deadline, never a dropped connection.
	deadline := time.Now().Add(h.commitWait)
	if h.writeBy > 0 && start.Add(h.writeBy).Before(deadline) {
		deadline = start.Add(h.writeBy)
	}
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	ctx, span := tracing.Child(ctx, "commit", attribute.Int("hookledger.deliveries", len(sub.Deliveries)))
	res, err := h.w.Submit(ctx, sub)
	if err != nil {
		span.SetStatus(codes.Error, logging.OneLine(err))
	}
	span.End()
	cancel()
	if err == nil {
		err = res.Err
	}
	if errors.Is(err, store.ErrRefused) {
		// The values of this delivery, not the store: a retry of the same
		// bytes cannot succeed, so the answer is a client error.
		h.log.WarnContext(r.Context(), "webhook refused by the store", "source", src.cfg.Name, "err", logging.OneLine(err))
		return reply(w, http.StatusBadRequest, Response{Error: "the store refused a value of this event; it cannot be stored as sent"})
	}
	if err != nil {
		return h.unavailable(w, src, err)
	}
	h.storeErrs.OK()
	// The router is woken by the inbox writer once the commit has ended
	// (inbox.Options.RouteAhead), for every group at once.
	dups := 0
	for _, it := range res.Items {
		if it.Duplicate {
			dups++
		}
	}
	return reply(w, http.StatusOK, Response{Status: "stored", Events: len(sub.Deliveries), Duplicates: dups})
}

// causationOf reads the feedback-loop headers. They are only as trusted as
// the signature that covers the request: a sender can always start a new
// chain, which is what the hop ceiling is for. The delivery worker sends
// the causation id percent-encoded (outbound.EncodeHeaderValue); it is
// decoded here, so that the id comes back as the chain's own and a loop
// is recognised. A value that does not decode (a "%" without two hex
// digits) was written by hand, and is kept as it is.
func (h *Handler) causationOf(r *http.Request) (string, int, error) {
	raw := strings.TrimSpace(r.Header.Get(h.causation.Header))
	hopText := strings.TrimSpace(r.Header.Get(h.causation.HopHeader))
	if raw == "" {
		return "", 0, nil
	}
	id := raw
	if len(raw) <= 3*200 {
		if dec, err := outbound.DecodeHeaderValue(raw); err == nil {
			id = dec
		}
	}
	if len(id) > 200 || !utf8.ValidString(id) || strings.ContainsRune(id, 0) {
		return "", 0, fmt.Errorf("header %s: not a causation id (at most 200 characters of text)", h.causation.Header)
	}
	if hopText == "" {
		return id, 0, nil
	}
	hop, err := strconv.Atoi(hopText)
	if err != nil || hop < 0 || hop > 1000 {
		return "", 0, fmt.Errorf("header %s: %q is not a hop count from 0 to 1000", h.causation.HopHeader, hopText)
	}
	return id, hop, nil
}

// unavailable answers 503 with Retry-After: the sender must retry, because
// nothing was durably stored (RT07: never a 2xx to silence it).
func (h *Handler) unavailable(w http.ResponseWriter, src *source, err error) int {
	h.storeErrs.Fail("cannot store webhook", err, "source", src.cfg.Name)
	w.Header().Set("Retry-After", h.retryAfter)
	return reply(w, http.StatusServiceUnavailable, Response{Error: "the event could not be stored; retry later"})
}

func (h *Handler) auditTenantMismatch(ctx context.Context, src *source, ev envelope.Event, at time.Time) {
	h.log.WarnContext(ctx, "tenant mismatch", "source", src.cfg.Name, "event_id", ev.EventID, "payload_account", ev.Account)
	// The audit row is best effort: the request is refused either way.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := h.audit.AuditInsert(ctx, &store.AuditInsertParams{
		At: at, Actor: "receiver", Action: store.ActionTenantMismatch, Source: src.cfg.Name,
		EventID: ev.EventID, Entity: ev.Entity,
		Detail: fmt.Sprintf("payload names account %q, source serves %q; refused with 403", ev.Account, src.cfg.Account),
	}); err != nil {
		h.log.Error("audit tenant mismatch", "err", err)
	}
}

// publicURL is the URL the sender signed: the configured public_url (plus
// the request's query) when set, else what this server saw. from says where
// a rebuilt URL came from, for the refusal log; it is empty when public_url
// was used.
func (h *Handler) publicURL(r *http.Request, src *source) (u string, from string) {
	if src.publicURL != nil {
		pu := *src.publicURL
		if pu.RawQuery == "" {
			pu.RawQuery = r.URL.RawQuery
		}
		return pu.String(), ""
	}
	scheme, host, from := "http", r.Host, "Host header"
	if r.TLS != nil {
		scheme = "https"
	}
	if h.fromTrustedProxy(r) {
		if p, hst := forwarded(r.Header); p != "" || hst != "" {
			if p == "http" || p == "https" {
				scheme = p
			}
			if hst != "" {
				host = hst
			}
			from = "forwarding headers of a trusted proxy"
		}
	}
	return scheme + "://" + host + r.URL.RequestURI(), from
}

// fromTrustedProxy reports whether the peer is in receive.trusted_proxies.
func (h *Handler) fromTrustedProxy(r *http.Request) bool {
	if len(h.proxies) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, p := range h.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwarded reads the scheme and host a proxy says the client used: the
// first element of RFC 7239 Forwarded, else X-Forwarded-Proto and
// X-Forwarded-Host (their first value: the one the outermost proxy set).
func forwarded(hd http.Header) (proto, host string) {
	if f := hd.Get("Forwarded"); f != "" {
		first, _, _ := strings.Cut(f, ",")
		for _, pair := range strings.Split(first, ";") {
			k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
			if !ok {
				continue
			}
			v = strings.Trim(v, `"`)
			switch strings.ToLower(k) {
			case "proto":
				proto = strings.ToLower(v)
			case "host":
				host = v
			}
		}
		return proto, host
	}
	firstOf := func(v string) string {
		first, _, _ := strings.Cut(v, ",")
		return strings.TrimSpace(first)
	}
	return strings.ToLower(firstOf(hd.Get("X-Forwarded-Proto"))), firstOf(hd.Get("X-Forwarded-Host"))
}

// checkIdentities refuses identities that are not text every driver stores
// and every header can carry (store.CheckID: no NUL, valid UTF-8, no control
// characters, at most store.MaxIdentityBytes), so bad input is a precise
// 400 to the sender rather than a store failure it would retry forever (an
// index entry has a size limit), an effect no retry can deliver (the event
// id travels in the causation header) or a page of the admin API
// megabytes long.
func checkIdentities(ev envelope.Event) error {
	for _, f := range []struct{ name, v string }{
		{"event id", ev.EventID}, {"type", ev.Type}, {"entity", ev.Entity}, {"account", ev.Account},
	} {
		if err := store.CheckID(f.name, f.v); err != nil {
			return err
		}
	}
	return nil
}

func reply(w http.ResponseWriter, code int, resp Response) int {
	writeJSON(w, code, resp)
	return code
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// eventAttrs names a request's events on its span: the event id, or the
// ids of a batch, and the type of the first.
func eventAttrs(events []envelope.Event) []attribute.KeyValue {
	if len(events) == 1 {
		return []attribute.KeyValue{tracing.AttrEventID.String(events[0].EventID), attribute.String("hookledger.event_type", events[0].Type)}
	}
	ids := make([]string, len(events))
	for i, ev := range events {
		ids[i] = ev.EventID
	}
	return []attribute.KeyValue{attribute.StringSlice("hookledger.event_ids", ids), attribute.String("hookledger.event_type", events[0].Type)}
}
