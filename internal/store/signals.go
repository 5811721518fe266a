package store

import (
	"context"
	"encoding/json"
	"time"
)

// Outcomes is the part of the contract behind the outcome signals, business
// deadlines, compensation, continuous verification and hookledger check.
type Outcomes interface {
	// SignalSnapshot measures the outcome signals of p.Signals (the
	// built-in ones when nil) at Now, in the registry's order, on one read
	// snapshot: MeasureSignals folds the rows of the driver's queries. It
	// reads indexes and maintained columns only (never a scan of every
	// event or effect), so it stays cheap on a large store, and it never
	// blocks ingest.
	SignalSnapshot(ctx context.Context, p *SignalSnapshotParams) (*SignalSnapshot, error)
	// SignalHistoryRecord folds one computation of the signals into the
	// per-minute and hourly rollups (the highest value and the worst status
	// of each bucket) and deletes minute buckets older than 24 h and hour
	// buckets older than 30 days (relative to Now).
	SignalHistoryRecord(ctx context.Context, p *SignalHistoryRecordParams) error
	// SignalHistoryList returns one signal's buckets of one resolution in
	// [From, To), oldest first.
	SignalHistoryList(ctx context.Context, p *SignalHistoryListParams) ([]*SignalPoint, error)

	// EffectDeadlineEscalate escalates, once each, up to Limit effects
	// whose deadline has passed at Now and that are still pending
	// (approved, submitting, acknowledged, retry_wait,
	// needs_reconciliation): it sets their deadline_missed_at and writes an
	// audit row deadline_missed. An effect whose on_deadline is "dead" and
	// that is not submitting is moved to dead (class permanent, reason
	// "deadline missed ..."), audited as effect_dead; one that is
	// submitting is moved to dead by a later call, once its call is
	// settled, if it is still pending then. It returns the effects it
	// changed, as they are after the change.
	EffectDeadlineEscalate(ctx context.Context, p *EffectDeadlineEscalateParams) ([]*Effect, error)
	// EffectCompensate is an operator's request to undo a done effect: it
	// inserts the compensation effect (episode key "<key>:compensate",
	// effect name "<name>:compensate", Compensates set to the original,
	// state approved, the original's flow, entity, version and source
	// event) with an audit row effect_compensation_approved carrying the
	// note. The original must be done, acknowledged or resolved
	// (ErrInvalidTransition otherwise), must not itself be a compensation
	// (ErrInvalidArgument), and can be compensated at most once
	// (ErrConflict when its compensation exists). A missing effect is
	// ErrNotFound; a missing note ErrInvalidArgument.
	EffectCompensate(ctx context.Context, p *EffectCompensateParams) (*Effect, error)

	// VerifyNext returns up to Limit done effects of one destination after
	// its verification cursor, in id order, that have been done since
	// before Cutoff. It stops at the first effect updated at or after
	// Cutoff that is done or could still become done (so an effect is
	// never skipped for being young), and passes over effects in final
	// states other than done. The returned Cursor is the id the caller
	// may advance to once it has verified every returned effect (it
	// covers the passed-over ones too).
	VerifyNext(ctx context.Context, p *VerifyNextParams) (*VerifyNextResult, error)
	// VerifyAdvance moves a destination's verification cursor forward to
	// AfterID (never backward).
	VerifyAdvance(ctx context.Context, p *VerifyAdvanceParams) error
	// EffectMismatch records that the destination does not have a done
	// effect (or has it different): the effect moves to
	// needs_reconciliation, unscheduled (it waits for a person), with
	// mismatch_at set, class unknown_outcome, the reason from the params,
	// and an audit row reconciliation_mismatch. An effect that is no
	// longer done is left alone (false, nil). The mark is cleared when the
	// effect is next settled done or is resolved.
	EffectMismatch(ctx context.Context, p *EffectMismatchParams) (bool, error)

	// InvariantCheck audits the store's invariants (see the Invariant
	// constants) on a consistent read-only snapshot, without taking the
	// write lock, and returns its findings: at most Limit per invariant.
	InvariantCheck(ctx context.Context, p *InvariantCheckParams) (*InvariantCheckResult, error)
}

// SignalSnapshotParams says when to measure.
type SignalSnapshotParams struct {
	Now time.Time
	// Window bounds the signals that count occurrences rather than
	// standing state (key_conflicts, loop_blocks): those at or after
	// Now-Window count.
	Window time.Duration
	// BreakdownLimit caps the keys of each breakdown dimension (the
	// largest counts are kept); 0 means 20.
	BreakdownLimit int
	// Signals are the signals to measure; nil means BuiltinSignals.
	Signals *SignalRegistry
	// FlowOwners are the flows' configured owners: a dead-lettered event
	// is its flows' owners' to repair (Owners.Event).
	FlowOwners map[string]string
}

