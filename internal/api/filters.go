package api

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Every list reads its query strictly (docs/architecture.md, "House
// rules"): a parameter it does not know, one given twice, or a value it
// cannot use is the client's mistake and is answered 400 naming the
// parameter, never ignored. An empty value is the same as no parameter.

// ParamError is a query parameter the list cannot use. The CLI verbs that
// share these readers report it with the flag of the same name.
type ParamError struct {
	Param string
	Msg   string
}

func (e *ParamError) Error() string { return e.Param + ": " + e.Msg }

// Paging parameters every list takes.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// StateAny and StateExceptions are the two state filters that are not one
// state: every state, and the exception queue (dead and
// needs_reconciliation).
const (
	StateAny        = "any"
	StateExceptions = "exceptions"
)

// query reads one list's parameters, remembering the first mistake.
type query struct {
	v   url.Values
	err *ParamError
}

// newQuery checks that every parameter is one of allowed and is given at
// most once (sorted, so that the same query always names the same one).
func newQuery(v url.Values, allowed ...string) *query {
	q := &query{v: v}
	names := make([]string, 0, len(v))
	for name := range v {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch {
		case !slices.Contains(allowed, name):
			q.fail(name, "unknown parameter; this list takes "+strings.Join(allowed, ", "))
		case len(v[name]) > 1:
			q.fail(name, "given more than once")
		}
	}
	return q
}

func (q *query) fail(param, msg string) {
	if q.err == nil {
		q.err = &ParamError{Param: param, Msg: msg}
	}
}

// result is the first mistake, or nil.
func (q *query) result() error {
	if q.err == nil {
		return nil
	}
	return q.err
}

// str reads a text filter. Text that no store can hold (NUL, invalid
// UTF-8) can match nothing, and PostgreSQL refuses it as a parameter, so
// it is the client's mistake (400), never a store failure (503).
func (q *query) str(name string) string {
	v := q.v.Get(name)
	if err := store.CheckText(name, v); err != nil {
		q.fail(name, err.(*store.ValueError).Rule)
		return ""
	}
	return v
}

// time reads an RFC 3339 time.
func (q *query) time(name string) time.Time {
	s := q.v.Get(name)
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		q.fail(name, fmt.Sprintf("%q is not an RFC 3339 time (like 2026-11-03T09:30:00Z)", s))
		return time.Time{}
	}
	return t
}

// flag reads true or false; absent or empty (an unset CLI flag) is false.
func (q *query) flag(name string) bool {
	switch s := q.v.Get(name); s {
	case "", "false":
		return false
	case "true":
		return true
	default:
		q.fail(name, fmt.Sprintf("%q is not true or false", s))
		return false
	}
}

// span reads a from/to pair; to must come after from.
func (q *query) span(fromName, toName string) (from, to time.Time) {
	from, to = q.time(fromName), q.time(toName)
	if !from.IsZero() && !to.IsZero() && !to.After(from) {
		q.fail(toName, "must be after "+fromName)
	}
	return from, to
}

// oneOf reads a value of a closed set.
func oneOf[T ~string](q *query, name string, set []T) T {
	s := T(q.v.Get(name))
	if s != "" && !slices.Contains(set, s) {
		q.fail(name, fmt.Sprintf("%q is not one of %s", s, joinSet(set)))
		return ""
	}
	return s
}

func joinSet[T ~string](set []T) string {
	out := make([]string, len(set))
	for i, s := range set {
		out[i] = string(s)
	}
	return strings.Join(out, ", ")
}

// page reads the cursor and the limit.
func (q *query) page() (after int64, limit int) {
	limit = DefaultLimit
	if c := q.v.Get("cursor"); c != "" {
		id, err := DecodeCursor(c)
		if err != nil {
			q.fail("cursor", "not a cursor returned by this API")
		}
		after = id
	}
	if l := q.v.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > MaxLimit {
			q.fail("limit", fmt.Sprintf("expected an integer from 1 to %d", MaxLimit))
		} else {
			limit = n
		}
	}
	return after, limit
}

