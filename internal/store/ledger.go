package store

import (
	"context"
	"errors"
	"time"
)

// Ledger is the part of the contract the delivery worker and the operators
// use: claiming due effects before calling their destination (IP05),
// settling each call with its evidence, and the exception queue.
type Ledger interface {
	// EffectClaim moves up to Limit due effects to submitting under a
	// fresh lease token and returns them, oldest due first (next attempt
	// time, then id). Due means: approved with next_attempt_at <= now (a
	// released effect waits for its NotBefore); retry_wait with
	// next_attempt_at <= now; needs_reconciliation with a scheduled
	// next_attempt_at <= now (unscheduled, it waits for a person); dead
	// with redrives < MaxRedrives and a scheduled next_attempt_at <= now
	// (a scheduled re-drive: attempts restart, redrives+1, audited as
	// effect_redrive); or submitting with an expired lease — a worker died
	// during the call, so its outcome is unknown: the claim records class
	// unknown_outcome on the row, counts the abandoned call (attempts+1 and
	// an attempts row with error AbandonedCall, started when the dead
	// worker claimed it) and says Resumed (the worker must reconcile, never
	// blindly resend: IP04). Resumed claims are audited
	// as effect_resumed; plain claims write no audit row.
	// A claimed effect's next_attempt_at becomes its lease's end (stored
	// and returned): the time it is due again should the call be
	// abandoned, which keeps calls in flight out of the due effects that
	// later claims read.
	// Destinations, when set, restricts the claim to those destinations.
	EffectClaim(ctx context.Context, p *EffectClaimParams) ([]*ClaimedEffect, error)
	// EffectClaimGroup claims for each of ps as EffectClaim would, one
	// after the other, in one transaction, and answers in order; should
	// it fail, nothing is claimed for any of them.
	EffectClaimGroup(ctx context.Context, ps []*EffectClaimParams) ([][]*ClaimedEffect, error)
	// EffectSettle records one call (an attempts row, when Attempt is set)
	// and moves the effect to its next state, fenced by the claim token:
	// ErrLeaseLost when the lease no longer holds, was re-claimed or has
	// run out at Now (nothing written). The error fields, the last
	// response and the next attempt time are set from the params (they
	// describe the last call); DestinationRef only when non-empty. Every
	// settle writes an audit row "effect_<state>".
	EffectSettle(ctx context.Context, p *EffectSettleParams) error
	// EffectSettleGroup settles each of ps exactly as EffectSettle would
	// and answers per params, in order: what EffectSettle would have
	// returned for it. A driver may settle several in one transaction (a
	// group commit for the delivery workers' settles, as FlowApplyGroup is
	// for processing); one settle's failure, a lost lease included, never
	// fails another's.
	EffectSettleGroup(ctx context.Context, ps []*EffectSettleParams) []error
	// EffectRelease gives a claimed effect back (no call was made, for
	// example the destination's token bucket was empty), due again at
	// NotBefore (zero: nothing scheduled, due at once). The state it was
	// claimed from is not kept, so the release decides from the row:
	// needs_reconciliation when its error class is unknown_outcome (an
	// unknown outcome stays one; a zero NotBefore then schedules it at
	// Now), approved when it has no attempts and no error class, and
	// retry_wait otherwise. An effect without an owner that it leaves in
	// needs_reconciliation takes Owner, as a settle into the exception
	// queue does. A claim that no longer holds is left alone, which is
	// not an error.
	EffectRelease(ctx context.Context, p *EffectReleaseParams) error
	// EffectGet returns one effect by id with every field, or nil.
	EffectGet(ctx context.Context, id int64) (*Effect, error)
	// EffectNewer returns the episode key of the newest effect of the
	// same flow, entity and effect name made after effect id
	// (compensations aside on both sides), or "" when there is none: a
	// newer version of the same business effect, which a call of this
	// one must never follow to the destination. A published message's
	// delivery has none: the messages to one endpoint are not versions of
	// one another.
	EffectNewer(ctx context.Context, id int64) (string, error)
	// EffectOperate is an operator's action on the exception queue: retry
	// (dead or needs_reconciliation back to approved, attempts restarted,
	// nothing scheduled; the error class and reason of the last failure
	// stay until the next settle), resolve (from dead,
	// needs_reconciliation, retry_wait or approved; closed by a person,
	// with a required note) or assign (sets Owner, from any state that is
	// not final: approved, acknowledged, retry_wait, needs_reconciliation,
	// dead). A non-empty Note is stored on the effect. A submitting effect
	// is never operated on: its call may be in flight. Other states fail
	// with ErrInvalidTransition, a missing effect with ErrNotFound, and an
	// unknown action or a resolve without a note with ErrInvalidArgument.
	// Each action writes an audit row (effect_retry, effect_resolved,
	// effect_assigned) and returns the updated effect.
	EffectOperate(ctx context.Context, p *EffectOperateParams) (*Effect, error)
	// AttemptList returns an effect's calls in order.
	AttemptList(ctx context.Context, effectID int64) ([]*Attempt, error)
}

// AbandonedCall is the error of the attempt row a claim records when it
// finds an effect still submitting after its lease ran out: the worker that
// held it stopped during (or just before) its call, which the destination
// may have seen. Recording it keeps the attempts equal to the calls the
// destination may have received.
const AbandonedCall = "outcome unknown: the worker stopped during the call"

// ErrInvalidTransition reports an operator action the effect's state does
// not allow.
var ErrInvalidTransition = errors.New("transition not allowed from the effect's state")

