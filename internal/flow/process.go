package flow

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/expr"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/store"
)

// input is one event prepared for expressions. Its body and meta are
// read by every expression of the event (routing's for each flow, then
// the work's), never written: they are made once.
type input struct {
	ev   *store.RoutableEvent
	body any
	err  error
	meta map[string]any
}

// decode is ev's input, its body decoded.
func (e *Engine) decode(ev *store.RoutableEvent) *input {
	if e.decodeHook != nil {
		e.decodeHook(ev)
	}
	in := &input{ev: ev, meta: meta(ev)}
	in.body, in.err = expr.DecodeJSON(ev.Body)
	return in
}

// meta exposes the event's identity and times. Receipt data is here for
// conditions; the config refuses it in identities (IP02).
func meta(ev *store.RoutableEvent) map[string]any {
	m := map[string]any{
		"source":          ev.Source,
		"event_id":        ev.EventID,
		"type":            ev.Type,
		"account":         ev.Account,
		"envelope_entity": ev.Entity,
		"received_at":     ev.ReceivedAt,
		"causation_id":    ev.CausationID,
		"hop":             int64(ev.Hop),
		"occurred_at":     nil,
	}
	if !ev.OccurredAt.IsZero() {
		m["occurred_at"] = ev.OccurredAt
	}
	return m
}

func (in *input) vars() expr.Vars {
	return expr.Vars{expr.VarEvent: in.body, expr.VarMeta: in.meta}
}

// sortInt encodes a signed integer so that byte order is numeric order.
func sortInt(n int64) string {
	return fmt.Sprintf("%020d", uint64(n)^(1<<63))
}

// orderKey places the event in its entity's business order.
func orderKey(f *config.Flow, ev *store.RoutableEvent, vars expr.Vars) (string, error) {
	switch f.Version.Mode {
	case config.ModeRevision:
		rev, err := f.Compiled.Revision.EvalInt(vars)
		if err != nil {
			return "", fmt.Errorf("version.revision: %w", err)
		}
		return sortInt(rev), nil
	case config.ModeOccurredAt:
		return occurredKey(f, ev, vars)
	default:
		// Refetch reads the current state whatever the order, so arrival
		// order is as good as any and never starves an event.
		return sortInt(ev.PK), nil
	}
}

func occurredKey(f *config.Flow, ev *store.RoutableEvent, vars expr.Vars) (string, error) {
	if ev.OccurredAt.IsZero() {
		return "", errors.New("version: mode occurred_at, but the event carries no occurrence time")
	}
	tb, err := f.Compiled.Break.EvalString(vars)
	if err != nil {
		return "", fmt.Errorf("version.tie_break: %w", err)
	}
	// The tie-break is part of the order key and of the version, so of
	// every episode key: an identity.
	if err := store.CheckID("version.tie_break", tb); err != nil {
		return "", err
	}
	return sortInt(ev.OccurredAt.UnixMicro()) + "|" + tb, nil
}

// errTransient marks a failure worth retrying later (a refetch that timed
// out or got a 5xx): the entity is deferred, the event stays pending.
type errTransient struct{ err error }

func (e *errTransient) Error() string { return e.err.Error() }
func (e *errTransient) Unwrap() error { return e.err }

// apiBusyDelay defers an entity whose source API is at its max_in_flight.
const apiBusyDelay = 500 * time.Millisecond

// workPage is how many of an entity's pending items are listed, prepared
// and settled together.
const workPage = 50

// listWork is the leased entity's next page of pending work: the page
// routing read with the lease, once (store.Lease.Pending), then the
// lister's.
func (e *Engine) listWork(ctx context.Context, l *store.Lease) ([]*store.WorkItem, error) {
	if items := l.Pending; items != nil {
		l.Pending = nil
		return items, nil
	}
	listed := e.lister.Do(ctx, &store.WorkListPendingParams{Flow: l.Flow, Entity: l.Entity, Limit: workPage})
	return listed.items, listed.err
}

