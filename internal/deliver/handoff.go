package deliver

import (
	"maps"
	"slices"

	"github.com/hookledger/hookledger/internal/store"
)

// Processing writes effects in a transaction of its own and then woke
// this worker, whose claim took them in another: two commits in a row
// between an event and its call, each a few milliseconds on a busy
// writer. A handoff claims them in the transaction that writes them
// instead (store.Pipeline.FlowApplyGroupClaim): Reserve promises slots
// before that transaction, Take starts the calls it claimed after the
// commit and gives back what it did not fill.

// Reserve promises call slots to the effects a group of processing is
// about to write (effects: how many per destination), each destination
// at most up to its room now and one more than its effects, so that a
// claim that comes back short of its limit has taken every effect due
// there. It returns one claim per destination that has room, or none
// while the worker is not running.
func (w *Worker) Reserve(effects map[string]int) []*store.EffectClaimParams {
	return w.reserve(effects, false)
}

// ReserveFresh is Reserve for a publish (with Take and Wake, the worker
// is a store.PublishHandoff). A publish hands over only the effects it
// writes, and only where nothing else is due, so ReserveFresh promises no
// slot where this worker knows effects may be due already: the publish
// would find them, write its own behind them and give the slots back,
// holding them from the worker's own claim meanwhile, which under a
// backlog slowed the fan-out.
func (w *Worker) ReserveFresh(effects map[string]int) []*store.EffectClaimParams {
	return w.reserve(effects, true)
}

// The worker is what a publish hands its deliveries to.
var _ store.PublishHandoff = (*Worker)(nil)

func (w *Worker) reserve(effects map[string]int, fresh bool) []*store.EffectClaimParams {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.runCtx == nil || w.stopped {
		return nil
	}
	w.refreshLocked()
	now := w.clk.Now()
	var out []*store.EffectClaimParams
	for _, d := range slices.Sorted(maps.Keys(effects)) {
		// 0 for a destination this worker does not call.
		room := min(w.capLocked(d)-w.inflight[d], w.opts.Workers-w.total, effects[d]+1)
		if room <= 0 || fresh && w.due[d] {
			continue
		}
		w.inflight[d] += room
		w.total += room
		out = append(out, &store.EffectClaimParams{Owner: w.opts.Owner, Now: now, LeaseFor: w.opts.LeaseFor,
			Limit: room, Destinations: []string{d}, MaxRedrives: w.redrive})
	}
	return out
}

// Take starts a call for each effect claims[i] took (claimed[i]; claimed
// is nil when the claims did not run), gives back the slots they did not
// fill, and makes the worker's own loop claim wherever effects may be
// left due: a destination Reserve found no room for, a claim that filled
// its limit, claims that did not run.
func (w *Worker) Take(claims []*store.EffectClaimParams, claimed [][]*store.ClaimedEffect, effects map[string]int) {
	notRun := len(claimed) != len(claims)
	wake := notRun
	covered := make(map[string]bool, len(claims))
	var run []*store.ClaimedEffect
	w.mu.Lock()
	for i, c := range claims {
		d := c.Destinations[0]
		covered[d] = true
		var got []*store.ClaimedEffect
		if i < len(claimed) {
			got = claimed[i]
		}
		if len(got) >= c.Limit {
			wake = true // there may be more due
		}
		// Due there now: what the claim could not take, or, when it took
		// none of the effects written there, those (a publish held back).
		w.due[d] = len(got) >= c.Limit || len(got) == 0 && effects[d] > 0
		unused := c.Limit - len(got)
		w.inflight[d] -= unused
		w.total -= unused
		run = append(run, got...)
	}
	for d := range effects {
		if !covered[d] || notRun {
			// Written without a slot, or not claimed: due there now.
			wake, w.due[d] = true, true
		}
	}
	stopped := w.stopped
	if stopped {
		// Stop is waiting for the calls in flight: none may start now.
		// The effects claimed stay leased, and are claimed again when
		// their lease ends.
		for _, c := range run {
			w.inflight[c.Destination]--
			w.total--
		}
	} else {
		w.calls.Add(len(run))
	}
	ctx := w.runCtx
	w.mu.Unlock()
	if stopped {
		return
	}
	w.opts.Metrics.claimed(len(run))
	for _, c := range run {
		go w.call(ctx, c)
	}
	if wake {
		w.Wake()
	}
}
