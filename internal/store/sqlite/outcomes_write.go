package sqlite

import (
	"fmt"

	"github.com/hookledger/hookledger/internal/store"
)

// The write side of the outcome signals: what FlowApply records for
// revision_lag, key_conflicts and compensation. Kept beside each other
// (and identical in both drivers) so the audit texts the signals parse
// stay in one place.

// settledKey is the order key a settled work item catches its entity up
// to: every disposition that leaves the projection at (or past) the item's
// version, but not a dead letter, whose newer version the projection lacks
// and must keep showing as revision_lag. "" leaves the key as it is.
func settledKey(res *store.FlowApplyResult, orderKey string) string {
	switch res.Disposition {
	case store.DispositionApplied, store.DispositionDuplicate, store.DispositionStale, store.DispositionSuperseded:
		return orderKey
	}
	return ""
}

// appliedSort is the version a work item applied ("" when it applied
// none), kept so that hookledger check can compare projections with it.
func appliedSort(res *store.FlowApplyResult, p *store.FlowApplyParams) string {
	if res.Disposition == store.DispositionApplied {
		return p.VersionSort
	}
	return ""
}

// The key_conflict details; the signal's "kind" breakdown is their first
// word.
func episodeConflictDetail(key string) string {
	return fmt.Sprintf("episode_key %s: exists with a different request", key)
}

func versionConflictDetail(subject, version string) string {
	return fmt.Sprintf("version %s: %s: already applied with a different state", version, subject)
}

// compensation is what becomes of a compensate_when insert, decided from
// the original's state (see store.EffectInsert.Compensates).
type compensation int

const (
	compensateInsert    compensation = iota // it may have happened: undo it
	compensateSupersede                     // never sent: do not send it
	compensateNothing                       // superseded or dead: nothing happened to undo
)

func compensationDecision(original store.EffectState) compensation {
	switch original {
	case store.EffectApproved, store.EffectRetryWait:
		return compensateSupersede
	case store.EffectSuperseded, store.EffectDead:
		return compensateNothing
	}
	return compensateInsert
}

func compensationSupersededDetail(key, version, by string) string {
	return fmt.Sprintf("%s (version %s superseded by %s: never sent, so nothing to compensate)", key, version, by)
}

func missingOriginalDetail(e *store.EffectInsert) string {
	return fmt.Sprintf("%s: the effect it compensates (%d) does not exist", e.EpisodeKey, e.Compensates)
}