// EffectClaimParams asks for due effects.
type EffectClaimParams struct {
	Owner        string
	Now          time.Time
	LeaseFor     time.Duration
	Limit        int
	Destinations []string
	// MaxRedrives bounds automatic re-drives of dead effects (default
	// policy: 3, at 15 min, 1 h and 6 h); 0 disables them.
	MaxRedrives int
}

// ClaimedEffect is an effect leased to one worker for one call. Its State
// is the state it was claimed from (so the worker knows what it resumes);
// every other field is the row as the claim left it, so a re-drive shows
// attempts 0 and the redrives count including this one.
type ClaimedEffect struct {
	Effect
	Token string
	Until time.Time
	// Resumed is set when the effect was found submitting with an expired
	// lease, or needs_reconciliation: a previous call's outcome is unknown.
	Resumed bool
	// Redrive is set when this claim is a scheduled re-drive of a dead
	// effect.
	Redrive bool
}

// Fenced is what a settle's fence would read of c while nothing but its
// claim has changed it (EffectSettleParams.Claimed).
func (c *ClaimedEffect) Fenced() *FencedEffect {
	return &FencedEffect{ID: c.ID, EpisodeKey: c.EpisodeKey, Entity: c.Entity, Source: c.Source, SourceEventID: c.SourceEventID,
		Owner: c.Owner, Attempts: c.Attempts, Calls: c.Calls, Restart: c.Restart}
}

// ErrorClass is how a call's failure is classified (RT03).
type ErrorClass string

// The error classes.
const (
	ClassNone          ErrorClass = ""
	ClassTransient     ErrorClass = "transient"
	ClassQuota         ErrorClass = "quota"
	ClassContention    ErrorClass = "contention"
	ClassPermanent     ErrorClass = "permanent"
	ClassUnknown       ErrorClass = "unknown_outcome"
	ClassHiddenFailure ErrorClass = "hidden_failure"
)

// ErrorClasses returns the classes a failure can have (not ClassNone), for
// validating a filter.
func ErrorClasses() []ErrorClass {
	return []ErrorClass{ClassTransient, ClassQuota, ClassContention, ClassPermanent, ClassUnknown, ClassHiddenFailure}
}

// Attempt is one call to a destination, kept as evidence.
type Attempt struct {
	ID         int64
	EffectID   int64
	Number     int // 1-based within the effect's life
	StartedAt  time.Time
	Duration   time.Duration
	Status     int // HTTP status, 0 when none was received
	Class      ErrorClass
	Error      string // transport error or classification reason; never secrets
	Response   string // trimmed response excerpt; never secrets
	RetryAfter string // the raw Retry-After header value, if any
	// RetryAfterUnit is the unit applied to a numeric Retry-After
	// (seconds or milliseconds); Wait is the wait actually taken before
	// the next attempt (after bounds), so unit errors show up (RT05).
	RetryAfterUnit string
	Wait           time.Duration
	// Reconcile marks a lookup call made to settle an unknown outcome.
	Reconcile bool
	// Restart is what restarted the retry policy's count before this
	// call (RestartOperatorRetry, RestartRedrive), "" when nothing did.
	Restart string
}

// What restarts the retry policy's count of an effect's calls (its
// attempts) while the numbers of its calls go on.
const (
	RestartOperatorRetry = "operator retry"
	RestartRedrive       = "re-drive"
)

// EffectSettleParams settles one claimed effect.
type EffectSettleParams struct {
	EffectID int64
	Token    string
	Now      time.Time
	Actor    string
	// Attempt is the call made, or nil when none was (a reconciliation
	// decided from stored evidence alone).
	Attempt *Attempt
	// State is the next state: done, acknowledged, retry_wait,
	// needs_reconciliation or dead.
	State EffectState
	// NextAttemptAt is when a retry_wait (or a dead effect's re-drive) is
	// due; zero for none.
	NextAttemptAt time.Time
	// AddAttempt counts the call against the retry policy.
	AddAttempt      bool
	Class           ErrorClass
	Reason          string
	SuggestedRepair string
	DestinationRef  string
	LastResponse    string
	// Owner is the configured owner of the effect's destination: an
	// effect without an owner that settles into the exception queue
	// (dead, needs_reconciliation) takes it, so that the queue and the
	// dead_letters signal name who repairs it until someone assigns
	// another (SettleOwner).
	Owner string
	// Claimed is the effect as the settle's claim left it
	// (ClaimedEffect.Fenced), or nil. A driver that can settle by it
	// (SeenSettleDriver) writes the settle in one statement guarded by
	// it, with no read of the effect first; an effect that no longer
	// stands as its claim left it then settles the fenced way.
	Claimed *FencedEffect
}

// EffectReleaseParams gives a claim back without a call.
type EffectReleaseParams struct {
	EffectID  int64
	Token     string
	Now       time.Time
	NotBefore time.Time
	// Owner is the configured owner of the effect's destination: an
	// effect without an owner that the release leaves in
	// needs_reconciliation takes it (EffectSettleParams.Owner).
	Owner string
}

// Operator actions on the exception queue.
const (
	OperateRetry   = "retry"
	OperateResolve = "resolve"
	OperateAssign  = "assign"
)

// EffectOperateParams is one operator action.
type EffectOperateParams struct {
	EffectID int64
	Action   string // OperateRetry, OperateResolve or OperateAssign
	Actor    string // "operator:alice"
	Owner    string // for assign: who owns the repair
	Note     string // required for resolve
	Now      time.Time
}