// processEntity settles the leased entity's pending work in order.
// drained is true when the last settle released the entity with no work
// left: then nothing of it is ready for a claim.
func (e *Engine) processEntity(ctx context.Context, l *store.Lease) (settled int, drained bool, err error) {
	f := e.flows[l.Flow]
	release := func(retryAt time.Time) { e.releaseEntity(ctx, l, retryAt) }
	if f == nil {
		// Work for a flow no longer in the config stays visible as pending.
		e.log.Warn("pending work for a flow that is not configured", "flow", l.Flow, "entity", l.Entity)
		release(e.clk.Now().Add(time.Hour))
		return 0, false, nil
	}
	if slots := e.apiSlots[f.Source]; slots != nil && f.Version.Mode == config.ModeRefetch {
		// The bulkhead of the source's API: when it already has its
		// max_in_flight of entities refetching, this one waits outside
		// the slots (released, due again shortly) instead of holding a
		// slot another source's entities need.
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			release(e.clk.Now().Add(apiBusyDelay))
			return 0, false, nil
		}
	}
	for {
		items, err := e.listWork(ctx, l)
		if err != nil {
			release(time.Time{})
			return settled, false, fmt.Errorf("list work of %s/%s: %w", l.Flow, l.Entity, err)
		}
		if len(items) == 0 {
			release(time.Time{})
			return settled, false, nil
		}
		if e.clk.Now().After(l.Until) {
			// The lease ran out: another worker may own the entity now.
			return settled, false, nil
		}
		// The page's items are prepared first and settled in one
		// transaction (FlowApplyBatch, grouped with other entities'
		// pages by the settler): a hot entity's backlog costs one commit
		// per page instead of one per event. An item whose
		// preparation must be retried later ends the batch before it.
		ps, traces, deferred := e.preparePage(ctx, f, l, items)
		if len(ps) > 0 {
			// The last item of a short page is all the work listed: the
			// apply frees the lease itself if nothing arrived meanwhile.
			ps[len(ps)-1].ReleaseIfDrained = !deferred && len(ps) == len(items) && len(items) < workPage
			n, released, err := e.settlePage(ctx, l, items, ps, traces)
			settled += n
			if errors.Is(err, store.ErrLeaseLost) {
				e.log.Info("lease lost; leaving the entity to its new owner", "flow", l.Flow, "entity", l.Entity)
				return settled, false, nil
			}
			if err != nil {
				release(e.clk.Now().Add(e.opts.RetryDelay))
				return settled, false, fmt.Errorf("apply %s/%s: %w", l.Flow, l.Entity, err)
			}
			if released {
				return settled, true, nil
			}
		}
		if deferred {
			release(e.clk.Now().Add(e.opts.RetryDelay))
			return settled, false, nil
		}
		if len(ps) < len(items) {
			continue // the rest of the page, under the lease check above
		}
		if len(items) < workPage {
			// A short page was all the work there was; anything routed
			// since keeps the entity pending, so a later claim finds it.
			// Releasing now saves listing again to learn it is empty.
			release(time.Time{})
			return settled, false, nil
		}
	}
}

// releaseEntity gives up the lease on l, due again at retryAt (zero: when
// new work arrives).
func (e *Engine) releaseEntity(ctx context.Context, l *store.Lease, retryAt time.Time) {
	// Releasing on a fresh context: a canceled caller must not leave
	// the entity leased until expiry.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := e.st.EntityRelease(rctx, &store.EntityReleaseParams{Lease: l, Now: e.clk.Now(), RetryAt: retryAt}); err != nil {
		e.log.Warn("release entity", "flow", l.Flow, "entity", l.Entity, "err", err)
	}
}

