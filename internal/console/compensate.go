package console

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
)

// compensateStore is the store's part that records a compensation;
// store.Store has it, a read-only store does not.
type compensateStore interface {
	EffectCompensate(ctx context.Context, p *store.EffectCompensateParams) (*store.Effect, error)
}

// canCompensate reports whether the effect page offers the compensate
// form: a done, acknowledged or resolved effect that is not itself a
// compensation, whose definition declares a compensation request, on a
// store that can record one. The store decides in the end (already
// compensated is only known there).
func (c *Console) canCompensate(e *store.Effect) bool {
	if c.extra.Compensations == nil || e.Compensates != 0 {
		return false
	}
	if _, ok := c.st.(compensateStore); !ok {
		return false
	}
	switch e.State {
	case store.EffectDone, store.EffectAcknowledged, store.EffectResolved:
		return c.extra.Compensations.HasCompensation(e)
	}
	return false
}

const compensateDone = "Compensation recorded: the delivery worker sends it as a new effect under its own episode key."

// compensate serves POST /effects/{id}/compensate, the CSRF token already
// checked: it does what POST /api/v1/effects/{id}/compensate does
// (flow.Compensate), then shows the new compensation effect; refused, it
// shows the effect page again with the reason and the note typed.
func (c *Console) compensate(w http.ResponseWriter, r *http.Request) {
	id, d, ok := c.loadEffect(w, r)
	if !ok {
		return
	}
	note := strings.TrimSpace(r.PostFormValue("note"))
	d.Note = note
	refuse := func(code int, msg string) {
		c.render(w, r, code, "effect", &view{Title: "Effect " + r.PathValue("id"), Nav: "effects", Error: msg, Data: d})
	}
	cs, isCS := c.st.(compensateStore)
	if c.extra.Compensations == nil || !isCS {
		refuse(http.StatusUnprocessableEntity, "This server cannot compensate effects: it has no flow configuration attached.")
		return
	}
	if note == "" {
		refuse(http.StatusBadRequest, "Compensate needs a note: say why the effect is undone.")
		return
	}
	if d.Effect.Compensates != 0 {
		refuse(http.StatusConflict, "This effect is itself the compensation of effect "+
			strconv.FormatInt(d.Effect.Compensates, 10)+": it is not compensated in turn.")
		return
	}
	e, err := flow.Compensate(r.Context(), cs, c.extra.Compensations.CompensationRequest, d.Effect, actor, note, c.clk.Now())
	switch {
	case errors.Is(err, flow.ErrNoCompensation):
		refuse(http.StatusUnprocessableEntity, "This effect cannot be compensated: "+err.Error()+".")
		return
	case errors.Is(err, flow.ErrCompensationRequest):
		refuse(http.StatusUnprocessableEntity, "The compensation request could not be rendered: "+err.Error()+".")
		return
	case errors.Is(err, store.ErrConflict):
		refuse(http.StatusConflict, "Effect "+r.PathValue("id")+" is already compensated.")
		return
	case errors.Is(err, store.ErrInvalidTransition), errors.Is(err, store.ErrInvalidArgument):
		refuse(http.StatusConflict, "Cannot compensate an effect that is "+string(d.Effect.State)+
			": only a done, acknowledged or resolved effect can be (it may have changed since the page was loaded).")
		return
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, "No effect "+r.PathValue("id")+".")
		return
	case err != nil:
		c.storeFailed(w, r, "compensate effect", err)
		return
	}
	if c.extra.Wake != nil {
		c.extra.Wake()
	}
	c.log.Info("console: operator action", "effect", id, "action", "compensate", "compensation", e.ID, "actor", actor)
	http.Redirect(w, r, "/effects/"+strconv.FormatInt(e.ID, 10)+"?done=compensate", http.StatusSeeOther)
}
