package store

import (
	"fmt"
	"strings"
	"time"
)

// The effect ledger's transition rules, shared by both drivers
// (docs/architecture.md, "Where the rules live").

// SettleStates are the states a settle may move a submitting effect to.
var SettleStates = map[EffectState]bool{
	EffectDone:                true,
	EffectAcknowledged:        true,
	EffectRetryWait:           true,
	EffectNeedsReconciliation: true,
	EffectDead:                true,
}

// SettleDetail is the audit text of a settle: the transition, the attempt
// number, the class, the reason and the next due time.
func SettleDetail(key string, number int, p *EffectSettleParams) string {
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

// OperateFrom lists the states each operator action is allowed from. A
// submitting effect is never among them: its call may be in flight.
var OperateFrom = map[string][]EffectState{
	OperateRetry:   {EffectDead, EffectNeedsReconciliation},
	OperateResolve: {EffectDead, EffectNeedsReconciliation, EffectRetryWait, EffectApproved},
	OperateAssign: {EffectApproved, EffectAcknowledged, EffectNeedsReconciliation,
		EffectRetryWait, EffectDead},
}

// CheckOperate refuses what no effect state could make valid.
func CheckOperate(p *EffectOperateParams) error {
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

// OperateDetail is the audit text of an operator action.
func OperateDetail(f *Effect, p *EffectOperateParams) string {
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

// OperateAction is the audit action of an operator action.
func OperateAction(action string) string {
	switch action {
	case OperateRetry:
		return "effect_retry"
	case OperateResolve:
		return "effect_resolved"
	}
	return "effect_assigned"
}
