package deliver

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/health"
	"github.com/hookledger/hookledger/internal/logging"
	"github.com/hookledger/hookledger/internal/loop"
	"github.com/hookledger/hookledger/internal/store"
)

// VerifyStore is the part of the ledger the verifier uses.
type VerifyStore interface {
	VerifyNext(ctx context.Context, p *store.VerifyNextParams) (*store.VerifyNextResult, error)
	VerifyAdvance(ctx context.Context, p *store.VerifyAdvanceParams) error
	EffectMismatch(ctx context.Context, p *store.EffectMismatchParams) (bool, error)
}

// VerifierOptions tune the verifier; zero values take defaults.
type VerifierOptions struct {
	// PollInterval is how often the background loop looks for effects
	// that have become old enough to verify (default 1 s). It also paces
	// the lookups: each round takes what the destination's bucket holds.
	PollInterval time.Duration
	// PageSize is how many done effects one round reads per destination
	// (default 100).
	PageSize int
	// Actor is who the audit rows of mismatches name (default "verifier").
	Actor string
	// Logger, Clock and Health default to the worker's.
	Logger *slog.Logger
	Clock  clock.Clock
	Health *health.Board
}

// Verifier is continuous verification (docs/delivery.md, "Continuous
// verification"): for each destination with verify:, it looks up a
// deterministic share of the done effects once they have been done for
// verify.after, with the same lookup the worker reconciles unknown outcomes
// with, and records each one the destination does not hold (or holds under
// another reference) as a reconciliation mismatch, which a person is told
// about. It runs in a loop of its own with its own token bucket per
// destination, so it never takes a delivery slot nor more than
// verify.per_second of a destination's lookups.
type Verifier struct {
	w     *Worker
	st    VerifyStore
	opts  VerifierOptions
	log   *slog.Logger
	clk   clock.Clock
	dests []*verifyDest
	loop  *loop.Loop

	// mu runs one round at a time: the per-destination state below is
	// the round's.
	mu sync.Mutex
}

// verifyDest is one verified destination's state.
type verifyDest struct {
	d   *config.Destination
	lim *rate.Limiter
	// errs logs a destination whose lookups keep failing once per window,
	// apart from the others.
	errs *logging.Repeats
	// failures counts consecutive failed lookups (the backoff's attempt).
	failures int
	// retryAt holds the destination's lookups back after a failure.
	retryAt time.Time
	// cursor is the last cursor written, to skip writes that move nothing.
	cursor int64
}

// NewVerifier builds the verifier of the worker's destinations that set
// verify:. Its lookups go through the worker's actions and HTTP client and
// its notifications through the worker's, so the worker must run while it
// does (start it after the worker, stop it before).
func NewVerifier(w *Worker, st VerifyStore, opts VerifierOptions) *Verifier {
	if opts.PollInterval <= 0 {
		opts.PollInterval = time.Second
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 100
	}
	if opts.Actor == "" {
		opts.Actor = "verifier"
	}
	if opts.Logger == nil {
		opts.Logger = w.log
	}
	if opts.Clock == nil {
		opts.Clock = w.clk
	}
	if opts.Health == nil {
		opts.Health = w.opts.Health
	}
	v := &Verifier{w: w, st: st, opts: opts, log: opts.Logger, clk: opts.Clock}
	// The configured destinations only: one made at run time (an
	// endpoint) has no verify:, and the worker's loop may be adding those
	// while this runs.
	for i := range w.cfg.Destinations {
		d := &w.cfg.Destinations[i]
		if d.Verify == nil || d.Lookup == nil || d.Compiled == nil || d.Compiled.LookupPath == nil {
			continue
		}
		// A second of lookups as the burst, as the delivery bucket has: a
		// round every PollInterval then keeps to per_second on average.
		burst := max(1, int(math.Floor(d.Verify.PerSecond)))
		v.dests = append(v.dests, &verifyDest{
			d:    d,
			lim:  rate.NewLimiter(rate.Limit(d.Verify.PerSecond), burst),
			errs: logging.NewRepeats(opts.Logger, opts.Clock, "verification of "+d.Name, 0),
		})
	}
	v.loop = loop.New("verification", v.step, loop.Options{PollInterval: opts.PollInterval, Logger: opts.Logger, Clock: opts.Clock,
		Stage: opts.Health.Stage("verification")})
	return v
}

