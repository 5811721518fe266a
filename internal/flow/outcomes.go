package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/expr"
	"github.com/hookledger/hookledger/internal/store"
)

// defaultDeadlineWarnShare is the share of the time between an effect's
// creation and its deadline during which deadline_risk warns.
const defaultDeadlineWarnShare = 0.25

// CompensateSuffix ends the episode key and the effect name of a
// compensation: the compensation of "orders:o1:r2:confirm" is
// "orders:o1:r2:confirm:compensate", so it can exist at most once.
const CompensateSuffix = ":compensate"

// ErrNoCompensation reports that an effect's definition has no
// compensation request (or that its flow or effect is no longer
// configured), so there is nothing to render.
var ErrNoCompensation = errors.New("no compensation configured")

// ErrCompensationRequest reports that the compensation request could not
// be rendered (an expression failed on this effect's data).
var ErrCompensationRequest = errors.New("the compensation request cannot be rendered")

// setDeadline computes an effect's business deadline, if it declares one,
// and when deadline_risk starts to warn about it.
func (e *Engine) setDeadline(ins *store.EffectInsert, eff *config.Effect, ce *config.CompiledEffect, ev *store.RoutableEvent, vars expr.Vars, now time.Time) error {
	var at time.Time
	switch {
	case ce.DeadlineAfter > 0:
		// After the occurrence time: the business clock started then,
		// however late the sender delivered. A sender that gives none
		// leaves receipt as the best known start.
		base := ev.OccurredAt
		if base.IsZero() {
			base = ev.ReceivedAt
		}
		at = base.Add(ce.DeadlineAfter)
	case ce.Deadline != nil:
		v, err := ce.Deadline.Eval(vars)
		if err != nil {
			return fmt.Errorf("deadline: %w", err)
		}
		if v == nil {
			return nil // the expression says this effect has no deadline
		}
		s, ok := v.(string)
		if !ok {
			return fmt.Errorf("deadline: %q gave %v; want a timestamp, an RFC 3339 string or null", ce.Deadline.Source, v)
		}
		// A CEL timestamp comes out in its JSON form, RFC 3339.
		at, err = time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("deadline: %q gave %q, which is not an RFC 3339 time", ce.Deadline.Source, s)
		}
	default:
		return nil
	}
	ins.DeadlineAt = at.UTC()
	ins.DeadlineWarnAt = warnAt(ins.DeadlineAt, now, e.opts.DeadlineWarnShare)
	ins.OnDeadline = eff.OnDeadline
	return nil
}

// warnAt is when deadline_risk starts to warn about a deadline set at now:
// once less than share of the time left remains. It is never before now,
// and a deadline already passed warns from the deadline itself (it counts
// as passed at once).
func warnAt(deadline, now time.Time, share float64) time.Time {
	if !deadline.After(now) {
		return deadline
	}
	share = min(max(share, 0), 1)
	left := deadline.Sub(now)
	return deadline.Add(-time.Duration(share * float64(left)))
}

// compensates reports whether any effect of the flow has a compensation
// rule, the one reason to read the entity's effects before an apply.
func compensates(f *config.Flow) bool {
	for _, ce := range f.Compiled.Effects {
		if ce.CompensateWhen != nil {
			return true
		}
	}
	return false
}

// compensations evaluates the flow's compensate_when rules against the
// entity's earlier effects, with vars holding the version about to be
// applied (state, previous, event, ...), and returns the compensations to
// insert with it. The caller holds the entity's lease, so no other worker
// adds effects to it meanwhile; the store decides each insert in the
// apply's transaction from the original's state then.
func (e *Engine) compensations(ctx context.Context, f *config.Flow, entity string, vars expr.Vars, causation string, hop int) ([]*store.EffectInsert, error) {
	var existing []*store.Effect
	p := &store.EffectListParams{Flow: f.Name, Entity: entity, Limit: 500}
	for {
		page, err := e.st.EffectList(ctx, p)
		if err != nil {
			return nil, &errTransient{fmt.Errorf("list the effects of %s/%s: %w", f.Name, entity, err)}
		}
		existing = append(existing, page...)
		if len(page) < p.Limit {
			break
		}
		p.AfterID = page[len(page)-1].ID
	}
	compensated := map[string]bool{}
	for _, x := range existing {
		if x.Compensates != 0 || strings.HasSuffix(x.EpisodeKey, CompensateSuffix) {
			compensated[strings.TrimSuffix(x.EpisodeKey, CompensateSuffix)] = true
		}
	}
	var out []*store.EffectInsert
	for i, eff := range f.Effects {
		ce := f.Compiled.Effects[i]
		if ce.CompensateWhen == nil || ce.Compensation == nil {
			continue
		}
		for _, o := range existing {
			if o.Effect != eff.Name || o.Compensates != 0 || compensated[o.EpisodeKey] {
				continue
			}
			switch o.State {
			case store.EffectSuperseded, store.EffectDead, store.EffectResolved:
				// Never happened, or a person closed it: nothing to undo.
				continue
			}
			v := maps.Clone(vars)
			v[expr.VarOriginal] = originalVars(o)
			ok, err := ce.CompensateWhen.EvalBool(v)
			if err != nil {
				return nil, fmt.Errorf("effect %s: compensate_when (effect %d): %w", eff.Name, o.ID, err)
			}
			if !ok {
				continue
			}
			req, err := buildRequest(eff.Compensation.Method, ce.Compensation, v)
			if err != nil {
				return nil, fmt.Errorf("effect %s: compensation of effect %d: %w", eff.Name, o.ID, err)
			}
			out = append(out, &store.EffectInsert{
				EpisodeKey:  o.EpisodeKey + CompensateSuffix,
				Effect:      o.Effect + CompensateSuffix,
				Destination: o.Destination,
				Request:     req,
				CausationID: causation,
				Hop:         hop + 1,
				Compensates: o.ID,
			})
		}
	}
	return out, nil
}