// preparePage prepares the page's items in order, as many as fit in half
// the lease. An item whose expressions fail is settled as a failure;
// deferred is true when one must be retried later, which ends the batch
// before it. traces holds each prepared item's processing span (nil when
// tracing is off).
func (e *Engine) preparePage(ctx context.Context, f *config.Flow, l *store.Lease, items []*store.WorkItem) (ps []*store.FlowApplyParams, traces []*itemTrace, deferred bool) {
	ps = make([]*store.FlowApplyParams, 0, len(items))
	// Preparing stops at half the lease: the batch is fenced by the
	// lease, and a page of slow refetches must not outlive it and
	// roll back every time.
	prepareUntil := l.Until.Add(-e.opts.LeaseFor / 2)
	for _, it := range items {
		if len(ps) > 0 && e.clk.Now().After(prepareUntil) {
			break
		}
		p, tr, deferred := e.prepareItem(ctx, f, l, it, nil)
		if deferred {
			return ps, traces, true
		}
		e.place(p, l, it)
		ps = append(ps, p)
		if tr != nil {
			traces = append(traces, tr)
		}
	}
	return ps, traces, false
}

// prepareItem prepares one item under its processing span (tr, nil when
// tracing is off): an item whose expressions fail (or panic) is to settle
// as a failure; deferred is true when it must be retried later, and its
// span has then ended. p is not placed yet (place). in is the item's
// event as routing decoded it, or nil to decode it here.
func (e *Engine) prepareItem(ctx context.Context, f *config.Flow, l *store.Lease, it *store.WorkItem, in *input) (p *store.FlowApplyParams, tr *itemTrace, deferred bool) {
	tr = e.startProcess(ctx, l, it)
	span := tr.startPrepare()
	err := loop.Safe(e.log, "expressions of flow "+f.Name, func() error {
		if e.prepareHook != nil {
			e.prepareHook(it)
		}
		var perr error
		p, perr = e.prepare(ctx, f, l, it, in)
		return perr
	})
	var transient *errTransient
	deferred = errors.As(err, &transient)
	tr.endPrepare(span, p, err, deferred)
	if deferred {
		e.log.Warn("deferring entity", "flow", l.Flow, "entity", l.Entity, "err", err)
		return nil, nil, true
	}
	if err != nil {
		p = &store.FlowApplyParams{Fail: err.Error()}
	}
	return p, tr, false
}

// place binds a prepared settle to its work item it and the lease l.
func (e *Engine) place(p *store.FlowApplyParams, l *store.Lease, it *store.WorkItem) {
	p.Lease, p.Now, p.WorkID, p.EventPK, p.Actor = l, e.clk.Now(), it.ID, it.Event.PK, e.opts.Owner
}

// settlePage settles a prepared page in one transaction, or one item at
// a time when the database refuses a value, and records each result.
// released is true when the last settle freed the entity's lease.
func (e *Engine) settlePage(ctx context.Context, l *store.Lease, items []*store.WorkItem, ps []*store.FlowApplyParams, traces []*itemTrace) (settled int, released bool, err error) {
	settles := startSettles(traces)
	settledPage := e.settler.Do(ctx, ps)
	results, err := settledPage.Results, settledPage.Err
	if errors.Is(err, store.ErrRefused) {
		results, err = e.settleAlone(ctx, ps)
	}
	endProcessSpans(traces, settles, ps, results, err)
	if err != nil {
		return 0, false, err
	}
	return e.recordSettled(ctx, l, items, results, traces), results[len(results)-1].Released, nil
}

// recordSettled counts, logs and hands on what a settled page came to.
func (e *Engine) recordSettled(ctx context.Context, l *store.Lease, items []*store.WorkItem, results []*store.FlowApplyResult, traces []*itemTrace) (settled int) {
	for i, res := range results {
		it := items[i]
		settled++
		e.opts.Metrics.applied(res)
		if res.EffectsInserted > 0 && e.opts.OnEffects != nil {
			e.opts.OnEffects()
		}
		// Logged in the item's trace, so a line leads to it.
		ictx := ctx
		if i < len(traces) {
			ictx = traces[i].ctx
		}
		if res.Disposition == store.DispositionDeadLettered {
			// A person must look at it: say so at the default level.
			e.log.WarnContext(ictx, "event dead-lettered", "source", it.Event.Source, "event_id", it.Event.EventID,
				"flow", l.Flow, "entity", l.Entity, "reason", res.Reason)
		} else {
			e.log.DebugContext(ictx, "settled", "flow", l.Flow, "entity", l.Entity, "event_id", it.Event.EventID,
				"disposition", res.Disposition, "reason", res.Reason, "effects", res.EffectsInserted, "skipped", res.EffectsSkipped)
		}
	}
	return settled
}

