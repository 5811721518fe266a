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
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// effectStore is what the effects resources need; a store without a ledger
// answers 404 for them.
type effectStore interface {
	EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error)
	EffectGet(ctx context.Context, id int64) (*store.Effect, error)
	EffectOperate(ctx context.Context, p *store.EffectOperateParams) (*store.Effect, error)
	AttemptList(ctx context.Context, effectID int64) ([]*store.Attempt, error)
}

// EffectJSON is one effect as the API and the CLI show it.
type EffectJSON struct {
	ID         int64  `json:"id"`
	EpisodeKey string `json:"episode_key"`
	// IdempotencyKey is the key sent in the destination's idempotency
	// header (the episode key, or its hashed form), omitted when the
	// destination has none.
	IdempotencyKey  string `json:"idempotency_key,omitempty"`
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
	// SourceEventIDs is every event that asked for the effect, oldest
	// first: source_event_id, then each later one (a replay, a duplicate
	// with a new id, another flow's route). Always present.
	SourceEventIDs []string `json:"source_event_ids"`
	CausationID    string   `json:"causation_id,omitempty"`
	Hop            int      `json:"hop"`
	// Compensates is the id of the effect this one undoes (omitted for
	// an effect that is not a compensation).
	Compensates int64  `json:"compensates,omitempty"`
	CreatedAt   string `json:"created_at"`
	UpdatedAt   string `json:"updated_at"`
	// Request is the request the effect sends its destination, as stored
	// (a JSON string when what is stored is not JSON). Lists leave it
	// out: they never read it.
	Request json.RawMessage `json:"request,omitempty"`
}

