package store

import (
	"fmt"
	"strings"
	"time"
)

// The effect ledger's transition rules, shared by both drivers
// (docs/architecture.md, "Where the rules live").

// settleStates are the states a settle may move a submitting effect to.
var settleStates = map[EffectState]bool{
	EffectDone:                true,
	EffectAcknowledged:        true,
	EffectRetryWait:           true,
	EffectNeedsReconciliation: true,
	EffectDead:                true,
	// A call that failed or whose outcome is unknown, of an effect a
	// newer version was applied beside while it was in flight: retried,
	// it would reach the destination after the newer one.
	EffectSuperseded: true,
}

// settleDetail is the audit text of a settle: the transition, the attempt
// number, the class, the reason and the next due time.
func settleDetail(key string, number int, p *EffectSettleParams) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: submitting -> %s", key, p.State)
	if number > 0 {
		fmt.Fprintf(&b, " after attempt %d", number)
	}
	if p.Class != ClassNone {
		fmt.Fprintf(&b, " [%s]", p.Class)
	}
	if p.Reason != "" {
		b.WriteString(": " + p.Reason)
	}
	if !p.NextAttemptAt.IsZero() {
		b.WriteString("; next at " + p.NextAttemptAt.UTC().Format(time.RFC3339Nano))
	}
	return b.String()
}

// operateFrom lists the states each operator action is allowed from. A
// submitting effect is never among them: its call may be in flight.
var operateFrom = map[string][]EffectState{
	OperateRetry:   {EffectDead, EffectNeedsReconciliation},
	OperateResolve: {EffectDead, EffectNeedsReconciliation, EffectRetryWait, EffectApproved},
	OperateAssign: {EffectApproved, EffectAcknowledged, EffectNeedsReconciliation,
		EffectRetryWait, EffectDead},
}

// checkOperate refuses what no effect state could make valid, and text
// (a note, an owner, the actor) that no driver stores as given.
func checkOperate(p *EffectOperateParams) error {
	for _, f := range []struct{ name, v string }{{"note", p.Note}, {"owner", p.Owner}, {"actor", p.Actor}} {
		if err := CheckText(f.name, f.v); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
	}
	switch p.Action {
	case OperateRetry, OperateAssign:
		return nil
	case OperateResolve:
		if strings.TrimSpace(p.Note) == "" {
			return fmt.Errorf("%w: resolve needs a note saying how the effect was closed", ErrInvalidArgument)
		}
		return nil
	}
	return fmt.Errorf("%w: unknown operator action %q", ErrInvalidArgument, p.Action)
}

// operateDetail is the audit text of an operator action.
func operateDetail(f *Effect, p *EffectOperateParams) string {
	var b strings.Builder
	b.WriteString(f.EpisodeKey + ": ")
	switch p.Action {
	case OperateRetry:
		fmt.Fprintf(&b, "%s -> approved (retry; last failure [%s] %s)", f.State, f.ErrorClass, f.Reason)
	case OperateResolve:
		fmt.Fprintf(&b, "%s -> resolved", f.State)
	case OperateAssign:
		fmt.Fprintf(&b, "assigned to %q (was %q)", p.Owner, f.Owner)
	}
	if p.Note != "" {
		b.WriteString("; note: " + p.Note)
	}
	return b.String()
}

// operateAction is the audit action of an operator action.
func operateAction(action string) string {
	switch action {
	case OperateRetry:
		return "effect_retry"
	case OperateResolve:
		return "effect_resolved"
	}
	return "effect_assigned"
}

// Audit actions of the effect ledger, written by both drivers.
const (
	actionEffectRedrive              = "effect_redrive"
	actionEffectResumed              = "effect_resumed"
	ActionDeadlineMissed             = "deadline_missed"
	ActionEffectDead                 = "effect_dead"
	actionEffectCompensationApproved = "effect_compensation_approved"
	ActionReconciliationMismatch     = "reconciliation_mismatch"
	// actionReplay is a replay request, audited by the pipeline.
	actionReplay = "replay"
)

// SettleAction is the audit action of a settle to state: effect_done,
// effect_retry_wait and so on.
func SettleAction(state EffectState) string { return "effect_" + string(state) }

// redriveDetail is the audit text of a claim that re-drives a dead
// effect: the redrives-th of max.
func redriveDetail(key string, redrives, max int) string {
	return fmt.Sprintf("%s: dead -> submitting: re-drive %d of %d", key, redrives, max)
}

// resumedDetail is the audit text of a claim that takes over an effect
// whose call's outcome is unknown (a lease that ran out during the call,
// or needs_reconciliation with a time set).
func resumedDetail(key string, prior EffectState) string {
	return fmt.Sprintf("%s: %s -> submitting: resumed, outcome of the previous call to be reconciled", key, prior)
}

// deadlineDeadDetail is the audit text of an effect moved to dead by its
// deadline (on_deadline: dead).
func deadlineDeadDetail(key string, prior EffectState, reason string) string {
	return fmt.Sprintf("%s: %s -> dead [%s]: %s", key, prior, ClassPermanent, reason)
}

// mismatchDetail is the audit text of a done effect that the verifier
// found not to match the destination.
func mismatchDetail(key, reason string) string {
	return fmt.Sprintf("%s: done -> needs_reconciliation [%s]: %s", key, ClassUnknown, reason)
}