// settleAlone settles a page that the database refused (store.ErrRefused:
// the values of one of its items) one item at a time, in order; an item
// refused alone is settled as a dead letter with the database's reason,
// so one event never holds up its entity's others, and its entity is not
// retried forever.
func (e *Engine) settleAlone(ctx context.Context, ps []*store.FlowApplyParams) ([]*store.FlowApplyResult, error) {
	results := make([]*store.FlowApplyResult, 0, len(ps))
	for _, p := range ps {
		out := e.settler.Do(ctx, []*store.FlowApplyParams{p})
		if errors.Is(out.Err, store.ErrRefused) {
			dead := &store.FlowApplyParams{Fail: refusedReason("processing", out.Err), Lease: p.Lease, Now: p.Now,
				WorkID: p.WorkID, EventPK: p.EventPK, Actor: p.Actor, ReleaseIfDrained: p.ReleaseIfDrained}
			out = e.settler.Do(ctx, []*store.FlowApplyParams{dead})
		}
		if out.Err != nil {
			return results, out.Err
		}
		results = append(results, out.Results...)
	}
	return results, nil
}

// prepare computes version, state and effects for one work item. A plain
// error is permanent (the item is dead-lettered with it); an errTransient
// defers the entity. in is the event's decoded body (nil: decode it).
func (e *Engine) prepare(ctx context.Context, f *config.Flow, l *store.Lease, it *store.WorkItem, in *input) (*store.FlowApplyParams, error) {
	if in == nil {
		in = e.decode(&it.Event)
	}
	if in.err != nil && !f.Compiled.OpaqueBody {
		return nil, fmt.Errorf("payload: %w", in.err)
	}
	vars := in.vars()
	vars[expr.VarEntity] = l.Entity
	p := &store.FlowApplyParams{Ordered: true}
	if err := e.computeVersion(ctx, f, l, it, vars, p); err != nil {
		return nil, err
	}
	unchangedSince, err := e.computeState(ctx, f, l, vars, p)
	if err != nil {
		return nil, err
	}

	// Causation: an inbound chain is guarded and continued; without one the
	// event starts its own chain, named by its stable identity (never by
	// attempt data).
	causation, hop := it.Event.CausationID, it.Event.Hop
	if causation != "" {
		p.CausationID, p.Hop, p.MaxHops = causation, hop, e.cfg.Causation.MaxHops
	} else {
		causation = it.Event.Source + "/" + it.Event.EventID
	}

	if err := e.buildEffects(f, l, it, vars, p, unchangedSince, causation, hop); err != nil {
		return nil, err
	}
	if compensates(f) {
		// Compensations of earlier versions' effects (outcomes.go): only
		// flows with a compensate_when pay for reading the ledger.
		comps, err := e.compensations(ctx, f, l.Entity, vars, causation, hop)
		if err != nil {
			return nil, err
		}
		p.Effects = append(comps, p.Effects...)
	}
	return p, nil
}