// eventParams lists the parameters of GET /api/v1/events.
var eventParams = []string{"source", "event_id", "type", "entity", "disposition",
	"received_from", "received_to", "occurred_from", "occurred_to", "cursor", "limit"}

// EventFilter reads the query of GET /api/v1/events. The params ask for
// the routes and for the limit (EventList reports whether more follow).
func EventFilter(v url.Values) (*store.EventListParams, error) {
	q := newQuery(v, eventParams...)
	p := &store.EventListParams{Source: q.str("source"), EventID: q.str("event_id"), Type: q.str("type"),
		Entity: q.str("entity"), Disposition: oneOf(q, "disposition", store.Dispositions()), WithRoutes: true}
	p.ReceivedFrom, p.ReceivedTo = q.span("received_from", "received_to")
	p.OccurredFrom, p.OccurredTo = q.span("occurred_from", "occurred_to")
	p.AfterPK, p.Limit = q.page()
	return p, q.result()
}

// auditParams lists the parameters of GET /api/v1/audit.
var auditParams = []string{"action", "source", "entity", "event_id", "from", "to", "cursor", "limit"}

// AuditFilter reads the query of GET /api/v1/audit. Limit is the page
// size asked for.
func AuditFilter(v url.Values) (*store.AuditListParams, error) {
	q := newQuery(v, auditParams...)
	p := &store.AuditListParams{Action: q.str("action"), Source: q.str("source"), Entity: q.str("entity"),
		EventID: q.str("event_id")}
	p.From, p.To = q.span("from", "to")
	p.AfterID, p.Limit = q.page()
	return p, q.result()
}

// EffectParams lists the parameters of GET /api/v1/effects.
var EffectParams = []string{"state", "flow", "entity", "destination", "owner", "class",
	"created_from", "created_to", "updated_from", "updated_to", "deadline_missed", "compensations", "cursor", "limit"}

// EffectFilter reads the query of GET /api/v1/effects. A missing state
// reads as defaultState (StateAny for the API, StateExceptions for the
// CLI). Limit is the page size asked for.
func EffectFilter(v url.Values, defaultState string) (*store.EffectListParams, error) {
	q := newQuery(v, EffectParams...)
	p := &store.EffectListParams{Flow: q.str("flow"), Entity: q.str("entity"), Destination: q.str("destination"),
		Owner: q.str("owner"), Class: oneOf(q, "class", store.ErrorClasses()),
		DeadlineMissed: q.flag("deadline_missed"), Compensations: q.flag("compensations")}
	state := q.str("state")
	if state == "" {
		state = defaultState
	}
	p.States = readStates(q, state)
	p.CreatedFrom, p.CreatedTo = q.span("created_from", "created_to")
	p.UpdatedFrom, p.UpdatedTo = q.span("updated_from", "updated_to")
	p.AfterID, p.Limit = q.page()
	return p, q.result()
}

// readStates reads a state filter: any (nil: every state), exceptions, or
// one or more states separated by commas.
func readStates(q *query, state string) []store.EffectState {
	switch state {
	case StateAny:
		return nil
	case StateExceptions:
		return store.ExceptionStates()
	}
	var out []store.EffectState
	for s := range strings.SplitSeq(state, ",") {
		st := store.EffectState(strings.TrimSpace(s))
		if !slices.Contains(store.EffectStates(), st) {
			q.fail("state", fmt.Sprintf("%q is not a state; want %s, %s, or states separated by commas: %s",
				st, StateAny, StateExceptions, joinSet(store.EffectStates())))
			return nil
		}
		out = append(out, st)
	}
	return out
}

// EncodeCursor is the opaque cursor of the page after the row with this
// id; the API and the CLI write the same cursors.
func EncodeCursor(id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte("pk:" + strconv.FormatInt(id, 10)))
}

// DecodeCursor reads a cursor made by EncodeCursor.
func DecodeCursor(c string) (int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, err
	}
	n, ok := strings.CutPrefix(string(b), "pk:")
	if !ok {
		return 0, strconv.ErrSyntax
	}
	id, err := strconv.ParseInt(n, 10, 64)
	if err != nil || id < 0 {
		return 0, strconv.ErrSyntax
	}
	return id, nil
}
