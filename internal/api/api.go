// Package api serves the authenticated admin API under /api/v1: JSON
// resources named by plural nouns, paged with opaque cursors. Bearer
// (bearer.go) admits the requests that carry admin.token and limits the
// others per client address; the server puts /metrics behind one too.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/hookledger/hookledger/internal/authlimit"
	"github.com/hookledger/hookledger/internal/openapi"
	"github.com/hookledger/hookledger/internal/store"
)

// Store is what the API reads.
type Store interface {
	EventList(ctx context.Context, p *store.EventListParams) (*store.EventListResult, error)
}

// Handler serves /api/v1.
type Handler struct {
	st  Store
	log *slog.Logger
	mux *http.ServeMux
	now func() time.Time
	// bearer admits the requests that carry admin.token.
	bearer *Bearer
	// keys names the idempotency key each effect's destination is sent
	// (ServeIdempotencyKeys); nil shows none.
	keys IdempotencyKeys
	// owners are the configured owners the exception queue names
	// (ServeOwners).
	owners store.Owners
	// routes are the patterns registered (handle), in order: what the
	// OpenAPI document must describe.
	routes []string
}

// New returns the API handler. An empty token disables the API (every
// request is refused) rather than leaving it open.
func New(st Store, token string, log *slog.Logger, now func() time.Time) *Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{st: st, log: log, mux: http.NewServeMux(), now: now,
		bearer: NewBearer(token, authlimit.New(authlimit.Options{Now: now}), log, "admin API")}
	h.handle("GET /api/v1/events", http.HandlerFunc(h.listEvents))
	h.handle("POST /api/v1/events/resolve", http.HandlerFunc(h.resolveEvent))
	h.handle("GET /api/v1/effects", http.HandlerFunc(h.listEffects))
	h.handle("GET /api/v1/effects/{id}", http.HandlerFunc(h.getEffect))
	h.handle("POST /api/v1/effects/{id}/{action}", http.HandlerFunc(h.operateEffect))
	h.handle("GET /api/v1/audit", http.HandlerFunc(h.listAudit))
	h.handle("GET /api/v1/exceptions", http.HandlerFunc(h.listExceptions))
	h.handle("GET /api/v1/openapi.yaml", http.HandlerFunc(serveDocument))
	// Not a route: the answer to every path the API does not serve.
	h.mux.HandleFunc("/api/v1/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such resource: "+r.URL.Path)
	})
	return h
}

// handle registers a route and remembers its pattern for Routes.
func (h *Handler) handle(pattern string, handler http.Handler) {
	h.mux.Handle(pattern, handler)
	h.routes = append(h.routes, pattern)
}

// Routes lists the patterns of the routes registered so far ("GET
// /api/v1/events", …), in the order they were: the routes the OpenAPI
// document (package openapi) describes, as a test checks.
func (h *Handler) Routes() []string { return slices.Clone(h.routes) }

// Route is the pattern of the route r would be served by, or "" when none
// would (the answer is then a 404, or a 405 for another method).
func (h *Handler) Route(r *http.Request) string {
	_, pattern := h.mux.Handler(r)
	if !slices.Contains(h.routes, pattern) {
		return ""
	}
	return pattern
}

// serveDocument answers GET /api/v1/openapi.yaml with the OpenAPI document
// of this API.
func serveDocument(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", openapi.ContentType)
	_, _ = w.Write(openapi.Document)
}

// LimitGuesses replaces the handler's own count of wrong tokens with l,
// which the server shares with the console (one count per client for
// both) and which knows the trusted proxies.
func (h *Handler) LimitGuesses(l *authlimit.Limiter) { h.bearer.guard = l }

// ServeHTTP checks the bearer token, then routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if h.bearer.Admit(w, r) {
		h.mux.ServeHTTP(w, r)
	}
}

// EventJSON is the pinned shape of one event, plus its routes.
type EventJSON struct {
	Source  string `json:"source"`
	EventID string `json:"event_id"`
	Type    string `json:"type"`
	// Entity is the envelope's entity; when the envelope has none and
	// every route computed the same one, that one.
	Entity      string      `json:"entity"`
	OccurredAt  *string     `json:"occurred_at"`
	ReceivedAt  string      `json:"received_at"`
	Deliveries  int         `json:"deliveries"`
	Disposition string      `json:"disposition"`
	Routes      []RouteJSON `json:"routes"`
}

// RouteJSON is where one flow put the event: the entity it computed (empty
// when that failed), how the flow's latest pass settled and why (a dead
// letter's cause; empty when there is nothing to say), and for a dead
// letter the suggested repair (empty otherwise).
type RouteJSON struct {
	Flow        string `json:"flow"`
	Entity      string `json:"entity"`
	Disposition string `json:"disposition"`
	Reason      string `json:"reason"`
	Repair      string `json:"repair"`
}