// computeVersion sets p's business version and its sort key by the flow's
// version mode, and makes the version available to later expressions.
func (e *Engine) computeVersion(ctx context.Context, f *config.Flow, l *store.Lease, it *store.WorkItem, vars expr.Vars, p *store.FlowApplyParams) error {
	switch f.Version.Mode {
	case config.ModeRevision:
		rev, err := f.Compiled.Revision.EvalInt(vars)
		if err != nil {
			return fmt.Errorf("version.revision: %w", err)
		}
		p.Version, p.VersionSort = fmt.Sprintf("r%d", rev), sortInt(rev)
		vars[expr.VarVersion] = rev
	case config.ModeOccurredAt:
		key, err := occurredKey(f, &it.Event, vars)
		if err != nil {
			return err
		}
		tb := key[strings.IndexByte(key, '|')+1:]
		p.Version = "t" + it.Event.OccurredAt.UTC().Format(time.RFC3339Nano) + "/" + tb
		p.VersionSort = key
		vars[expr.VarVersion] = p.Version
	case config.ModeRefetch:
		obj, err := e.refetch(ctx, f, l.Entity, vars)
		if err != nil {
			return err
		}
		vars[expr.VarObject] = obj
		if f.Compiled.Field != nil {
			n, err := f.Compiled.Field.EvalInt(vars)
			if err != nil {
				return fmt.Errorf("version.field: %w", err)
			}
			p.Version, p.VersionSort = fmt.Sprintf("r%d", n), sortInt(n)
			vars[expr.VarVersion] = n
		} else {
			full, err := hashVersion(f, vars)
			if err != nil {
				return err
			}
			// Equal fields give an equal hash, so a second event for the
			// same change is a no-op; only equality is meaningful.
			p.Version, p.VersionSort, p.Ordered = "h"+full[:16], full, false
			vars[expr.VarVersion] = p.Version
		}
	}
	return nil
}

// hashVersion is the hex SHA-256 of the canonical form of the refetched
// object's version.hash fields.
func hashVersion(f *config.Flow, vars expr.Vars) (string, error) {
	parts := make([]any, len(f.Compiled.Hash))
	for i, h := range f.Compiled.Hash {
		v, err := h.Eval(vars)
		if err != nil {
			return "", fmt.Errorf("version.hash[%d]: %w", i, err)
		}
		parts[i] = v
	}
	canon, err := expr.Canonical(parts)
	if err != nil {
		return "", fmt.Errorf("version.hash: %w", err)
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

// computeState sets p's state and, when the flow needs it, reads the
// state before. unchangedSince names the applied version whose state the
// new one equals; "" when it differs or nothing was applied before.
func (e *Engine) computeState(ctx context.Context, f *config.Flow, l *store.Lease, vars expr.Vars, p *store.FlowApplyParams) (unchangedSince string, err error) {
	state, err := f.Compiled.State.EvalJSON(vars)
	if err != nil {
		return "", fmt.Errorf("state: %w", err)
	}
	if err := store.CheckJSON("state", state); err != nil {
		return "", err
	}
	p.State = state
	stateVal, _ := expr.DecodeJSON(state)
	vars[expr.VarState] = stateVal
	if f.Compiled.ReadsPrevious || e.changesOnly[f.Name] != nil {
		prev, err := e.st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: f.Name, Entity: l.Entity})
		if err != nil {
			return "", &errTransient{fmt.Errorf("read projection: %w", err)}
		}
		if prev != nil && len(prev.State) > 0 {
			pv, _ := expr.DecodeJSON(prev.State)
			vars[expr.VarPrevious] = pv
			// Compared in canonical form: PostgreSQL gives jsonb back with
			// its own spacing and key order. An entity routed but never
			// applied has no version, and its first state is a change.
			if canon, err := expr.Canonical(pv); err == nil && prev.Version != "" && bytes.Equal(canon, state) {
				unchangedSince = prev.Version
			}
		}
	}
	return unchangedSince, nil
}

