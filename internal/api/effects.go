package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// EffectStore is what the effects resources need; a store without a ledger
// answers 404 for them.
type EffectStore interface {
	EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error)
	EffectGet(ctx context.Context, id int64) (*store.Effect, error)
	EffectOperate(ctx context.Context, p *store.EffectOperateParams) (*store.Effect, error)
	AttemptList(ctx context.Context, effectID int64) ([]*store.Attempt, error)
}

// EffectJSON is one effect as the API and the CLI show it.
type EffectJSON struct {
	ID              int64  `json:"id"`
	EpisodeKey      string `json:"episode_key"`
	Flow            string `json:"flow"`
	Entity          string `json:"entity"`
	Version         string `json:"version"`
	Effect          string `json:"effect"`
	Destination     string `json:"destination"`
	State           string `json:"state"`
	Attempts        int    `json:"attempts"`
	Redrives        int    `json:"redrives"`
	ErrorClass      string `json:"error_class,omitempty"`
	Reason          string `json:"reason,omitempty"`
	SuggestedRepair string `json:"suggested_repair,omitempty"`
	LastResponse    string `json:"last_response,omitempty"`
	Owner           string `json:"owner,omitempty"`
	Note            string `json:"note,omitempty"`
	DestinationRef  string `json:"destination_ref,omitempty"`
	NextAttemptAt   string `json:"next_attempt_at,omitempty"`
	Source          string `json:"source"`
	SourceEventID   string `json:"source_event_id"`
	CausationID     string `json:"causation_id,omitempty"`
	Hop             int    `json:"hop"`
	CreatedAt       string `json:"created_at"`
	UpdatedAt       string `json:"updated_at"`
}

