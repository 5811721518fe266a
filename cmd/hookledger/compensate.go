package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
)

// localEffects is the configured store for the effects verb, with the
// config that renders compensation requests (a running server renders
// them itself for --server).
type localEffects struct {
	store.Store
	cfg  *config.Config
	keys func(destination, episodeKey string) (header, key string)
}

// idempotencyKey works out the key from the config's destination, as the
// worker does when it sends it.
func (l *localEffects) idempotencyKey(e *store.Effect) string {
	if l.keys == nil {
		l.keys = deliver.KeyFunc(l.cfg)
	}
	_, key := l.keys(e.Destination, e.EpisodeKey)
	return key
}

// EffectCompensate renders the compensation from the effect's definition
// in the config, then asks the store for it.
func (l *localEffects) EffectCompensate(ctx context.Context, p *store.EffectCompensateParams) (*store.Effect, error) {
	if p.Request == nil {
		orig, err := l.EffectGet(ctx, p.EffectID)
		if err != nil {
			return nil, err
		}
		if orig == nil {
			return nil, fmt.Errorf("effect %d: %w", p.EffectID, store.ErrNotFound)
		}
		if orig.Compensates != 0 {
			return nil, fmt.Errorf("effect %d is itself the compensation of effect %d", orig.ID, orig.Compensates)
		}
		req, err := flow.RenderCompensation(ctx, l.cfg, l.Store, orig)
		if err != nil {
			return nil, err
		}
		p.Request = req
	}
	return l.Store.EffectCompensate(ctx, p)
}

// EffectCompensate asks the server to compensate an effect; it renders
// the request from its own config.
func (re *remoteEffects) EffectCompensate(ctx context.Context, p *store.EffectCompensateParams) (*store.Effect, error) {
	in := map[string]string{"note": p.Note, "actor": strings.TrimPrefix(p.Actor, "operator:")}
	var out struct {
		Effect api.EffectJSON `json:"effect"`
	}
	if err := re.r.call(ctx, http.MethodPost, "/api/v1/effects/"+strconv.FormatInt(p.EffectID, 10)+"/compensate", nil, in, &out); err != nil {
		return nil, err
	}
	return re.effect(out.Effect), nil
}

// effectsCompensate runs effects compensate.
func effectsCompensate(ctx context.Context, env *Env, st effectsStore, id int64, who, note, format string) int {
	e, err := st.EffectCompensate(ctx, &store.EffectCompensateParams{EffectID: id, Actor: who, Note: note})
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects compensate %d: %s\n", id, safe(compensateError(err)))
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusBadRequest {
			return exitUsage
		}
		return exitFail
	}
	if format == "json" {
		return writeJSONOut(env.Stdout, map[string]api.EffectJSON{"effect": effectJSON(st, e)})
	}
	fmt.Fprintf(env.Stdout, "effect %d (%s) compensates effect %d; it is %s and is delivered once effect %d is done\n",
		e.ID, safe(e.EpisodeKey), id, safe(string(e.State)), id)
	return exitOK
}

// compensateError words the store's refusals for a person.
func compensateError(err error) string {
	switch {
	case errors.Is(err, store.ErrConflict):
		return "already compensated: its compensation exists (hookledger effects list --state any --entity ...)"
	case errors.Is(err, store.ErrInvalidTransition):
		return "only a done, acknowledged or resolved effect can be compensated"
	case errors.Is(err, store.ErrNotFound):
		return "no such effect"
	}
	return err.Error()
}