// Destinations names the destinations it verifies.
func (v *Verifier) Destinations() []string {
	out := make([]string, len(v.dests))
	for i, vd := range v.dests {
		out[i] = vd.d.Name
	}
	return out
}

// Start verifies in the background until Stop (or until ctx ends). With
// no destination to verify it starts nothing. A second call returns
// loop.ErrStarted.
func (v *Verifier) Start(ctx context.Context) error {
	if len(v.dests) == 0 {
		return nil
	}
	return v.loop.Start(ctx)
}

// Stop ends the background loop, waiting for the round in progress within
// ctx. An effect whose lookup was cut short is looked up again by the next
// round, since the cursor only passes effects that were verified. Safe to
// call twice, or without Start.
func (v *Verifier) Stop(ctx context.Context) error { return v.loop.Stop(ctx) }

// step is the loop's round. Lookup failures are the destination's and are
// logged per destination; the errors returned are the store's.
func (v *Verifier) step(ctx context.Context) (more bool, err error) {
	_, more, err = v.round(ctx)
	return more, err
}

// Step runs one round over every verified destination, sends the
// notifications it queued, and returns how many lookups it made. It is
// the synchronous form of the background loop, for tests and tools that
// drive the verifier with a fake clock.
func (v *Verifier) Step(ctx context.Context) (int, error) {
	n, _, err := v.round(ctx)
	if v.w.notes != nil {
		v.w.notes.flush(ctx)
	}
	return n, err
}

func (v *Verifier) round(ctx context.Context) (lookups int, more bool, err error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var errs []error
	for _, vd := range v.dests {
		n, m, err := v.verifyDest(ctx, vd)
		lookups += n
		more = more || m
		if err != nil {
			errs = append(errs, err)
		}
	}
	return lookups, more, errors.Join(errs...)
}

// verifyDest reads the next page of one destination's done effects, looks
// up the sampled ones while its bucket allows, and moves the cursor past
// what it verified. more reports a full page verified to its end, so the
// loop goes on at once.
func (v *Verifier) verifyDest(ctx context.Context, vd *verifyDest) (lookups int, more bool, err error) {
	d := vd.d
	now := v.clk.Now()
	if now.Before(vd.retryAt) {
		return 0, false, nil
	}
	page, err := v.st.VerifyNext(ctx, &store.VerifyNextParams{Destination: d.Name, Cutoff: now.Add(-d.Verify.After.D()), Limit: v.opts.PageSize})
	if err != nil {
		return 0, false, fmt.Errorf("verify %s: read done effects: %w", d.Name, err)
	}
	advance := page.Cursor
	complete := true
	for _, e := range page.Effects {
		if !VerifySampled(d.Name, e.ID, d.Verify.Sample) {
			continue
		}
		if !vd.lim.AllowN(v.clk.Now(), 1) {
			// The bucket is empty: the next round goes on from here.
			advance, complete = e.ID-1, false
			break
		}
		lookups++
		stop, err := v.verifyEffect(ctx, vd, e)
		if err != nil || stop {
			// Not verified: the cursor stays before it, so it is looked up
			// again (after the backoff when the lookup failed).
			if aerr := v.advance(ctx, vd, e.ID-1); aerr != nil {
				err = errors.Join(err, aerr)
			}
			return lookups, false, err
		}
	}
	if err := v.advance(ctx, vd, advance); err != nil {
		return lookups, false, err
	}
	return lookups, complete && len(page.Effects) >= v.opts.PageSize, nil
}

// advance moves the destination's cursor, skipping a write that would not
// move it.
func (v *Verifier) advance(ctx context.Context, vd *verifyDest, to int64) error {
	if to <= vd.cursor {
		return nil
	}
	if err := v.st.VerifyAdvance(ctx, &store.VerifyAdvanceParams{Destination: vd.d.Name, AfterID: to, Now: v.clk.Now()}); err != nil {
		return fmt.Errorf("verify %s: advance the cursor to %d: %w", vd.d.Name, to, err)
	}
	vd.cursor = to
	return nil
}

