package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// The effect ledger's operations (Ledger): claims, settles and the
// operators' actions, over the statements of LedgerTx. Claims and
// settles are the delivery path (TxProcess): each costs the round trips
// of its reads, the writes going with the commit where the driver can
// hold them back.

// LedgerTx is the statements of the effect ledger.
type LedgerTx interface {
	// EffectLease leases, for each of ps in order, up to its Limit due
	// effects (see Ledger.EffectClaim for due, and Destinations), in
	// claim order: next attempt time, then
	// id. Where the database has row locks it locks them, passing over
	// rows another transaction holds. Each is leased under a fresh token
	// made from Owner: state submitting, lease_until and next_attempt_at
	// Until, updated_at Now. The claim's transition from each state is
	// LeaseTransition's, which the statement applies in the same write
	// (a rule the database can apply as it leases, so a claim costs no
	// read of the rows before it). Each comes back as the claim left it,
	// but for State, which is the state it was claimed from, with the
	// time it last changed before the claim and, for one claimed from
	// submitting, the end of the lease it had. An effect is not due while
	// an older effect of the same business effect is in flight
	// (NoOlderInFlightSQL, in the statement's condition). Each of ps
	// leases what it would after the ones before it, and answers in
	// order; a driver may send them to the database together.
	EffectLease(ctx context.Context, ps []*EffectLeaseParams) ([][]*LeasedEffect, error)
	// AttemptInsert records a call: an attempts row with a's fields.
	AttemptInsert(ctx context.Context, a *Attempt) error
	// EffectsFence reads the effects whose lease each of ps still holds:
	// its token, state submitting, and lease_until after its Now. Where
	// the database has row locks it locks them until the commit, in id
	// order, the order every settle locks in (a claimer passes a locked
	// row by), so no claim takes one over halfway. An effect whose lease
	// does not hold is absent from the answer. Each comes as the few
	// columns a settle reads (FencedEffect), not the whole row: reading
	// every column back (the request, as large as the body limit, above
	// all) was most of a fence's time, on every delivery.
	EffectsFence(ctx context.Context, ps []*EffectSettleParams) (map[int64]*FencedEffect, error)
	// EffectsSettle writes each settle: its attempts row, when it has
	// one, and the effect's next state (SettleWrite).
	EffectsSettle(ctx context.Context, ws []*SettleWrite) error
	// EffectRetry moves effect ID to approved, attempts 0, nothing
	// scheduled, its note set when Note is not empty, updated at Now.
	EffectRetry(ctx context.Context, p *EffectOperateParams) error
	// EffectResolve moves effect ID to resolved, nothing scheduled, its
	// note Note and its mismatch mark cleared, updated at Now.
	EffectResolve(ctx context.Context, p *EffectOperateParams) error
	// EffectAssign sets effect ID's owner to Owner and its note when Note
	// is not empty, updated at Now.
	EffectAssign(ctx context.Context, p *EffectOperateParams) error
}

// EffectLeaseParams leases due effects.
type EffectLeaseParams struct {
	Owner        string
	Now, Until   time.Time
	Limit        int
	Destinations []string
	MaxRedrives  int
	// ResumedReason is the reason a call found abandoned records.
	ResumedReason string
}

// LeasedEffect is one effect a lease took.
type LeasedEffect struct {
	Effect
	Token string
	// PriorAt is when the effect last changed before the claim (for one
	// claimed from submitting: when the previous holder claimed it), and
	// PriorUntil the end of that holder's lease.
	PriorAt, PriorUntil time.Time
}

// LeaseTransition is what a claim does to an effect claimed from its
// State, beside leasing it: a dead effect is re-driven (attempts restart,
// redrives+1, the next call's row marked RestartRedrive), and one still
// submitting after its lease ran out was abandoned during its call,
// whose outcome is therefore unknown: it is counted (attempts+1, and
// calls+1 for its attempts row) and the effect takes class
// unknown_outcome with reason, so that giving this claim back without a
// call leaves it awaiting reconciliation, never a blind resend (IP04).
func LeaseTransition(f *Effect, reason string) {
	switch f.State {
	case EffectDead:
		f.Attempts = 0
		f.Redrives++
		f.Restart = RestartRedrive
	case EffectSubmitting:
		f.ErrorClass, f.Reason = ClassUnknown, reason
		f.Attempts++
		f.Calls++
	}
}

