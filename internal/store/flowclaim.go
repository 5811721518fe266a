package store

import (
	"cmp"
	"context"
	"slices"
	"sync/atomic"
	"time"
)

// A settle that claims due effects for this process's delivery worker in
// its own transaction (FlowApplyGroupClaim, a routing transaction's
// settle) used to insert each effect approved and then claim it: a claim
// statement more, and a second row version of the effect with an entry in
// every index that covers it, for every effect a lone webhook writes.
// Now each insert at a destination the worker reserved room at is
// inserted already claimed (InsertClaim) when the claim would have taken
// it: the claim would take nothing else at its destination, and no older
// version of it is in flight. The claims then run, with the room left,
// only at destinations where something may still be due: where nothing
// went in claimed (a backlog was due there, or the group inserted
// nothing), or where an effect went in approved although the room would
// have taken it.

// insertClaims is a group's claims as its effect inserts take them.
type insertClaims struct {
	claims []*EffectClaimParams
	// at is the claim of each destination claimed alone; a claim of
	// several destinations, or of none, is run after the group as before.
	at map[string]int
	// left is how many more inserts each claim may take.
	left []int
	// tries is, per claim, every effect the group inserted at its
	// destination, in order.
	tries [][]*insertTry
	// count counts the effects inserted claimed (Rules.InsertedClaimed).
	count *atomic.Int64
}

// insertTry is one effect insert at a claimed destination.
type insertTry struct {
	w     *ApplyRow
	p     *FlowApplyParams
	e     *EffectInsert
	claim *InsertClaim // nil when the room had run out
	out   *InsertOutcome
}

// newInsertClaims is the inserts' view of claims; nil for none.
func newInsertClaims(claims []*EffectClaimParams, count *atomic.Int64) *insertClaims {
	if len(claims) == 0 {
		return nil
	}
	ic := &insertClaims{claims: claims, at: make(map[string]int, len(claims)), left: make([]int, len(claims)),
		tries: make([][]*insertTry, len(claims)), count: count}
	for i, c := range claims {
		ic.left[i] = c.Limit
		if len(c.Destinations) != 1 {
			continue
		}
		if _, dup := ic.at[c.Destinations[0]]; !dup {
			ic.at[c.Destinations[0]] = i
		}
	}
	return ic
}

// take is the claim effect e of w's item p is inserted with (nil for
// none), noting the insert, whose answer out is, for the claim that
// follows the group.
func (ic *insertClaims) take(w *ApplyRow, p *FlowApplyParams, e *EffectInsert, out *InsertOutcome) (*InsertClaim, error) {
	if ic == nil {
		return nil, nil
	}
	i, ok := ic.at[e.Destination]
	if !ok {
		return nil, nil
	}
	t := &insertTry{w: w, p: p, e: e, out: out}
	ic.tries[i] = append(ic.tries[i], t)
	if ic.left[i] <= 0 {
		return nil, nil
	}
	c := ic.claims[i]
	token, err := LeaseToken(c.Owner)
	if err != nil {
		return nil, err
	}
	ic.left[i]--
	t.claim = &InsertClaim{Token: token, Now: c.Now, Until: c.Now.Add(c.LeaseFor), MaxRedrives: c.MaxRedrives}
	return t.claim, nil
}

// claim is what each claim took, as claimEffectsGroup answers: the
// effects inserted claimed, then, where something may still be due, what
// the claim takes with the room left. It runs after the group's Flush,
// when every insert has answered.
func (ic *insertClaims) claim(ctx context.Context, tx Tx) ([][]*ClaimedEffect, error) {
	if ic == nil {
		return nil, nil
	}
	out := make([][]*ClaimedEffect, len(ic.claims))
	var rest []*EffectClaimParams
	var restAt []int
	for i, c := range ic.claims {
		out[i] = []*ClaimedEffect{}
		refused := false // an effect offered a claim went in approved
		for _, t := range ic.tries[i] {
			switch {
			case t.out.Claimed:
				out[i] = append(out[i], t.claimed())
				ic.count.Add(1)
			case t.out.Inserted && t.claim != nil:
				refused = true
			}
		}
		// In the claim's order: the new effects were all due at once, so
		// by id.
		slices.SortFunc(out[i], func(a, b *ClaimedEffect) int { return cmp.Compare(a.ID, b.ID) })
		if len(out[i]) > 0 && !refused {
			// The claim would take nothing more: when the first went in,
			// nothing else there was due for it (the insert's
			// condition), and the rest went in claimed or past the room.
			continue
		}
		// Something may be due there after all: a backlog, or another
		// transaction's effect committed between two of this one's
		// inserts. (An effect held back behind an older version in
		// flight costs this claim for nothing.)
		if left := c.Limit - len(out[i]); left > 0 {
			r := *c
			r.Limit = left
			rest, restAt = append(rest, &r), append(restAt, i)
		}
	}
	got, err := claimEffectsGroup(ctx, tx, rest)
	if err != nil {
		return nil, err
	}
	for j, i := range restAt {
		out[i] = append(out[i], got[j]...)
	}
	return out, nil
}

// claimed is the effect t inserted claimed, as the claim would have
// answered it: the state it was claimed from, every other field as the
// claim left the row.
func (t *insertTry) claimed() *ClaimedEffect {
	w, p, e, c := t.w, t.p, t.e, t.claim
	src := EventRef{Source: w.Source, EventID: w.EventID}
	until := c.Until.UTC()
	return &ClaimedEffect{Effect: Effect{ID: t.out.ID, EpisodeKey: e.EpisodeKey, Flow: w.Flow, Entity: w.Entity,
		Version: p.Version, Effect: e.Effect, Destination: e.Destination, State: EffectApproved, Request: t.out.Request,
		Source: src.Source, SourceEventID: src.EventID, SourceEvents: []EventRef{src}, TraceContext: t.out.TraceContext,
		CausationID: e.CausationID, Hop: e.Hop, CreatedAt: stored(p.Now), UpdatedAt: stored(c.Now),
		NextAttemptAt: stored(until), Compensates: e.Compensates, DeadlineAt: stored(e.DeadlineAt),
		DeadlineWarnAt: stored(e.DeadlineWarnAt), OnDeadline: e.OnDeadline}, Token: c.Token, Until: until}
}

// stored is t as both databases give it back: UTC, to the microsecond.
func stored(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