// buildEffects appends to p the effects the flow asks of this version:
// each whose when holds, built into its stored request, or recorded as
// skipped when its destination takes changes only and the state has not
// changed since unchangedSince.
func (e *Engine) buildEffects(f *config.Flow, l *store.Lease, it *store.WorkItem, vars expr.Vars, p *store.FlowApplyParams, unchangedSince, causation string, hop int) error {
	changesOnly := e.changesOnly[f.Name]
	for i, eff := range f.Effects {
		ce := f.Compiled.Effects[i]
		if ce.When != nil {
			ok, err := ce.When.EvalBool(vars)
			if err != nil {
				return fmt.Errorf("effect %s: when: %w", eff.Name, err)
			}
			if !ok {
				continue
			}
		}
		key := EpisodeKey(f.Name, l.Entity, p.Version, eff.Name)
		if changesOnly != nil && changesOnly[i] && unchangedSince != "" {
			// The vendor charges for what it is sent, changed or not
			// (Braze data points): the effect applied at that version, or
			// one still pending with the same state, already carries it.
			p.Skipped = append(p.Skipped, &store.SkippedEffect{EpisodeKey: key, Effect: eff.Name, Destination: eff.Destination,
				Reason: fmt.Sprintf("not created: destination %s sends changes only, and the state equals the one applied at %s", eff.Destination, unchangedSince)})
			continue
		}
		var req json.RawMessage
		var err error
		if ce.Forward {
			req, err = forwardRequest(&it.Event)
		} else {
			req, err = buildRequest(eff.Request.Method, ce, vars)
		}
		if err != nil {
			return fmt.Errorf("effect %s: %w", eff.Name, err)
		}
		ins := &store.EffectInsert{
			EpisodeKey:  key,
			Effect:      eff.Name,
			Destination: eff.Destination,
			Request:     req,
			CausationID: causation,
			Hop:         hop + 1,
		}
		if err := e.setDeadline(ins, &eff, ce, &it.Event, vars, e.clk.Now()); err != nil {
			return fmt.Errorf("effect %s: %w", eff.Name, err)
		}
		p.Effects = append(p.Effects, ins)
	}
	return nil
}

// EpisodeKey is the identity of a business effect: flow, entity, business
// version and effect name (IP08), never attempt or arrival data.
func EpisodeKey(flow, entity, version, effect string) string {
	return flow + ":" + entity + ":" + version + ":" + effect
}