// originalVars is the effect being compensated as the expressions see it
// (the variable original): its stored request decoded (method, path,
// query, headers, body), the reference the destination gave it, and its
// identity.
func originalVars(o *store.Effect) map[string]any {
	var req any
	if len(o.Request) > 0 {
		req, _ = expr.DecodeJSON(o.Request)
	}
	return map[string]any{
		"id":              o.ID,
		"episode_key":     o.EpisodeKey,
		"effect":          o.Effect,
		"destination":     o.Destination,
		"destination_ref": o.DestinationRef,
		"version":         o.Version,
		"state":           string(o.State),
		"request":         req,
		"source":          o.Source,
		"source_event_id": o.SourceEventID,
		"created_at":      o.CreatedAt,
	}
}

// CompensationRequest renders the compensation of effect o for an
// operator: the compensation template of o's effect definition, with
// original, entity, version (o's) and state (the entity's current
// projected state, null when there is none) bound. It returns
// ErrNoCompensation when the definition has none.
func (e *Engine) CompensationRequest(ctx context.Context, o *store.Effect) (json.RawMessage, error) {
	return RenderCompensation(ctx, e.cfg, e.st, o)
}

// ProjectionReader reads an entity's current projection.
type ProjectionReader interface {
	ProjectionGet(ctx context.Context, p *store.ProjectionGetParams) (*store.Projection, error)
}

// RenderCompensation is CompensationRequest for callers without an
// engine (the effects verb on a local store); st may be nil, and state is
// then null.
func RenderCompensation(ctx context.Context, cfg *config.Config, st ProjectionReader, o *store.Effect) (json.RawMessage, error) {
	name := strings.TrimSuffix(o.Effect, CompensateSuffix)
	if o.Compensates != 0 || name != o.Effect {
		return nil, fmt.Errorf("effect %d is itself a compensation: %w", o.ID, ErrNoCompensation)
	}
	var f *config.Flow
	for i := range cfg.Flows {
		if cfg.Flows[i].Name == o.Flow {
			f = &cfg.Flows[i]
		}
	}
	if f == nil || f.Compiled == nil {
		return nil, fmt.Errorf("flow %q is not configured: %w", o.Flow, ErrNoCompensation)
	}
	for i, eff := range f.Effects {
		if eff.Name != o.Effect {
			continue
		}
		ce := f.Compiled.Effects[i]
		if ce.Compensation == nil {
			return nil, fmt.Errorf("flow %q effect %q has no compensation request: %w", o.Flow, o.Effect, ErrNoCompensation)
		}
		vars := expr.Vars{expr.VarOriginal: originalVars(o), expr.VarEntity: o.Entity, expr.VarVersion: o.Version}
		if st != nil {
			prev, err := st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: o.Flow, Entity: o.Entity})
			if err != nil {
				return nil, fmt.Errorf("read projection: %w", err)
			}
			if prev != nil && len(prev.State) > 0 {
				sv, _ := expr.DecodeJSON(prev.State)
				vars[expr.VarState] = sv
			}
		}
		req, err := buildRequest(eff.Compensation.Method, ce.Compensation, vars)
		if err != nil {
			return nil, fmt.Errorf("%w: effect %d: %w", ErrCompensationRequest, o.ID, err)
		}
		return req, nil
	}
	return nil, fmt.Errorf("flow %q has no effect %q: %w", o.Flow, o.Effect, ErrNoCompensation)
}
