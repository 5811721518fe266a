package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
)

// CompensationRenderer renders the compensation request of an effect from
// its flow's effect definition (the flow engine does).
type CompensationRenderer interface {
	CompensationRequest(ctx context.Context, o *store.Effect) (json.RawMessage, error)
}

// compensateStore is what POST /api/v1/effects/{id}/compensate needs.
type compensateStore interface {
	EffectGet(ctx context.Context, id int64) (*store.Effect, error)
	EffectCompensate(ctx context.Context, p *store.EffectCompensateParams) (*store.Effect, error)
}

// ServeCompensations enables POST /api/v1/effects/{id}/compensate, an
// operator's request to undo a done effect with the compensation its
// effect definition declares. The server calls it with its flow engine;
// without it, compensate is not an action of the API.
func (h *Handler) ServeCompensations(r CompensationRenderer) {
	h.handle("POST /api/v1/effects/{id}/compensate", &compensations{h: h, render: r})
}

type compensations struct {
	h      *Handler
	render CompensationRenderer
}

// compensateBody is the body of POST /api/v1/effects/{id}/compensate.
type compensateBody struct {
	Note  string `json:"note"`
	Actor string `json:"actor"`
}

// ServeHTTP answers 201 {"effect": ...} with the new compensation effect;
// 400 for a missing note or a malformed body; 404 for an unknown effect;
// 409 when the effect is already compensated, is itself a compensation,
// or is not done, acknowledged or resolved; 422 when its definition has
// no compensation or the request cannot be rendered.
func (c *compensations) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := c.h
	es, id, ok := h.effectID(w, r)
	if !ok {
		return
	}
	cs, ok := es.(compensateStore)
	if !ok {
		writeError(w, http.StatusNotFound, "this store cannot compensate effects")
		return
	}
	in, msg := readCompensateBody(r)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if strings.TrimSpace(in.Note) == "" {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "note: required: say why the effect is undone", "param": "note"})
		return
	}
	if in.Actor == "" {
		in.Actor = "api"
	}
	orig, err := cs.EffectGet(r.Context(), id)
	if err != nil {
		h.storeFailed(w, "get effect", err)
		return
	}
	if orig == nil {
		writeError(w, http.StatusNotFound, "no such effect")
		return
	}
	if orig.Compensates != 0 {
		writeError(w, http.StatusConflict, fmt.Sprintf("compensate: effect %d is itself the compensation of effect %d", id, orig.Compensates))
		return
	}
	e, err := flow.Compensate(r.Context(), cs, c.render.CompensationRequest, orig, "operator:"+in.Actor, in.Note, h.now())
	switch {
	case errors.Is(err, flow.ErrNoCompensation), errors.Is(err, flow.ErrCompensationRequest):
		writeError(w, http.StatusUnprocessableEntity, "compensate: "+err.Error())
		return
	case errors.Is(err, store.ErrConflict):
		writeError(w, http.StatusConflict, fmt.Sprintf("compensate: effect %d is already compensated", id))
		return
	case errors.Is(err, store.ErrInvalidTransition):
		writeError(w, http.StatusConflict, fmt.Sprintf("compensate: effect %d is %s; only a done, acknowledged or resolved effect can be compensated", id, orig.State))
		return
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "no such effect")
		return
	case errors.Is(err, store.ErrInvalidArgument):
		h.log.Warn("admin API: compensation refused", "effect", id, "err", err)
		writeError(w, http.StatusConflict, fmt.Sprintf("compensate: effect %d cannot be compensated", id))
		return
	case err != nil:
		h.storeFailed(w, "compensate effect", err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]EffectJSON{"effect": h.effectJSON(e)})
}

// readCompensateBody reads the JSON body strictly, naming an unknown
// field.
func readCompensateBody(r *http.Request) (compensateBody, string) {
	var in compensateBody
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return in, "body: could not be read"
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return in, ""
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return in, fmt.Sprintf("body: unknown field %s; expected note, actor", name)
		}
		return in, `body: expected JSON {"note": "...", "actor": "..."}`
	}
	return in, ""
}
