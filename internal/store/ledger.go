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
	// fresh lease token and returns them. Due means: approved; retry_wait
	// with next_attempt_at <= now; dead with redrives left and
	// next_attempt_at <= now (a scheduled re-drive: attempts restart,
	// redrives+1); or submitting with an expired lease — a worker died
	// during the call, so its outcome is unknown and the claim says
	// Resumed (the worker must reconcile, never blindly resend: IP04).
	// Destinations, when set, restricts the claim to those destinations.
	EffectClaim(ctx context.Context, p *EffectClaimParams) ([]*ClaimedEffect, error)
	// EffectSettle records one call (an attempts row) and moves the effect
	// to its next state, fenced by the claim token: ErrLeaseLost when the
	// lease no longer holds (nothing written). Every transition writes an
	// audit row.
	EffectSettle(ctx context.Context, p *EffectSettleParams) error
	// EffectRelease gives a claimed effect back unchanged (no call was
	// made, for example the destination's token bucket was empty), due
	// again at NotBefore.
	EffectRelease(ctx context.Context, p *EffectReleaseParams) error
	// EffectGet returns one effect by id, or nil.
	EffectGet(ctx context.Context, id int64) (*Effect, error)
	// EffectOperate is an operator's action on the exception queue: retry
	// (dead or needs_reconciliation back to approved, attempts restarted)
	// or resolve (closed by a person, with a note). It fails with
	// ErrInvalidTransition for effects in other states.
	EffectOperate(ctx context.Context, p *EffectOperateParams) (*Effect, error)
	// AttemptList returns an effect's calls in order.
	AttemptList(ctx context.Context, effectID int64) ([]*Attempt, error)
}

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

// ClaimedEffect is an effect leased to one worker for one call.
type ClaimedEffect struct {
	Effect
	Token string
	Until time.Time
	// Resumed is set when the effect was found submitting with an expired
	// lease: a previous call's outcome is unknown.
	Resumed bool
	// Redrive is set when this claim is a scheduled re-drive of a dead
	// effect.
	Redrive bool
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
}

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
}

// EffectReleaseParams gives a claim back without a call.
type EffectReleaseParams struct {
	EffectID  int64
	Token     string
	Now       time.Time
	NotBefore time.Time
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
