package flow

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// hasCompensation reports whether effect o's definition declares a
// compensation request, so that a console offers to compensate only what
// can be: o itself must not be a compensation.
func hasCompensation(cfg *config.Config, o *store.Effect) bool {
	if cfg == nil || o.Compensates != 0 {
		return false
	}
	for i := range cfg.Flows {
		f := &cfg.Flows[i]
		if f.Name != o.Flow || f.Compiled == nil {
			continue
		}
		for j, eff := range f.Effects {
			if eff.Name == o.Effect && j < len(f.Compiled.Effects) {
				return f.Compiled.Effects[j].Compensation != nil
			}
		}
	}
	return false
}

// HasCompensation is HasCompensation over the engine's configuration.
func (e *Engine) HasCompensation(o *store.Effect) bool {
	return hasCompensation(e.cfg, o)
}

// CompensateStore is what Compensate needs of the store.
type CompensateStore interface {
	EffectCompensate(ctx context.Context, p *store.EffectCompensateParams) (*store.Effect, error)
}

// Compensate is an operator's compensation of effect orig, shared by the
// admin API and the console: it renders the request from the effect's
// compensation template with render (an Engine's CompensationRequest),
// then records the compensation effect. Its errors keep their kinds:
// ErrNoCompensation or ErrCompensationRequest from rendering, and the
// store's ErrConflict (already compensated), ErrInvalidTransition (not
// done, acknowledged or resolved), ErrNotFound and ErrInvalidArgument.
func Compensate(ctx context.Context, st CompensateStore,
	render func(context.Context, *store.Effect) (json.RawMessage, error),
	orig *store.Effect, actor, note string, now time.Time) (*store.Effect, error) {
	if orig.Compensates != 0 {
		return nil, fmt.Errorf("effect %d is itself the compensation of effect %d: %w", orig.ID, orig.Compensates, ErrNoCompensation)
	}
	req, err := render(ctx, orig)
	if err != nil {
		return nil, err
	}
	e, err := st.EffectCompensate(ctx, &store.EffectCompensateParams{
		EffectID: orig.ID, Actor: actor, Note: note, Request: req, Now: now,
	})
	if err != nil {
		return nil, fmt.Errorf("compensate effect %d: %w", orig.ID, err)
	}
	return e, nil
}