// ResumedReason is the reason recorded on an effect found submitting with
// an expired lease.
const ResumedReason = "the lease expired during the call: outcome unknown"

// abandonedDetail is the error of an abandoned call's attempts row.
func abandonedDetail(leaseUntil time.Time) string {
	return AbandonedCall + " (its lease ran out at " + leaseUntil.UTC().Format(time.RFC3339Nano) + ")"
}

// SettleWrite is one settle as EffectsSettle writes it.
type SettleWrite struct {
	*EffectSettleParams
	// Attempts is the effect's attempts after the settle; Calls and
	// Restart its calls and restart mark (a call clears it).
	Attempts int
	Calls    int
	Restart  string
	// Call is the attempts row, numbered, with its start, or nil.
	Call *Attempt
	// Owner is the effect's owner after the settle (SettleOwner).
	Owner string
}

// FencedEffect is what a settle reads of an effect whose lease holds
// (Tx.EffectsFence): the counts and owner its write follows from, and what
// its audit row names.
type FencedEffect struct {
	ID                                        int64
	EpisodeKey, Entity, Source, SourceEventID string
	Owner                                     string
	Attempts, Calls                           int
	Restart                                   string
}

// FencedEffectColumns selects a FencedEffect from effects f joined to its
// source event e, in the order of its Dests.
const FencedEffectColumns = `f.id, f.episode_key, f.entity, e.source, e.event_id, f.owner, f.attempts, f.calls, f.restart`

// Dests are the scan destinations of FencedEffectColumns, in order.
func (f *FencedEffect) Dests() []any {
	return []any{&f.ID, &f.EpisodeKey, &f.Entity, &f.Source, &f.SourceEventID, &f.Owner, &f.Attempts, &f.Calls, &f.Restart}
}

// settleOwner is the owner an effect has after a settle: the one it has,
// else, when it settles into the exception queue, the configured owner
// the settle carries. An owner a person assigned is never replaced.
func settleOwner(f *FencedEffect, p *EffectSettleParams) string {
	return queueOwner(f.Owner, slices.Contains(ExceptionStates(), p.State), p.Owner)
}

// queueOwner is the rule of every way into the exception queue (a
// settle, a deadline's escalation, a verification mismatch, a release to
// needs_reconciliation): an effect that enters it without an owner takes
// the configured one; an owner it has is kept.
func queueOwner(owner string, enters bool, configured string) string {
	if owner == "" && enters {
		return configured
	}
	return owner
}

// settleCounts is the rule settles count by: the effect's attempts after
// this settle, and the attempts row's number (0: no call), which follows
// the effect's calls whatever restarted its attempts.
func settleCounts(f *FencedEffect, p *EffectSettleParams) (attempts, number int) {
	attempts = f.Attempts
	if p.AddAttempt {
		attempts++
	}
	if p.Attempt != nil {
		number = f.Calls + 1
	}
	return attempts, number
}

// EffectClaim leases due effects, oldest due first (see Ledger). Plain
// claims write no audit row; a re-drive and a resumed call write one, and
// an abandoned call its attempts row, started when the dead worker
// claimed it.
func (r *Rules) EffectClaim(ctx context.Context, p *EffectClaimParams) ([]*ClaimedEffect, error) {
	out, err := r.EffectClaimGroup(ctx, []*EffectClaimParams{p})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// EffectClaimGroup claims for each of ps, in order, in one transaction:
// what EffectClaim would have claimed for each, were they run one after
// the other. The delivery worker asks for every destination with room at
// once, each up to its own room; on PostgreSQL each of those claims was a
// transaction of its own, and ten destinations' claims, run at once,
// wrote their new row versions into the same pages and committed ten
// times. Should the transaction fail, nothing is claimed for any.
func (r *Rules) EffectClaimGroup(ctx context.Context, ps []*EffectClaimParams) ([][]*ClaimedEffect, error) {
	var out [][]*ClaimedEffect
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		var err error
		out, err = claimEffectsGroup(ctx, tx, ps)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim effects: %w", err)
	}
	return out, nil
}

