package store

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"time"
)

// A published message's deliveries used to be inserted approved and then
// claimed by this process's delivery worker in a transaction of its own:
// a commit more between the publish and the calls, and, per endpoint, a
// second row version of the effect with an entry in every index that
// covers it. With a PublishHandoff the publish's own transaction inserts
// them already claimed for the worker, as the claim would have left them
// (submitting, leased to the worker, due again when the lease ends), and
// the worker starts the calls once it commits.
//
// Only where the claim would have taken them: a destination is handed
// over only when the worker has room there and nothing else is due there,
// so that a backlog (retries come due, effects written while the worker
// was full) is still claimed oldest first, and the new effects wait
// behind it. An endpoint's destination holds published messages alone
// (a configured destination cannot contain ':'), and published messages
// are never versions of one another (NoOlderInFlightSQL), so "nothing
// else due" is the whole of the claim's condition there.

// PublishHandoff is this process's delivery worker, as a publish hands it
// the deliveries it writes (deliver.Worker).
type PublishHandoff interface {
	// ReserveFresh promises call slots for the effects a publish is
	// about to write (how many per destination) and returns one claim per
	// destination with room, leaving out those where the worker knows
	// effects are due already (the publish would hold back its own).
	ReserveFresh(effects map[string]int) []*EffectClaimParams
	// Take starts the calls of what the claims took (claimed[i] for
	// claims[i]; nil when the transaction did not commit), gives back the
	// rest, and wakes the worker's own claim where effects may be left.
	Take(claims []*EffectClaimParams, claimed [][]*ClaimedEffect, effects map[string]int)
	// Wake makes the worker claim now.
	Wake()
}

// MessageEffectsClaim asks MessageEffectsInsert to insert effects
// already claimed: at each of Destinations where no effect is due at Now
// (the claim's condition, MaxRedrives its re-drive limit), the first
// Limits[i] of the new effects there, in the order given, in state
// submitting with the token Tokens gives at their index (counted over
// every effect of the call, in order), lease_until and next_attempt_at
// Until, updated_at and claimed_at Now. Every other effect is inserted
// approved, as without a claim.
type MessageEffectsClaim struct {
	Destinations []string
	Limits       []int
	Tokens       []string
	Now, Until   time.Time
	MaxRedrives  int
	// Rows is filled by the time the transaction commits: every effect
	// the call inserted claimed (a driver may list the others too, with
	// Claimed unset).
	Rows []InsertedMessageEffect
}

// InsertedMessageEffect is one effect MessageEffectsInsert inserted.
type InsertedMessageEffect struct {
	ID         int64
	EpisodeKey string
	// Claimed is set when it was inserted submitting.
	Claimed bool
	// Request is the stored request of a claimed effect, as the database
	// gives it back (PostgreSQL normalises JSON): what every call sends.
	Request []byte
}

// LeaseToken is a new lease token of owner: its name, then 24 random hex
// digits, which no other claim can guess or repeat.
func LeaseToken(owner string) (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("lease token: %w", err)
	}
	return owner + ":" + hex.EncodeToString(b[:]), nil
}

// handing is one publish transaction's handoff: every reservation it
// made, one per run of its body (a driver may run the body again), settled
// with the worker once the transaction has ended (finish).
type handing struct {
	h    PublishHandoff
	runs []*handRun
}

// handRun is one run's reservation.
type handRun struct {
	claims  []*EffectClaimParams
	effects map[string]int
	ins     *MessageEffectsClaim
	// flat is every effect of the run in the order the driver gets them,
	// at is each one's index there, by episode key.
	flat []*MessageEffect
	at   map[string]int
}

// newHanding is the handoff of a transaction publishing ps: the first
// handoff among them (every message of a group comes from this process),
// or nil when none has one.
func newHanding(ps []*MessagePublishParams) *handing {
	for _, p := range ps {
		if p.Handoff != nil {
			return &handing{h: p.Handoff}
		}
	}
	return nil
}

