package api

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// ExceptionJSON is one entry of the exception queue: a dead effect (or
// one needing reconciliation) or a dead-lettered event. ID is the
// effect's id as text, or the event's event_id (with Source). AgeSeconds
// counts from Since: an effect's last change, an event's first receipt.
type ExceptionJSON struct {
	Kind       string `json:"kind"`
	ID         string `json:"id"`
	Reason     string `json:"reason"`
	Repair     string `json:"repair"`
	Owner      string `json:"owner"`
	AgeSeconds int64  `json:"age_seconds"`
	Since      string `json:"since"`
	// State is the effect's state or the event's disposition.
	State string `json:"state"`
	// Flows are the flows whose work is dead: the effect's flow, or each
	// flow that dead-lettered the event.
	Flows  []string `json:"flows"`
	Entity string   `json:"entity"`
	// Effect's identity and destination (kind effect).
	EpisodeKey  string `json:"episode_key,omitempty"`
	Destination string `json:"destination,omitempty"`
	ErrorClass  string `json:"error_class,omitempty"`
	// Event's identity (kind event).
	Source  string `json:"source,omitempty"`
	EventID string `json:"event_id,omitempty"`
	Type    string `json:"type,omitempty"`
}

// ExceptionListJSON is the response of GET /api/v1/exceptions.
type ExceptionListJSON struct {
	Exceptions []ExceptionJSON `json:"exceptions"`
	NextCursor string          `json:"next_cursor,omitempty"`
}

// NewExceptionJSON renders an entry of the queue as of now.
func NewExceptionJSON(x *store.Exception, now time.Time) ExceptionJSON {
	j := ExceptionJSON{Kind: x.Kind, Reason: x.Reason, Repair: x.Repair, Owner: x.Owner,
		AgeSeconds: max(int64(now.Sub(x.Since)/time.Second), 0), Since: x.Since.UTC().Format(time.RFC3339Nano), Flows: []string{}}
	switch x.Kind {
	case store.ExceptionEffect:
		e := x.Effect
		j.ID, j.State, j.Flows, j.Entity = strconv.FormatInt(e.ID, 10), string(e.State), []string{e.Flow}, e.Entity
		j.EpisodeKey, j.Destination, j.ErrorClass = e.EpisodeKey, e.Destination, string(e.ErrorClass)
	case store.ExceptionEvent:
		e := x.Event
		j.ID, j.State, j.Source, j.EventID, j.Type = e.EventID, string(e.Disposition), e.Source, e.EventID, e.Type
		j.Entity = NewEventJSON(e).Entity
		for _, r := range e.Routes {
			if r.Disposition == store.DispositionDeadLettered {
				j.Flows = append(j.Flows, r.Flow)
			}
		}
	}
	return j
}

// exceptionParams lists the parameters of GET /api/v1/exceptions.
var exceptionParams = []string{"kind", "cursor", "limit"}

// ExceptionFilter reads the query of GET /api/v1/exceptions.
func ExceptionFilter(v url.Values) (*store.ExceptionListParams, error) {
	q := newQuery(v, exceptionParams...)
	p := &store.ExceptionListParams{Kind: oneOf(q, "kind", store.ExceptionKinds())}
	// The cursor names a kind too, so page() does not read it.
	cur := q.v.Get("cursor")
	q.v = cloneWithout(v, "cursor")
	_, p.Limit = q.page()
	if cur != "" {
		var err error
		if p.AfterKind, p.AfterID, err = decodeExceptionCursor(cur); err != nil {
			q.fail("cursor", "not a cursor returned by this API")
		}
	}
	return p, q.result()
}

func cloneWithout(v url.Values, drop string) url.Values {
	out := url.Values{}
	for k, vs := range v {
		if k != drop {
			out[k] = vs
		}
	}
	return out
}

// EncodeExceptionCursor is the cursor of the page after the entry of kind
// with this id (an effect's id, an event's pk).
func EncodeExceptionCursor(kind string, id int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(kind + ":" + strconv.FormatInt(id, 10)))
}

// decodeExceptionCursor reads a cursor made by EncodeExceptionCursor.
func decodeExceptionCursor(c string) (string, int64, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return "", 0, err
	}
	kind, n, ok := strings.Cut(string(b), ":")
	if !ok || (kind != store.ExceptionEffect && kind != store.ExceptionEvent) {
		return "", 0, strconv.ErrSyntax
	}
	id, err := strconv.ParseInt(n, 10, 64)
	if err != nil || id < 0 {
		return "", 0, strconv.ErrSyntax
	}
	return kind, id, nil
}

// ServeOwners makes the exception queue name the configured owners of
// destinations and flows (config.Config.Owners) where nobody was assigned.
func (h *Handler) ServeOwners(o store.Owners) { h.owners = o }

// listExceptions serves GET /api/v1/exceptions (parameters:
// ExceptionParams): dead effects, then dead-lettered events.
func (h *Handler) listExceptions(w http.ResponseWriter, r *http.Request) {
	st, ok := h.st.(store.ExceptionReader)
	if !ok {
		writeError(w, http.StatusNotFound, "this store has no exception queue")
		return
	}
	p, err := ExceptionFilter(r.URL.Query())
	if err != nil {
		h.badParam(w, err)
		return
	}
	p.Owners = h.owners
	res, err := store.ExceptionList(r.Context(), st, p)
	if errors.Is(err, store.ErrInvalidArgument) {
		h.badParam(w, &ParamError{Param: "kind", Msg: fmt.Sprintf("want %s", joinSet(store.ExceptionKinds()))})
		return
	}
	if err != nil {
		h.storeFailed(w, "list exceptions", err)
		return
	}
	writeJSON(w, http.StatusOK, NewExceptionListJSON(res, h.now()))
}

// NewExceptionListJSON renders a page of the queue as of now.
func NewExceptionListJSON(res *store.ExceptionListResult, now time.Time) ExceptionListJSON {
	out := ExceptionListJSON{Exceptions: make([]ExceptionJSON, 0, len(res.Exceptions))}
	for _, x := range res.Exceptions {
		out.Exceptions = append(out.Exceptions, NewExceptionJSON(x, now))
	}
	if res.NextKind != "" {
		out.NextCursor = EncodeExceptionCursor(res.NextKind, res.NextID)
	}
	return out
}
