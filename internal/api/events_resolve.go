package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/hookledger/hookledger/internal/store"
)

// eventResolveStore is what POST /api/v1/events/resolve needs; a store
// without it answers 404 for the resource.
type eventResolveStore interface {
	EventResolve(ctx context.Context, p *store.EventResolveParams) (*store.Event, error)
}

// EventResolveRequest is the body of POST /api/v1/events/resolve. Actor
// is optional: the audit row names "operator:<actor>", "operator:api"
// without it.
type EventResolveRequest struct {
	Source  string `json:"source"`
	EventID string `json:"event_id"`
	Note    string `json:"note"`
	Actor   string `json:"actor,omitempty"`
}

// EventResolveJSON is the answer: the event as GET /api/v1/events shows it.
type EventResolveJSON struct {
	Event EventJSON `json:"event"`
}

// resolveEvent serves POST /api/v1/events/resolve: an operator closes a
// dead-lettered event that no replay can repair. 200 {"event": ...}; 400
// naming the missing or unknown field; 404 for an unknown event; 409
// naming the event's disposition when it is not dead_lettered (or a replay
// of it is still pending).
func (h *Handler) resolveEvent(w http.ResponseWriter, r *http.Request) {
	rs, ok := h.st.(eventResolveStore)
	if !ok {
		writeError(w, http.StatusNotFound, "this store cannot resolve events")
		return
	}
	in, field, msg := readEventResolveBody(r)
	if msg != "" {
		badField(w, field, msg)
		return
	}
	for _, f := range []struct{ name, value, why string }{
		{"source", in.Source, "the source the event came from"},
		{"event_id", in.EventID, "the sender's event id"},
		{"note", in.Note, "say why the event is closed without a replay"},
	} {
		if strings.TrimSpace(f.value) == "" {
			badField(w, f.name, f.name+": required: "+f.why)
			return
		}
	}
	if in.Actor == "" {
		in.Actor = "api"
	}
	e, err := rs.EventResolve(r.Context(), &store.EventResolveParams{Source: in.Source, EventID: in.EventID,
		Actor: "operator:" + in.Actor, Note: in.Note, Now: h.now()})
	var se *store.EventStateError
	switch {
	case errors.As(err, &se):
		writeJSON(w, http.StatusConflict, map[string]string{"error": "resolve: " + se.Error(), "disposition": string(se.Disposition)})
		return
	case errors.Is(err, store.ErrInvalidTransition):
		writeError(w, http.StatusConflict, "resolve: only a dead_lettered event can be resolved")
		return
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("no such event: source %q, event_id %q", in.Source, in.EventID))
		return
	case errors.Is(err, store.ErrInvalidArgument):
		// The checks above should have caught it: the request, not the
		// store, is at fault.
		h.log.Warn("admin API: event resolve refused", "err", err)
		writeError(w, http.StatusBadRequest, "resolve: the request is not valid")
		return
	case err != nil:
		h.storeFailed(w, "resolve event", err)
		return
	}
	writeJSON(w, http.StatusOK, EventResolveJSON{Event: NewEventJSON(e)})
}

// badField answers 400 naming the body field at fault, under "param" as
// the lists name a query parameter.
func badField(w http.ResponseWriter, field, msg string) {
	out := map[string]string{"error": msg}
	if field != "" {
		out["param"] = field
	}
	writeJSON(w, http.StatusBadRequest, out)
}

// readEventResolveBody reads the JSON body strictly: an unknown field is
// a mistake (an "eventid" must not be taken for no event id), reported by
// name.
func readEventResolveBody(r *http.Request) (in EventResolveRequest, field, msg string) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return in, "", "body: could not be read"
	}
	const shape = `body: expected JSON {"source": "...", "event_id": "...", "note": "...", "actor": "..."}`
	if len(bytes.TrimSpace(body)) == 0 {
		return in, "", shape
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return in, "", shape
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch name {
		case "source", "event_id", "note", "actor":
			var s string
			if err := json.Unmarshal(fields[name], &s); err != nil {
				return in, name, name + ": expected a string"
			}
		default:
			return in, name, fmt.Sprintf("body: unknown field %q; expected source, event_id, note, actor", name)
		}
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return in, "", shape
	}
	return in, "", ""
}