// reserve promises slots for fans and answers the claim to insert them
// with, nil when the worker has no room anywhere they go.
func (hd *handing) reserve(fans [][]*MessageEffect) (*MessageEffectsClaim, error) {
	if hd == nil || len(fans) == 0 {
		return nil, nil
	}
	run := &handRun{effects: map[string]int{}, at: map[string]int{}}
	for _, fan := range fans {
		for _, e := range fan {
			run.effects[e.Destination]++
			run.at[e.EpisodeKey] = len(run.flat)
			run.flat = append(run.flat, e)
		}
	}
	run.claims = hd.h.ReserveFresh(run.effects)
	hd.runs = append(hd.runs, run)
	if len(run.claims) == 0 {
		return nil, nil
	}
	c0 := run.claims[0]
	ins := &MessageEffectsClaim{Now: c0.Now, Until: c0.Now.Add(c0.LeaseFor), MaxRedrives: c0.MaxRedrives, Tokens: make([]string, len(run.flat))}
	for _, c := range run.claims {
		if len(c.Destinations) != 1 || c.Owner != c0.Owner || !c.Now.Equal(c0.Now) || c.LeaseFor != c0.LeaseFor || c.MaxRedrives != c0.MaxRedrives {
			return nil, fmt.Errorf("hand off deliveries: claims of more than one destination, owner, time or lease")
		}
		ins.Destinations = append(ins.Destinations, c.Destinations[0])
		ins.Limits = append(ins.Limits, c.Limit)
	}
	for i := range ins.Tokens {
		t, err := LeaseToken(c0.Owner)
		if err != nil {
			return nil, err
		}
		ins.Tokens[i] = t
	}
	run.ins = ins
	return ins, nil
}

// finish settles every reservation with the worker: the last run's, when
// the transaction committed, with what it inserted claimed; every other
// is given back.
func (hd *handing) finish(committed bool, ps []*MessagePublishParams) {
	if hd == nil {
		return
	}
	traces := make(map[string]string, len(ps))
	for _, p := range ps {
		traces[p.ID] = p.TraceContext
	}
	for i, run := range hd.runs {
		if !committed || i < len(hd.runs)-1 || run.ins == nil {
			hd.h.Take(run.claims, nil, run.effects)
			continue
		}
		claimed, held := run.claimed(traces)
		hd.h.Take(run.claims, claimed, run.effects)
		if held {
			hd.h.Wake()
		}
	}
}

// claimed is what each of the run's claims took, as the claim would have
// answered it, and whether a destination was held back by effects due
// there already, which the worker then claims itself.
func (run *handRun) claimed(traces map[string]string) ([][]*ClaimedEffect, bool) {
	ins := run.ins
	claim := make(map[string]int, len(ins.Destinations))
	for i, d := range ins.Destinations {
		claim[d] = i
	}
	out := make([][]*ClaimedEffect, len(run.claims))
	for i := range out {
		out[i] = []*ClaimedEffect{}
	}
	now, until := stored(ins.Now), stored(ins.Until)
	for _, r := range ins.Rows {
		j, ok := run.at[r.EpisodeKey]
		if !ok || !r.Claimed {
			continue
		}
		e := run.flat[j]
		i, ok := claim[e.Destination]
		if !ok {
			continue
		}
		// The message is the effect's version and its source event.
		src := EventRef{Source: PublishSource, EventID: e.Version}
		out[i] = append(out[i], &ClaimedEffect{Effect: Effect{ID: r.ID, EpisodeKey: e.EpisodeKey, Flow: e.Flow, Entity: e.Entity,
			Version: e.Version, Effect: e.Effect, Destination: e.Destination, State: EffectApproved, Request: r.Request,
			Source: src.Source, SourceEventID: src.EventID, SourceEvents: []EventRef{src}, TraceContext: traces[e.Version],
			CausationID: e.CausationID, Hop: e.Hop, CreatedAt: stored(e.Now), UpdatedAt: now,
			NextAttemptAt: until}, Token: ins.Tokens[j], Until: until})
	}
	held := false
	for i, c := range run.claims {
		// In the claim's order: oldest due first, the new effects all
		// due at once, so by id.
		slices.SortFunc(out[i], func(a, b *ClaimedEffect) int { return cmp.Compare(a.ID, b.ID) })
		if len(out[i]) == 0 && run.effects[c.Destinations[0]] > 0 {
			held = true
		}
	}
	return out, held
}