// NewEffectJSON renders an effect.
func NewEffectJSON(e *store.Effect) EffectJSON {
	j := EffectJSON{
		ID: e.ID, EpisodeKey: e.EpisodeKey, Flow: e.Flow, Entity: e.Entity, Version: e.Version, Effect: e.Effect,
		Destination: e.Destination, State: string(e.State), Attempts: e.Attempts, Redrives: e.Redrives,
		ErrorClass: string(e.ErrorClass), Reason: e.Reason, SuggestedRepair: e.SuggestedRepair, LastResponse: e.LastResponse,
		Owner: e.Owner, Note: e.Note, DestinationRef: e.DestinationRef, Source: e.Source, SourceEventID: e.SourceEventID,
		SourceEventIDs: e.SourceEventIDs(), CausationID: e.CausationID, Hop: e.Hop, Compensates: e.Compensates,
		CreatedAt: e.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: e.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
	if !e.NextAttemptAt.IsZero() {
		j.NextAttemptAt = e.NextAttemptAt.UTC().Format(time.RFC3339Nano)
	}
	j.Request = requestJSON(e.Request)
	return j
}

// requestJSON is a stored request fit for a JSON answer: a raw value that
// is not JSON would make the whole answer fail to encode, so it is sent
// as a string.
func requestJSON(r json.RawMessage) json.RawMessage {
	if len(r) == 0 || json.Valid(r) {
		return r
	}
	s, _ := json.Marshal(string(r)) // a string always encodes
	return s
}

// IdempotencyKeys names, for an effect's destination and episode key, the
// header its idempotency key goes in and the key sent ("", "" when the
// destination has none); deliver.KeyFunc makes one from the config.
type IdempotencyKeys func(destination, episodeKey string) (header, key string)

// ServeIdempotencyKeys makes every effect the API answers with carry
// idempotency_key, the key its destination is sent beside the episode
// key: a vendor's dashboard shows that one.
func (h *Handler) ServeIdempotencyKeys(k IdempotencyKeys) { h.keys = k }

// effectJSON renders an effect with its idempotency key.
func (h *Handler) effectJSON(e *store.Effect) EffectJSON {
	j := NewEffectJSON(e)
	if h.keys != nil {
		_, j.IdempotencyKey = h.keys(e.Destination, e.EpisodeKey)
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
	// Restart is what restarted the retry policy's count before this call
	// ("operator retry", "re-drive"); the numbers go on across it.
	Restart string `json:"restart,omitempty"`
}

// NewAttemptJSON renders an attempt.
func NewAttemptJSON(a *store.Attempt) AttemptJSON {
	return AttemptJSON{Number: a.Number, StartedAt: a.StartedAt.UTC().Format(time.RFC3339Nano), DurationMS: a.Duration.Milliseconds(),
		Status: a.Status, Class: string(a.Class), Error: a.Error, Response: a.Response, RetryAfter: a.RetryAfter,
		RetryAfterUnit: a.RetryAfterUnit, WaitMS: a.Wait.Milliseconds(), Reconcile: a.Reconcile, Restart: a.Restart}
}

func (h *Handler) effects() (effectStore, bool) {
	es, ok := h.st.(effectStore)
	return es, ok
}

// listEffects serves GET /api/v1/effects (parameters: EffectParams). With
// no state it lists every state; state=exceptions is the exception queue.
func (h *Handler) listEffects(w http.ResponseWriter, r *http.Request) {
	es, ok := h.effects()
	if !ok {
		writeError(w, http.StatusNotFound, "this store has no effect ledger")
		return
	}
	p, err := EffectFilter(r.URL.Query(), StateAny)
	if err != nil {
		h.badParam(w, err)
		return
	}
	// One row more than asked tells whether a next page exists. The
	// answer carries no requests, so none is read.
	limit := p.Limit
	p.Limit++
	p.WithoutRequest = true
	list, err := es.EffectList(r.Context(), p)
	if err != nil {
		h.storeFailed(w, "list effects", err)
		return
	}
	out := struct {
		Effects    []EffectJSON `json:"effects"`
		NextCursor string       `json:"next_cursor,omitempty"`
	}{Effects: []EffectJSON{}}
	list, out.NextCursor = trimPage(list, limit, func(e *store.Effect) int64 { return e.ID })
	for _, e := range list {
		out.Effects = append(out.Effects, h.effectJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *Handler) effectID(w http.ResponseWriter, r *http.Request) (effectStore, int64, bool) {
	es, ok := h.effects()
	if !ok {
		writeError(w, http.StatusNotFound, "this store has no effect ledger")
		return nil, 0, false
	}
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "id: expected a positive integer", "param": "id"})
		return nil, 0, false
	}
	return es, id, true
}

// getEffect serves GET /api/v1/effects/{id}, which takes no parameters.
func (h *Handler) getEffect(w http.ResponseWriter, r *http.Request) {
	es, id, ok := h.effectID(w, r)
	if !ok {
		return
	}
	if err := newQuery(r.URL.Query()).result(); err != nil {
		h.badParam(w, err)
		return
	}
	e, err := es.EffectGet(r.Context(), id)
	if err != nil {
		h.storeFailed(w, "get effect", err)
		return
	}
	if e == nil {
		writeError(w, http.StatusNotFound, "no such effect")
		return
	}
	atts, err := es.AttemptList(r.Context(), id)
	if err != nil {
		h.storeFailed(w, "list attempts", err)
		return
	}
	out := struct {
		Effect   EffectJSON    `json:"effect"`
		Attempts []AttemptJSON `json:"attempts"`
	}{Effect: h.effectJSON(e), Attempts: []AttemptJSON{}}
	for _, a := range atts {
		out.Attempts = append(out.Attempts, NewAttemptJSON(a))
	}
	writeJSON(w, http.StatusOK, out)
}

// operateBody is the body of POST /api/v1/effects/{id}/{action}.
type operateBody struct {
	Note  string `json:"note"`
	Owner string `json:"owner"`
	Actor string `json:"actor"`
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
	in, msg := readOperateBody(r)
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	if action == store.OperateResolve && strings.TrimSpace(in.Note) == "" {
		writeError(w, http.StatusBadRequest, "note: required to resolve: say how the effect was closed")
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
		writeError(w, http.StatusConflict, action+": not allowed from the effect's state")
		return
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "no such effect")
		return
	case errors.Is(err, store.ErrInvalidArgument):
		// The checks above should have caught it: the request, not the
		// store, is at fault.
		h.log.Warn("admin API: operator action refused", "action", action, "err", err)
		writeError(w, http.StatusBadRequest, action+": the request is not valid for this action")
		return
	case err != nil:
		h.storeFailed(w, "operate on effect", err)
		return
	case e == nil:
		writeError(w, http.StatusNotFound, "no such effect")
		return
	}
	writeJSON(w, http.StatusOK, map[string]EffectJSON{"effect": h.effectJSON(e)})
}

// readOperateBody reads the optional JSON body strictly: an unknown field
// is a mistake (an "ownr" must not assign nobody), reported by name.
func readOperateBody(r *http.Request) (operateBody, string) {
	var in operateBody
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		return in, "body: could not be read"
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return in, ""
	}
	const shape = `body: expected JSON {"note": "...", "owner": "...", "actor": "..."}`
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return in, shape
	}
	names := make([]string, 0, len(fields))
	for name := range fields {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if name != "note" && name != "owner" && name != "actor" {
			return in, fmt.Sprintf("body: unknown field %q; expected note, owner, actor", name)
		}
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return in, shape
	}
	return in, ""
}
