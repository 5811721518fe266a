package deliver

import (
	"context"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// CompensationWait is how long a compensation whose original is still in
// flight (approved, submitting, retry_wait, needs_reconciliation) is
// given back before it is looked at again, at least: an original
// scheduled later is waited for until its own next attempt, and one that
// waits for a person (needs_reconciliation with nothing scheduled) is
// looked at again every CompensationPersonWait, so a compensation does
// not claim and release every few seconds for days.
const (
	CompensationWait       = 5 * time.Second
	compensationPersonWait = time.Minute
)

// effectReader reads the original of a compensation. Both drivers have
// it; a store without it (a test double of the three claim methods)
// cannot deliver compensations, which then wait.
type effectReader interface {
	EffectGet(ctx context.Context, id int64) (*store.Effect, error)
}

// gateCompensation decides whether a claimed compensation may be called
// now: only once its original is done, acknowledged or resolved, since
// undoing a call still in flight could arrive before the call itself. It
// reports handled when it has settled or released the claim instead.
//
// An original that ended superseded never took place, and one that ended
// dead may never have: the store cannot settle a claimed effect
// superseded, so the compensation is settled dead with the reason, where
// a person sees it (and resolves it, or retries it when the original did
// take place), rather than undoing what may never have happened.
func (w *Worker) gateCompensation(ctx context.Context, c *store.ClaimedEffect, d *config.Destination) (handled bool, err error) {
	now := w.clk.Now()
	waitUntil := func(why string, at time.Time) (bool, error) {
		w.log.Debug("compensation waits for its original", "episode", c.EpisodeKey, "original", c.Compensates, "why", why, "until", at)
		if err := w.st.EffectRelease(ctx, &store.EffectReleaseParams{EffectID: c.ID, Token: c.Token, Now: now, NotBefore: at, Owner: d.Owner}); err != nil {
			return true, fmt.Errorf("release compensation: %w", err)
		}
		return true, nil
	}
	wait := func(why string) (bool, error) { return waitUntil(why, now.Add(CompensationWait)) }
	r, ok := w.st.(effectReader)
	if !ok {
		return wait("this store cannot read the original")
	}
	o, err := r.EffectGet(ctx, c.Compensates)
	if err != nil {
		if _, rerr := wait("reading the original failed"); rerr != nil {
			return true, rerr
		}
		return true, fmt.Errorf("read original effect %d: %w", c.Compensates, err)
	}
	if o == nil {
		return true, w.settleAndNotify(ctx, c, d, &store.EffectSettleParams{State: store.EffectDead, Class: store.ClassPermanent,
			Reason:          fmt.Sprintf("the original effect %d no longer exists", c.Compensates),
			SuggestedRepair: "check the destination by hand; resolve this compensation with a note"})
	}
	switch o.State {
	case store.EffectDone, store.EffectAcknowledged, store.EffectResolved:
		return false, nil
	case store.EffectSuperseded:
		return true, w.settleAndNotify(ctx, c, d, &store.EffectSettleParams{State: store.EffectDead, Class: store.ClassPermanent,
			Reason:          fmt.Sprintf("the original effect never took place: %s (effect %d) was superseded before it was done", o.EpisodeKey, o.ID),
			SuggestedRepair: "nothing to undo: resolve this compensation with a note"})
	case store.EffectDead:
		ref := o.DestinationRef
		if ref == "" {
			ref = "none recorded"
		}
		return true, w.settleAndNotify(ctx, c, d, &store.EffectSettleParams{State: store.EffectDead, Class: store.ClassPermanent,
			Reason: fmt.Sprintf("the original effect %s (effect %d) ended dead and may never have taken place", o.EpisodeKey, o.ID),
			SuggestedRepair: fmt.Sprintf("check %s for the original (episode %s, reference %s): if it took place, retry this compensation; if not, resolve it with a note",
				d.Name, o.EpisodeKey, ref)})
	case store.EffectNeedsReconciliation:
		if o.NextAttemptAt.IsZero() {
			return waitUntil("the original waits for a person", now.Add(compensationPersonWait))
		}
	}
	// Still in flight: not before the original's own next attempt.
	at := now.Add(CompensationWait)
	if o.State != store.EffectSubmitting && o.NextAttemptAt.After(at) {
		at = o.NextAttemptAt
	}
	return waitUntil("the original is "+string(o.State), at)
}