// claimEffectsGroup is EffectClaimGroup's work inside tx: the leases of
// every claim at once (on PostgreSQL, one round trip), then what each
// claimed effect asks for beyond its lease.
func claimEffectsGroup(ctx context.Context, tx Tx, ps []*EffectClaimParams) ([][]*ClaimedEffect, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	lps := make([]*EffectLeaseParams, len(ps))
	for i, p := range ps {
		lps[i] = &EffectLeaseParams{Owner: p.Owner, Now: p.Now, Until: p.Now.Add(p.LeaseFor), Limit: ClampLimit(p.Limit),
			Destinations: p.Destinations, MaxRedrives: p.MaxRedrives, ResumedReason: ResumedReason}
	}
	leased, err := tx.EffectLease(ctx, lps)
	if err != nil {
		return nil, err
	}
	if len(leased) != len(ps) {
		return nil, fmt.Errorf("%d claims answered of %d", len(leased), len(ps))
	}
	out := make([][]*ClaimedEffect, len(ps))
	for i, p := range ps {
		if out[i], err = claimed(ctx, tx, p, lps[i].Until, leased[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// claimed is the claim p's effects, leased until until, with the audit
// row of a re-drive or a resumed call and the attempts row of an
// abandoned call.
func claimed(ctx context.Context, tx Tx, p *EffectClaimParams, until time.Time, leased []*LeasedEffect) ([]*ClaimedEffect, error) {
	out := make([]*ClaimedEffect, 0, len(leased))
	for _, l := range leased {
		c := &ClaimedEffect{Effect: l.Effect, Token: l.Token, Until: until.UTC()}
		c.Redrive = c.State == EffectDead
		c.Resumed = c.State == EffectSubmitting || c.State == EffectNeedsReconciliation
		var err error
		switch {
		case c.Redrive:
			err = tx.Audit(ctx, effectAudit(&c.Effect, p.Now, p.Owner, actionEffectRedrive, redriveDetail(c.EpisodeKey, c.Redrives, p.MaxRedrives)))
		case c.Resumed:
			err = tx.Audit(ctx, effectAudit(&c.Effect, p.Now, p.Owner, actionEffectResumed, resumedDetail(c.EpisodeKey, c.State)))
		}
		if err != nil {
			return nil, err
		}
		if c.State == EffectSubmitting {
			if err := tx.AttemptInsert(ctx, &Attempt{EffectID: c.ID, Number: c.Calls, StartedAt: l.PriorAt,
				Duration: l.PriorUntil.Sub(l.PriorAt), Class: ClassUnknown, Error: abandonedDetail(l.PriorUntil)}); err != nil {
				return nil, fmt.Errorf("record abandoned call of effect %d: %w", c.ID, err)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// EffectSettle records one call and moves the effect on, fenced by its
// lease token (see Ledger).
func (r *Rules) EffectSettle(ctx context.Context, p *EffectSettleParams) error {
	if !settleStates[p.State] {
		return fmt.Errorf("settle effect %d: cannot settle to state %q", p.EffectID, p.State)
	}
	if r.settleSeen(ctx, []*EffectSettleParams{p})[p.EffectID] {
		return nil
	}
	return r.settleFenced(ctx, p)
}

// settleFenced is EffectSettle's fenced way, in a transaction of its own.
func (r *Rules) settleFenced(ctx context.Context, p *EffectSettleParams) error {
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		lost, err := settle(ctx, tx, []*EffectSettleParams{p})
		if err == nil && lost[p.EffectID] {
			err = ErrLeaseLost
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("settle effect %d: %w", p.EffectID, err)
	}
	return nil
}

// EffectSettleGroup settles the group in one transaction: the delivery
// workers' settles share one commit, and on PostgreSQL one statement per
// table, or one statement in all for the settles that carry their claims
// (settleSeen), those that then need it fenced in a second. An effect
// whose lease no longer holds is answered ErrLeaseLost and nothing is
// written for it; should the group fail as a whole, each is settled
// alone, so that one cannot fail another.
func (r *Rules) EffectSettleGroup(ctx context.Context, ps []*EffectSettleParams) []error {
	errs := make([]error, len(ps))
	seen := make(map[int64]bool, len(ps))
	for _, p := range ps {
		if !settleStates[p.State] || seen[p.EffectID] {
			for i, p := range ps {
				errs[i] = r.EffectSettle(ctx, p) // it answers each precisely
			}
			return errs
		}
		seen[p.EffectID] = true
	}
	settled := r.settleSeen(ctx, ps)
	var rest []int // indexes of ps still to settle, the fenced way
	for i, p := range ps {
		if !settled[p.EffectID] {
			rest = append(rest, i)
		}
	}
	alone := func() {
		for _, i := range rest {
			errs[i] = r.settleFenced(ctx, ps[i])
		}
	}
	if len(rest) < 2 {
		alone()
		return errs
	}
	group := make([]*EffectSettleParams, len(rest))
	for j, i := range rest {
		group[j] = ps[i]
	}
	var lost map[int64]bool
	err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		var err error
		lost, err = settle(ctx, tx, group)
		return err
	})
	if err != nil {
		r.settlesAlone.Add(1)
		alone()
		return errs
	}
	for _, i := range rest {
		if lost[ps[i].EffectID] {
			errs[i] = fmt.Errorf("settle effect %d: %w", ps[i].EffectID, ErrLeaseLost)
		}
	}
	return errs
}

// SeenSettleDriver is a Driver that settles effects by what their claims
// saw, in one statement and one round trip (PostgreSQL, where the fence
// is a round trip of its own, before the writes and the commit can go).
type SeenSettleDriver interface {
	// EffectsSettleSeen writes, in one transaction of its own, each of ws
	// whose effect stands as its claim left it: the fence's condition
	// (EffectsFence) holds, and its owner, attempts, calls, restart mark,
	// episode key and entity are its Claimed's. For each it writes what
	// EffectsSettle would, and audits[i], ws[i]'s audit row. The others
	// are left alone. It answers the effects it wrote.
	EffectsSettleSeen(ctx context.Context, ws []*SettleWrite, audits []*AuditInsertParams) (map[int64]bool, error)
}

// settleSeen settles, where the driver can (SeenSettleDriver), each of ps
// that carries its claim, guarded by it: what the fenced way would write
// on an effect that stands as its claim left it, which is what a fence
// would read of it, so the settle needs no read first. It answers the
// effects it settled; the others (one changed since its claim, a lost
// lease, or all of them when the transaction failed, which then wrote
// nothing) are the fenced way's, which reads each as it stands and
// answers precisely.
func (r *Rules) settleSeen(ctx context.Context, ps []*EffectSettleParams) map[int64]bool {
	d, ok := r.db.(SeenSettleDriver)
	if !ok {
		return nil
	}
	ws := make([]*SettleWrite, 0, len(ps))
	audits := make([]*AuditInsertParams, 0, len(ps))
	for _, p := range ps {
		if p.Claimed == nil {
			continue
		}
		w, a := settleWrite(p.Claimed, p)
		ws, audits = append(ws, w), append(audits, a)
	}
	if len(ws) == 0 {
		return nil
	}
	settled, err := d.EffectsSettleSeen(ctx, ws, audits)
	if err != nil {
		return nil
	}
	return settled
}

// settle fences ps and writes those whose lease holds, with their audit
// rows; it answers the effects whose lease was lost.
func settle(ctx context.Context, tx Tx, ps []*EffectSettleParams) (map[int64]bool, error) {
	held, err := tx.EffectsFence(ctx, ps)
	if err != nil {
		return nil, fmt.Errorf("check lease: %w", err)
	}
	lost := map[int64]bool{}
	ws := make([]*SettleWrite, 0, len(ps))
	var audits []*AuditInsertParams
	for _, p := range ps {
		f := held[p.EffectID]
		if f == nil {
			lost[p.EffectID] = true
			continue
		}
		w, a := settleWrite(f, p)
		ws, audits = append(ws, w), append(audits, a)
	}
	if len(ws) == 0 {
		return lost, nil
	}
	if err := tx.EffectsSettle(ctx, ws); err != nil {
		return nil, fmt.Errorf("update effect: %w", err)
	}
	for _, a := range audits {
		if err := tx.Audit(ctx, a); err != nil {
			return nil, err
		}
	}
	return lost, nil
}

// settleWrite is p's write on an effect that stands as f, and its audit
// row: the one rule both ways of settling write by.
func settleWrite(f *FencedEffect, p *EffectSettleParams) (*SettleWrite, *AuditInsertParams) {
	w := &SettleWrite{EffectSettleParams: p, Owner: settleOwner(f, p)}
	var number int
	w.Attempts, number = settleCounts(f, p)
	w.Calls, w.Restart = f.Calls, f.Restart
	if p.Attempt != nil {
		a := *p.Attempt
		a.EffectID, a.Number, a.Restart = p.EffectID, number, f.Restart
		w.Calls, w.Restart = number, ""
		if a.StartedAt.IsZero() {
			a.StartedAt = p.Now
		}
		w.Call = &a
	}
	return w, entityAudit(f.Source, f.SourceEventID, f.Entity, p.Now, p.Actor, SettleAction(p.State),
		settleDetail(f.EpisodeKey, number, p))
}

// EffectOperate applies one operator action in one transaction, with the
// effect row locked where the database has row locks, so that a claim
// cannot take it halfway (see Ledger).
func (r *Rules) EffectOperate(ctx context.Context, p *EffectOperateParams) (*Effect, error) {
	if err := checkOperate(p); err != nil {
		return nil, fmt.Errorf("operate on effect %d: %w", p.EffectID, err)
	}
	var f *Effect
	err := r.db.InTx(ctx, TxOperate, func(ctx context.Context, tx Tx) error {
		var err error
		f, err = operate(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("operate on effect %d: %w", p.EffectID, err)
	}
	return f, nil
}

func operate(ctx context.Context, tx Tx, p *EffectOperateParams) (*Effect, error) {
	f, err := tx.EffectRead(ctx, p.EffectID, true)
	if err != nil {
		return nil, fmt.Errorf("read effect: %w", err)
	}
	if f == nil {
		return nil, fmt.Errorf("effect: %w", ErrNotFound)
	}
	if !slices.Contains(operateFrom[p.Action], f.State) {
		return nil, fmt.Errorf("%s from %s: %w", p.Action, f.State, ErrInvalidTransition)
	}
	switch p.Action {
	case OperateRetry:
		err = tx.EffectRetry(ctx, p)
	case OperateResolve:
		err = tx.EffectResolve(ctx, p)
	case OperateAssign:
		err = tx.EffectAssign(ctx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("update effect: %w", err)
	}
	if err := tx.Audit(ctx, effectAudit(f, p.Now, p.Actor, operateAction(p.Action), operateDetail(f, p))); err != nil {
		return nil, err
	}
	if f, err = tx.EffectRead(ctx, p.EffectID, false); err != nil {
		return nil, fmt.Errorf("read effect: %w", err)
	}
	return f, nil
}

// NoOlderInFlightSQL is the claim's condition that holds an effect back
// while an older effect of the same flow, entity and effect name (a lower
// id) is submitting: one call of a business effect in flight at a time.
// Two calls at once could reach the destination in either order, the
// older version last, which no retry undoes; once the older call is
// settled the newer is claimed, and a claim of the older one after that
// finds the newer and supersedes itself (EffectNewer). Compensations and
// published messages are not versions of one another and are never held.
// f is the claimed row's alias; hint follows the table name of the lookup
// (SQLite names the index, effects_entity, that answers it).
func NoOlderInFlightSQL(f, hint string) string {
	return noneInFlightSQL(f, hint, ` AND o.id < `+f+`.id`)
}

// NoneInFlightSQL is NoOlderInFlightSQL for an effect f about to be
// inserted (with no id yet): every stored effect is older than it.
func NoneInFlightSQL(f, hint string) string { return noneInFlightSQL(f, hint, "") }

func noneInFlightSQL(f, hint, older string) string {
	return `NOT (` + f + `.compensates = 0 AND ` + f + `.flow <> '` + PublishFlow + `' AND EXISTS (
		SELECT 1 FROM effects o ` + hint + ` WHERE o.flow = ` + f + `.flow AND o.entity = ` + f + `.entity
			AND o.effect = ` + f + `.effect AND o.state = 'submitting'` + older + ` AND o.compensates = 0))`
}
