package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The write side of the outcome signals: the rules both drivers' FlowApply
// follow for revision_lag, key_conflicts and compensation, here once so
// that the drivers decide alike and the audit texts the signals parse stay
// in one place.

// settledKey is the order key a settled work item catches its entity up
// to: every disposition that leaves the projection at (or past) the item's
// version, but not a dead letter, whose newer version the projection lacks
// and must keep showing as revision_lag. "" leaves the key as it is.
func settledKey(res *FlowApplyResult, orderKey string) string {
	switch res.Disposition {
	case DispositionApplied, DispositionDuplicate, DispositionStale, DispositionSuperseded:
		return orderKey
	}
	return ""
}

// appliedSort is the version a work item applied ("" when it applied
// none), kept so that hookledger check can compare projections with it.
func appliedSort(res *FlowApplyResult, p *FlowApplyParams) string {
	if res.Disposition == DispositionApplied {
		return p.VersionSort
	}
	return ""
}

// episodeConflictDetail is the key_conflict audit text of an episode key
// asked for again with another request. The signal's "kind" breakdown is
// the first word of each key_conflict detail.
func episodeConflictDetail(key string) string {
	return fmt.Sprintf("episode_key %s: exists with a different request", key)
}

// versionConflictDetail is the key_conflict audit text of two states sent for one version.
func versionConflictDetail(subject, version string) string {
	return fmt.Sprintf("version %s: %s: already applied with a different state", version, subject)
}

// compensation is what becomes of a compensate_when insert, decided from
// the original's state (see EffectInsert.Compensates).
type compensation int

const (
	compensateInsert    compensation = iota // it may have happened: undo it
	compensateSupersede                     // never sent: do not send it
	compensateNothing                       // superseded or dead: nothing happened to undo
)

func compensationDecision(original EffectState) compensation {
	switch original {
	case EffectApproved, EffectRetryWait:
		return compensateSupersede
	case EffectSuperseded, EffectDead:
		return compensateNothing
	}
	return compensateInsert
}

// compensationSupersededDetail is the effect_superseded audit text of an original stopped instead of compensated.
func compensationSupersededDetail(key, version, by string) string {
	return fmt.Sprintf("%s (version %s superseded by %s: never sent, so nothing to compensate)", key, version, by)
}

// missingOriginalDetail is the effect_skipped audit text of a compensation whose original is gone.
func missingOriginalDetail(e *EffectInsert) string {
	return fmt.Sprintf("%s: the effect it compensates (%d) does not exist", e.EpisodeKey, e.Compensates)
}

// The operators' side of the outcomes: texts and rules the drivers' escalation,
// compensation and verification share.

// errorIfNil turns a vanished row into an error.
func errorIfNil(f *Effect) error {
	if f == nil {
		return errors.New("effect vanished")
	}
	return nil
}

// deadlineMissedDetail is the deadline_missed audit text.
func deadlineMissedDetail(f *Effect, deadline time.Time, onDead bool) string {
	d := fmt.Sprintf("%s: deadline %s missed in state %s", f.EpisodeKey, deadline.Format(time.RFC3339Nano), f.State)
	switch {
	case onDead && f.State == EffectSubmitting:
		d += "; on_deadline dead: moved to dead once its call is settled"
	case onDead:
		d += "; on_deadline dead"
	default:
		d += "; still trying"
	}
	return d
}

// deadlineDeadReason is the reason of an effect moved to dead by on_deadline: dead.
func deadlineDeadReason(deadline time.Time) string {
	return "deadline missed at " + deadline.Format(time.RFC3339Nano) + ": on_deadline is dead, so a person decides"
}

// deadlineRepair is the suggested repair of an effect whose deadline passed.
const deadlineRepair = "the business deadline has passed: decide whether the effect is still wanted; retry it, or resolve it with a note (compensate it if it was done meanwhile)"

// compensationSuffix makes a compensation's episode key and effect name
// from the original's.
const compensationSuffix = ":compensate"

// compensable are the states an operator may compensate from: the call
// may have done its work.
var compensable = map[EffectState]bool{
	EffectDone: true, EffectAcknowledged: true, EffectResolved: true,
}

// checkCompensate validates an operator's compensation before any read.
func checkCompensate(p *EffectCompensateParams) error {
	if strings.TrimSpace(p.Note) == "" {
		return fmt.Errorf("%w: a compensation needs a note saying why", ErrInvalidArgument)
	}
	if !json.Valid(p.Request) {
		return fmt.Errorf("%w: the compensation request is not JSON", ErrInvalidArgument)
	}
	return nil
}

// compensationDetail is the effect_compensation_approved audit text.
func compensationDetail(key string, origID int64, origKey string, origState EffectState, note string) string {
	return fmt.Sprintf("%s: approved, compensating effect %d (%s, %s); note: %s", key, origID, origKey, origState, note)
}

// DeadlineStates are the states in which an effect can still miss its
// deadline: the states escalation looks at. The deadline index
// (effects_deadline) holds exactly these, so a driver that writes them
// into its SQL (SQLList) lets the planner prove the index usable.
func DeadlineStates() []EffectState {
	return []EffectState{EffectApproved, EffectSubmitting, EffectAcknowledged, EffectRetryWait, EffectNeedsReconciliation}
}

// SQLList writes values as an SQL list of string literals, ('a', 'b'),
// for a statement whose text must name a state set the way a partial
// index's predicate does. The values are the store's own names: none
// holds a quote.
func SQLList[T ~string](values []T) string {
	var b strings.Builder
	b.WriteString("(")
	for i, v := range values {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("'" + string(v) + "'")
	}
	b.WriteString(")")
	return b.String()
}

// finalNotDone are the states verification passes over: the effect can
// never become done, so the destination need not hold it.
var finalNotDone = map[EffectState]bool{EffectSuperseded: true, EffectResolved: true}

// verifyScan bounds the rows one VerifyNext reads, so that a long run of
// passed-over effects costs several calls rather than one long read.
const verifyScan = 1000

// verifyStop reports the first effect the cursor must not pass yet: one
// changed at or after the cutoff that is done or may still become done.
// A done effect is returned only once it has been done since before the
// cutoff, so the destination had time to show it. An effect pending since
// before the cutoff (waiting for a person) is passed over rather than
// holding the destination's verification back indefinitely.
func verifyStop(f *Effect, cutoff time.Time) bool {
	return !f.UpdatedAt.Before(cutoff) && !finalNotDone[f.State]
}

// mismatchRepair is the suggested repair of a reconciliation mismatch.
func mismatchRepair(f *Effect) string {
	return fmt.Sprintf("check %s for episode %s: if it holds the effect as intended, resolve with a note; if not, retry the effect", f.Destination, f.EpisodeKey)
}