// EventListJSON is the pinned response of GET /api/v1/events.
type EventListJSON struct {
	Events     []EventJSON `json:"events"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// NewEventJSON renders an event listed with its routes.
func NewEventJSON(e *store.Event) EventJSON {
	j := EventJSON{
		Source: e.Source, EventID: e.EventID, Type: e.Type, Entity: e.Entity,
		ReceivedAt: e.ReceivedAt.UTC().Format(time.RFC3339Nano), Deliveries: e.Deliveries,
		Disposition: string(e.Disposition), Routes: make([]RouteJSON, 0, len(e.Routes)),
	}
	if !e.OccurredAt.IsZero() {
		s := e.OccurredAt.UTC().Format(time.RFC3339Nano)
		j.OccurredAt = &s
	}
	for _, r := range e.Routes {
		j.Routes = append(j.Routes, RouteJSON{Flow: r.Flow, Entity: r.Entity, Disposition: string(r.Disposition), Reason: r.Reason,
			Repair: RouteRepair(r)})
	}
	if j.Entity == "" {
		j.Entity = agreedEntity(e.Routes)
	}
	return j
}

// RouteRepair is the suggested repair of a route: a dead letter's, by its
// reason; empty for any other disposition.
func RouteRepair(r store.EventRoute) string {
	if r.Disposition != store.DispositionDeadLettered {
		return ""
	}
	return store.DeadLetterRepair(r.Reason)
}

// agreedEntity is the entity every route computed, or empty when there are
// no routes, one failed or two disagree.
func agreedEntity(routes []store.EventRoute) string {
	if len(routes) == 0 {
		return ""
	}
	for _, r := range routes[1:] {
		if r.Entity != routes[0].Entity {
			return ""
		}
	}
	return routes[0].Entity
}

// listEvents serves GET /api/v1/events (parameters: EventParams).
func (h *Handler) listEvents(w http.ResponseWriter, r *http.Request) {
	p, err := EventFilter(r.URL.Query())
	if err != nil {
		h.badParam(w, err)
		return
	}
	res, err := h.st.EventList(r.Context(), p)
	if err != nil {
		h.storeFailed(w, "list events", err)
		return
	}
	out := EventListJSON{Events: make([]EventJSON, 0, len(res.Events))}
	for _, e := range res.Events {
		out.Events = append(out.Events, NewEventJSON(e))
	}
	if res.NextAfterPK != 0 {
		out.NextCursor = EncodeCursor(res.NextAfterPK)
	}
	writeJSON(w, http.StatusOK, out)
}

// trimPage cuts a list fetched with limit+1 rows back to limit and returns
// the cursor of the next page, empty when there is none.
func trimPage[T any](rows []T, limit int, id func(T) int64) ([]T, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	rows = rows[:limit]
	return rows, EncodeCursor(id(rows[limit-1]))
}

// storeFailed answers a failure of the store: 503 with nothing of the
// database's own words, which go to the log. A full disk or a lost
// connection is not the client's mistake, and its text can name files,
// hosts or SQL.
func (h *Handler) storeFailed(w http.ResponseWriter, op string, err error) {
	h.log.Error("admin API: store failed", "op", op, "err", err)
	writeError(w, http.StatusServiceUnavailable, "store unavailable")
}

// badParam answers a query the list cannot use: 400 naming the parameter.
func (h *Handler) badParam(w http.ResponseWriter, err error) {
	var pe *ParamError
	if errors.As(err, &pe) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": pe.Error(), "param": pe.Param})
		return
	}
	writeError(w, http.StatusBadRequest, err.Error())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// auditStore is what the audit resource needs.
type auditStore interface {
	AuditList(ctx context.Context, p *store.AuditListParams) ([]*store.AuditEntry, error)
}

// AuditJSON is one audit row: who or what did what, when, and why.
type AuditJSON struct {
	ID      int64  `json:"id"`
	At      string `json:"at"`
	Actor   string `json:"actor"`
	Action  string `json:"action"`
	Source  string `json:"source,omitempty"`
	EventID string `json:"event_id,omitempty"`
	Entity  string `json:"entity,omitempty"`
	Detail  string `json:"detail"`
}

// listAudit serves GET /api/v1/audit (parameters: AuditParams).
func (h *Handler) listAudit(w http.ResponseWriter, r *http.Request) {
	as, ok := h.st.(auditStore)
	if !ok {
		writeError(w, http.StatusNotFound, "this store has no audit trail")
		return
	}
	p, err := AuditFilter(r.URL.Query())
	if err != nil {
		h.badParam(w, err)
		return
	}
	// One row more than asked tells whether a next page exists.
	limit := p.Limit
	p.Limit++
	rows, err := as.AuditList(r.Context(), p)
	if err != nil {
		h.storeFailed(w, "list audit", err)
		return
	}
	out := struct {
		Audit      []AuditJSON `json:"audit"`
		NextCursor string      `json:"next_cursor,omitempty"`
	}{Audit: []AuditJSON{}}
	rows, out.NextCursor = trimPage(rows, limit, func(a *store.AuditEntry) int64 { return a.ID })
	for _, a := range rows {
		out.Audit = append(out.Audit, AuditJSON{ID: a.ID, At: a.At.UTC().Format(time.RFC3339Nano), Actor: a.Actor,
			Action: a.Action, Source: a.Source, EventID: a.EventID, Entity: a.Entity, Detail: a.Detail})
	}
	writeJSON(w, http.StatusOK, out)
}