// Request is the stored shape of an effect's call, built at apply time so
// that delivery needs no expressions. Query holds the parameters
// unescaped; the delivery escapes them when it builds the URL (requests
// stored before query existed have none).
type Request struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Query   url.Values        `json:"query,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    json.RawMessage   `json:"body,omitempty"`
	// BodyBase64 is a body sent byte for byte instead of Body (a
	// forward's: the event as received). A JSON value in Body would be
	// re-encoded on the way (PostgreSQL's jsonb keeps neither spacing nor
	// key order), and the bytes may be no JSON at all (a form): base64
	// keeps every byte in any driver.
	BodyBase64 []byte `json:"body_base64,omitempty"`
}

// forwardRequest is a forward flow's call: the event's body as received,
// byte for byte, with the Content-Type of its first delivery, to the
// destination's base_url itself.
func forwardRequest(ev *store.RoutableEvent) (json.RawMessage, error) {
	ct := ev.ContentType
	if ct == "" {
		// Every sender kind but the form-posting ones sends JSON, and a
		// form always comes with its type.
		ct = defaultContentType
	}
	if err := outbound.CheckHeaderValue(ct); err != nil {
		return nil, fmt.Errorf("forward: Content-Type: %w", err)
	}
	r := Request{Method: http.MethodPost, Headers: map[string]string{"Content-Type": ct}, BodyBase64: ev.Body}
	out, err := expr.Canonical(r)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	return out, nil
}

// defaultContentType is a forward's Content-Type when the sender sent none.
const defaultContentType = "application/json"

func buildRequest(method string, ce *config.CompiledEffect, vars expr.Vars) (json.RawMessage, error) {
	r := Request{Method: method}
	var err error
	if r.Path, err = ce.Path.EvalString(vars); err != nil {
		return nil, fmt.Errorf("request.path: %w", err)
	}
	if ce.Query != nil {
		if r.Query, err = ce.Query.EvalQuery(vars); err != nil {
			return nil, fmt.Errorf("request.query: %w", err)
		}
	}
	if ce.Body != nil {
		if r.Body, err = ce.Body.EvalJSON(vars); err != nil {
			return nil, fmt.Errorf("request.body: %w", err)
		}
	}
	for h, prog := range ce.Headers {
		v, err := prog.EvalString(vars)
		if err != nil {
			return nil, fmt.Errorf("request.headers.%s: %w", h, err)
		}
		// Refused here, with the event, rather than sent to the
		// delivery worker as an effect that no retry can deliver.
		if err := outbound.CheckHeaderValue(v); err != nil {
			return nil, fmt.Errorf("request.headers.%s: %w", h, err)
		}
		if r.Headers == nil {
			r.Headers = map[string]string{}
		}
		r.Headers[h] = v
	}
	out, err := expr.Canonical(r)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	if err := store.CheckJSON("request", out); err != nil {
		return nil, err
	}
	return out, nil
}

// refetch GETs the authoritative object from the source's API. A 404 or
// another 4xx, and a 3xx (never followed), are permanent; network errors,
// 429 and 5xx are transient.
func (e *Engine) refetch(ctx context.Context, f *config.Flow, entity string, vars expr.Vars) (any, error) {
	api := e.apis[f.Source]
	if api == nil {
		return nil, fmt.Errorf("refetch: source %s has no api", f.Source)
	}
	p, err := f.Compiled.Path.EvalString(vars)
	if err != nil {
		return nil, fmt.Errorf("version.path: %w", err)
	}
	var q url.Values
	if f.Compiled.Query != nil {
		if q, err = f.Compiled.Query.EvalQuery(vars); err != nil {
			return nil, fmt.Errorf("version.query: %w", err)
		}
	}
	// A path that would leave api.base_url (payload data such as
	// "../../admin" or "x?admin=1") is refused, permanently: the token must
	// not go anywhere else on the API.
	u, err := outbound.URL(api.BaseURL, p, q)
	if err != nil {
		return nil, fmt.Errorf("refetch refused before sending: %w; wrap payload values in version.path in pathEscape() and put query parameters in version.query", err)
	}
	rctx, cancel := context.WithTimeout(ctx, api.Timeout.D())
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("refetch %s: %w", p, outbound.RedactError(err))
	}
	req.Header.Set("Accept", "application/json")
	for k, v := range api.Headers {
		req.Header.Set(k, v)
	}
	if api.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+api.BearerToken)
	}
	client := e.http
	if api.AllowPrivateNetworks {
		client = e.httpPrivate
	}
	resp, err := client.Do(req)
	if ae := outbound.AsAddressError(err); ae != nil {
		// The same address on every attempt: permanent.
		return nil, fmt.Errorf("refetch %s: %w; set allow_private_networks: true on sources[%s].api if the API is meant to be reached on an internal network", p, ae, f.Source)
	}
	if err != nil {
		// The transport's error names the URL: without credentials or
		// query string (a token may be in either), it goes into the log
		// and, if permanent, the event's reason.
		return nil, &errTransient{fmt.Errorf("refetch %s: %w", p, outbound.RedactError(err))}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, &errTransient{fmt.Errorf("refetch %s: read body: %w", p, outbound.RedactError(err))}
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return nil, &errTransient{fmt.Errorf("refetch %s: HTTP %d", p, resp.StatusCode)}
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		// Not followed, so nothing was read; permanent like any other
		// answer but 200, 429 and 5xx: the configuration must change.
		return nil, fmt.Errorf("refetch %s: HTTP %d: the API redirected to %s; redirects are not followed: fix api.base_url or version.path",
			p, resp.StatusCode, redirectTarget(resp.Header.Get("Location")))
	default:
		return nil, fmt.Errorf("refetch %s: HTTP %d", p, resp.StatusCode)
	}
	obj, err := expr.DecodeJSON(body)
	if err != nil {
		return nil, fmt.Errorf("refetch %s: %w", p, err)
	}
	return obj, nil
}

// redirectTarget renders a Location for a reason: without credentials or
// query string, and quoted if it holds control characters.
func redirectTarget(loc string) string {
	loc = strings.TrimSpace(loc)
	if loc == "" {
		return "no Location"
	}
	loc = outbound.RedactURL(loc)
	if len(loc) > 300 {
		loc = loc[:300] + "…"
	}
	if strings.ContainsFunc(loc, unicode.IsControl) {
		return fmt.Sprintf("%q", loc)
	}
	return loc
}