// verifyEffect looks one effect up. stop reports a lookup that failed: the
// destination is held back for a backoff and the effect stays unverified.
// A mismatch the store cannot record is an error (the effect stays
// unverified too).
func (v *Verifier) verifyEffect(ctx context.Context, vd *verifyDest, e *store.Effect) (stop bool, err error) {
	d := vd.d
	// The worker's own lookup, which reads only the effect's stored
	// fields (the claim's token and lease play no part in it).
	found, ref, att, lerr := v.w.lookup(ctx, &store.ClaimedEffect{Effect: *e}, d, lookupVerify)
	if lerr != nil {
		if ctx.Err() != nil {
			return true, nil
		}
		vd.failures++
		wait := backoffFor(d.Retry).Ceiling(vd.failures)
		vd.retryAt = v.clk.Now().Add(wait)
		what := "lookup failed, looking it up again later"
		var refused *lookupRefused
		if errors.As(lerr, &refused) {
			what = "lookup refused, looking it up again later; " + refused.fix
		}
		vd.errs.Fail("verification "+what, lerr, "effect", e.ID, "episode", e.EpisodeKey, "destination", d.Name,
			"failures", vd.failures, "retry_in", wait.String())
		return true, nil
	}
	vd.failures = 0
	vd.errs.OK()
	done := v.clk.Now().Sub(e.UpdatedAt).Round(time.Second)
	var reason string
	switch {
	case !found:
		status := ""
		if att != nil && att.Status != 0 {
			status = fmt.Sprintf(" (HTTP %d)", att.Status)
		}
		reason = fmt.Sprintf("verification: %s does not hold this effect: its lookup found nothing%s %s after the effect was done", d.Name, status, done)
		if e.DestinationRef != "" {
			reason += fmt.Sprintf(" with reference %s", e.DestinationRef)
		}
	case d.Compiled.LookupRef != nil && ref != "" && e.DestinationRef != "" && !sameRef(ref, e.DestinationRef):
		reason = fmt.Sprintf("verification: %s holds this effect under reference %s, but it was done with reference %s (looked up %s after it was done)",
			d.Name, ref, e.DestinationRef, done)
	default:
		v.log.Debug("effect verified", "effect", e.ID, "episode", e.EpisodeKey, "destination", d.Name)
		return false, nil
	}
	return false, v.mismatch(ctx, vd, e, redact(reason))
}

// mismatch records a mismatch, logs it and tells a person.
func (v *Verifier) mismatch(ctx context.Context, vd *verifyDest, e *store.Effect, reason string) error {
	d := vd.d
	changed, err := v.st.EffectMismatch(ctx, &store.EffectMismatchParams{EffectID: e.ID, Actor: v.opts.Actor, Reason: reason, Now: v.clk.Now(),
		Owner: d.Owner})
	if err != nil {
		return fmt.Errorf("verify %s: record the mismatch of effect %d: %w", d.Name, e.ID, err)
	}
	if !changed {
		// No longer done (an operator or another process got to it first):
		// whatever happened to it since is its own record.
		return nil
	}
	repair := fmt.Sprintf("check %s for episode %s: if it is missing, send it again with hookledger effects retry %d --note ...; if it is there, resolve the effect with a note",
		d.Name, e.EpisodeKey, e.ID)
	v.log.Warn("verification mismatch: the destination does not hold a done effect", "effect", e.ID, "episode", e.EpisodeKey,
		"destination", d.Name, "reason", reason)
	if v.w.notes != nil {
		v.w.notes.add(Notification{EffectID: e.ID, EpisodeKey: e.EpisodeKey, Destination: d.Name, State: store.EffectNeedsReconciliation,
			Class: store.ClassUnknown, Reason: reason, SuggestedRepair: repair, Owner: d.Owner})
	}
	return nil
}

// sameRef compares the reference a lookup read with the one recorded when
// the effect was done. The recorded one may be the create answer's
// Location (".../deals/41208") where the lookup reads the bare id
// ("41208"): those name the same object.
func sameRef(looked, recorded string) bool {
	return looked == recorded || strings.HasSuffix(recorded, "/"+looked) || strings.HasSuffix(looked, "/"+recorded)
}

// VerifySampled reports whether the verifier looks up effect id of
// destination dest at the given share. The draw is a hash of both, so it
// is the same after a restart and in every process, spreads evenly over
// ids handed out in sequence, and differs between destinations.
func VerifySampled(dest string, id int64, share float64) bool {
	if share >= 1 {
		return true
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(id))
	h := sha256.New()
	h.Write([]byte(dest))
	h.Write([]byte{0})
	h.Write(b[:])
	sum := h.Sum(nil)
	// The top 53 bits as a float in [0, 1).
	x := float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
	return x < share
}