// SignalSnapshot is one measurement of every signal.
type SignalSnapshot struct {
	At       time.Time
	Measures []*SignalMeasure
}

// SignalMeasure is one signal's raw measurement, before thresholds. What
// each signal counts, its oldest time and its breakdown dimensions are
// written on its entry of the registry (signalregistry.go).
type SignalMeasure struct {
	Name  string
	Value int64
	// Oldest is the time the oldest counted item started to count; zero
	// when nothing counts.
	Oldest    time.Time
	Breakdown map[string]map[string]int64
	// Near and Passed split the value of a signal whose warn and alert
	// thresholds compare different items (deadline_risk: near deadlines
	// warn, passed ones alert); both are zero for a signal whose whole
	// value is compared.
	Near, Passed int64

	flowOwners map[string]string // SignalSnapshotParams.FlowOwners, for Measure
}

// SignalHistoryRecordParams is one computation of the signals.
type SignalHistoryRecordParams struct {
	Now    time.Time
	Points []SignalHistoryInput
}

// SignalHistoryInput is one signal's value and status at Now.
type SignalHistoryInput struct {
	Name   string
	Value  int64
	Status string // ok, warn or alert
}

// The history resolutions.
const (
	ResolutionMinute = "minute"
	ResolutionHour   = "hour"
)

// SignalHistoryListParams selects one signal's buckets.
type SignalHistoryListParams struct {
	Name       string
	Resolution string
	From, To   time.Time
}

// SignalPoint is one history bucket.
type SignalPoint struct {
	Bucket time.Time
	Value  int64
	Status string
}

// EffectDeadlineEscalateParams escalates missed deadlines.
type EffectDeadlineEscalateParams struct {
	Now   time.Time
	Actor string
	Limit int
	// Owners are the configured owners: an effect the escalation moves
	// to dead without an owner takes its destination's, as a settle into
	// the exception queue does (EffectSettleParams.Owner).
	Owners Owners
}

// EffectCompensateParams is an operator's compensation of one effect.
type EffectCompensateParams struct {
	EffectID int64
	Actor    string
	Note     string
	// Request is the compensation call, rendered by the caller from the
	// effect's compensation template.
	Request json.RawMessage
	Now     time.Time
}

// VerifyNextParams selects effects to verify.
type VerifyNextParams struct {
	Destination string
	Cutoff      time.Time
	Limit       int
}

// VerifyNextResult is a page of effects to verify.
type VerifyNextResult struct {
	Effects []*Effect
	Cursor  int64
}

// VerifyAdvanceParams moves a verification cursor.
type VerifyAdvanceParams struct {
	Destination string
	AfterID     int64
	Now         time.Time
}

// EffectMismatchParams records a verification mismatch.
type EffectMismatchParams struct {
	EffectID int64
	Actor    string
	Reason   string
	Now      time.Time
	// Owner is the configured owner of the effect's destination, which a
	// marked effect without an owner takes (EffectSettleParams.Owner).
	Owner string
}

// The invariants hookledger check audits.
const (
	// InvariantEventPending: every accepted event is terminal or visibly
	// pending (not yet routed, or with pending work).
	InvariantEventPending = "event_pending"
	// InvariantEpisodeKeyOnce: no episode key twice in the ledger.
	InvariantEpisodeKeyOnce = "episode_key_once"
	// InvariantDoneEvidence: every done effect has a successful attempt or
	// a reconcile record.
	InvariantDoneEvidence = "done_evidence"
	// InvariantProjectionVersion: every projection's version is the
	// newest version applied to its entity.
	InvariantProjectionVersion = "projection_version"
	// InvariantEffectEvent: every effect's source event exists.
	InvariantEffectEvent = "effect_event"
	// InvariantEffectState: every effect's state is in the closed set.
	InvariantEffectState = "effect_state"
)

// Invariants returns the invariant names in the order they are checked.
func Invariants() []string {
	return []string{InvariantEventPending, InvariantEpisodeKeyOnce, InvariantDoneEvidence,
		InvariantProjectionVersion, InvariantEffectEvent, InvariantEffectState}
}

// InvariantCheckParams bounds a check.
type InvariantCheckParams struct {
	// Limit caps the findings reported per invariant; 0 means 100. The
	// count of violations is exact whatever the limit.
	Limit int
}

// InvariantCheckResult is what a check found.
type InvariantCheckResult struct {
	// Counts has every invariant's number of violations (0 when it holds).
	Counts   map[string]int64
	Findings []*Finding
}

// Finding is one violation of one invariant.
type Finding struct {
	Invariant string
	// Subject names the row: "event stripe/evt_1", "effect 42",
	// "entity orders/ord_1", "episode key k".
	Subject string
	Detail  string
}
