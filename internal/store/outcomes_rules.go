package store

import (
	"fmt"
)

// The write side of the outcome signals: the rules both drivers' FlowApply
// follow for revision_lag, key_conflicts and compensation, here once so
// that the drivers decide alike and the audit texts the signals parse stay
// in one place.

// SettledKey is the order key a settled work item catches its entity up
// to: every disposition that leaves the projection at (or past) the item's
// version, but not a dead letter, whose newer version the projection lacks
// and must keep showing as revision_lag. "" leaves the key as it is.
func SettledKey(res *FlowApplyResult, orderKey string) string {
	switch res.Disposition {
	case DispositionApplied, DispositionDuplicate, DispositionStale, DispositionSuperseded:
		return orderKey
	}
	return ""
}

// AppliedSort is the version a work item applied ("" when it applied
// none), kept so that hookledger check can compare projections with it.
func AppliedSort(res *FlowApplyResult, p *FlowApplyParams) string {
	if res.Disposition == DispositionApplied {
		return p.VersionSort
	}
	return ""
}

// The key_conflict details; the signal's "kind" breakdown is their first
// word.
func EpisodeConflictDetail(key string) string {
	return fmt.Sprintf("episode_key %s: exists with a different request", key)
}

func VersionConflictDetail(subject, version string) string {
	return fmt.Sprintf("version %s: %s: already applied with a different state", version, subject)
}

// Compensation is what becomes of a compensate_when insert, decided from
// the original's state (see EffectInsert.Compensates).
type Compensation int

const (
	CompensateInsert    Compensation = iota // it may have happened: undo it
	CompensateSupersede                     // never sent: do not send it
	CompensateNothing                       // superseded or dead: nothing happened to undo
)

func CompensationDecision(original EffectState) Compensation {
	switch original {
	case EffectApproved, EffectRetryWait:
		return CompensateSupersede
	case EffectSuperseded, EffectDead:
		return CompensateNothing
	}
	return CompensateInsert
}

func CompensationSupersededDetail(key, version, by string) string {
	return fmt.Sprintf("%s (version %s superseded by %s: never sent, so nothing to compensate)", key, version, by)
}

func MissingOriginalDetail(e *EffectInsert) string {
	return fmt.Sprintf("%s: the effect it compensates (%d) does not exist", e.EpisodeKey, e.Compensates)
}