// NewEffectJSON renders an effect.
func NewEffectJSON(e *store.Effect) EffectJSON {
	j := EffectJSON{
		ID: e.ID, EpisodeKey: e.EpisodeKey, Flow: e.Flow, Entity: e.Entity, Version: e.Version, Effect: e.Effect,
		Destination: e.Destination, State: string(e.State), Attempts: e.Attempts, Redrives: e.Redrives,
		ErrorClass: string(e.ErrorClass), Reason: e.Reason, SuggestedRepair: e.SuggestedRepair, LastResponse: e.LastResponse,
		Owner: e.Owner, Note: e.Note, DestinationRef: e.DestinationRef, Source: e.Source, SourceEventID: e.SourceEventID,
		CausationID: e.CausationID, Hop: e.Hop,
		CreatedAt: e.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: e.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
	if !e.NextAttemptAt.IsZero() {
		j.NextAttemptAt = e.NextAttemptAt.UTC().Format(time.RFC3339Nano)
	}
	return j
}

// AttemptJSON is one call to a destination.
type AttemptJSON struct {
	Number         int    `json:"number"`
	StartedAt      string `json:"started_at"`
	DurationMS     int64  `json:"duration_ms"`
	Status         int    `json:"status"`
	Class          string `json:"class,omitempty"`
	Error          string `json:"error,omitempty"`
	Response       string `json:"response,omitempty"`
	RetryAfter     string `json:"retry_after,omitempty"`
	RetryAfterUnit string `json:"retry_after_unit,omitempty"`
	WaitMS         int64  `json:"wait_ms"`
	Reconcile      bool   `json:"reconcile,omitempty"`
}

// NewAttemptJSON renders an attempt.
func NewAttemptJSON(a *store.Attempt) AttemptJSON {
	return AttemptJSON{Number: a.Number, StartedAt: a.StartedAt.UTC().Format(time.RFC3339Nano), DurationMS: a.Duration.Milliseconds(),
		Status: a.Status, Class: string(a.Class), Error: a.Error, Response: a.Response, RetryAfter: a.RetryAfter,
		RetryAfterUnit: a.RetryAfterUnit, WaitMS: a.Wait.Milliseconds(), Reconcile: a.Reconcile}
}

func (h *Handler) effects() (EffectStore, bool) {
	es, ok := h.st.(EffectStore)
	return es, ok
}

func (h *Handler) listEffects(w http.ResponseWriter, r *http.Request) {
	es, ok := h.effects()
	if !ok {
		writeError(w, http.StatusNotFound, "this store has no effect ledger")
		return
	}
	q := r.URL.Query()
	after, limit, ok := readPage(w, q)
	if !ok {
		return
	}
	// One row more than asked tells whether a next page exists.
	p := &store.EffectListParams{Flow: q.Get("flow"), Entity: q.Get("entity"), State: store.EffectState(q.Get("state")),
		AfterID: after, Limit: limit + 1}
	list, err := es.EffectList(r.Context(), p)
	if err != nil {
		h.log.Error("list effects", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable")
		return
	}
	out := struct {
		Effects    []EffectJSON `json:"effects"`
		NextCursor string       `json:"next_cursor,omitempty"`
	}{Effects: []EffectJSON{}}
	list, out.NextCursor = trimPage(list, limit, func(e *store.Effect) int64 { return e.ID })
	for _, e := range list {
		out.Effects = append(out.Effects, NewEffectJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) effectID(w http.ResponseWriter, r *http.Request) (EffectStore, int64, bool) {
	es, ok := h.effects()
	if !ok {
		writeError(w, http.StatusNotFound, "this store has no effect ledger")
		return nil, 0, false
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusBadRequest, "id: expected a positive integer")
		return nil, 0, false
	}
	return es, id, true
}

func (h *Handler) getEffect(w http.ResponseWriter, r *http.Request) {
	es, id, ok := h.effectID(w, r)
	if !ok {
		return
	}
	e, err := es.EffectGet(r.Context(), id)
	if err != nil {
		h.log.Error("get effect", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable")
		return
	}
	if e == nil {
		writeError(w, http.StatusNotFound, "no such effect")
		return
	}
	atts, err := es.AttemptList(r.Context(), id)
	if err != nil {
		h.log.Error("list attempts", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable")
		return
	}
	out := struct {
		Effect   EffectJSON    `json:"effect"`
		Attempts []AttemptJSON `json:"attempts"`
	}{Effect: NewEffectJSON(e), Attempts: []AttemptJSON{}}
	for _, a := range atts {
		out.Attempts = append(out.Attempts, NewAttemptJSON(a))
	}
	writeJSON(w, http.StatusOK, out)
}

// operateEffect serves POST /api/v1/effects/{id}/{action} with a JSON body
// {"note": "...", "owner": "...", "actor": "alice"}.
func (h *Handler) operateEffect(w http.ResponseWriter, r *http.Request) {
	es, id, ok := h.effectID(w, r)
	if !ok {
		return
	}
	action := r.PathValue("action")
	if action != store.OperateRetry && action != store.OperateResolve && action != store.OperateAssign {
		writeError(w, http.StatusNotFound, "action: retry, resolve or assign")
		return
	}
	var in struct {
		Note  string `json:"note"`
		Owner string `json:"owner"`
		Actor string `json:"actor"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err == nil && len(body) > 0 {
		err = json.Unmarshal(body, &in)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "body: expected JSON {\"note\":..., \"owner\":..., \"actor\":...}")
		return
	}
	if in.Actor == "" {
		in.Actor = "api"
	}
	e, err := es.EffectOperate(r.Context(), &store.EffectOperateParams{
		EffectID: id, Action: action, Actor: "operator:" + in.Actor, Owner: in.Owner, Note: in.Note, Now: h.now(),
	})
	switch {
	case errors.Is(err, store.ErrInvalidTransition):
		writeError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, err.Error())
		return
	case e == nil:
		writeError(w, http.StatusNotFound, "no such effect")
		return
	}
	writeJSON(w, http.StatusOK, map[string]EffectJSON{"effect": NewEffectJSON(e)})
}
