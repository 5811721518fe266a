package store

import (
	"context"
	"time"
)

// Retention is the maintenance part of the contract: deleting what is
// past its source's retention (docs/retention.md).
type Retention interface {
	// RetentionPrune runs one batch of the pruning pass in short
	// transactions of its own. First it examines up to BatchSize effects
	// after AfterEffectID and deletes, with their attempts, those that are
	// finished (PruneEffectStates), last changed before the cutoff of
	// their source event's source, and not the original of an unfinished
	// compensation, leaving a tombstone of each (EffectTombstone): the
	// ledger's inserts treat a tombstone's episode key as an existing
	// effect, so the effect never runs again. Then it examines up to
	// BatchSize events after AfterEventPK and deletes, with their
	// deliveries, work rows and loop visits, those that are past their
	// source's cutoff and that nothing still needs (see PruneKept); then it
	// deletes up to BatchSize audit rows after AfterAuditID that are past
	// their source's cutoff and do not concern an unfinished event (see
	// docs/retention.md). On PostgreSQL only one process prunes at a time:
	// a batch that finds another process pruning returns Busy and deletes
	// nothing.
	RetentionPrune(ctx context.Context, p *RetentionPruneParams) (*RetentionPruneResult, error)
	// EffectTombstoneGet returns the tombstone a pruned effect left under
	// its episode key, or nil.
	EffectTombstoneGet(ctx context.Context, episodeKey string) (*EffectTombstone, error)
}

// RetentionPruneParams is one batch of a pruning pass.
type RetentionPruneParams struct {
	// Now is when the pass runs (logged; the cutoffs are computed from it
	// by the caller).
	Now time.Time
	// Cutoffs gives each source's cutoff: rows received (events) or
	// written (audit) before it are past their retention.
	Cutoffs map[string]time.Time
	// DefaultCutoff applies to sources not in Cutoffs (a source removed
	// from the config) and to audit rows of no source; zero keeps them.
	DefaultCutoff time.Time
	// AfterEffectID, AfterEventPK and AfterAuditID are the pass's
	// cursors: each batch continues where the previous one stopped (the
	// result's Next fields), so rows kept for a reason are examined once
	// per pass.
	AfterEffectID int64
	AfterEventPK  int64
	AfterAuditID  int64
	// BatchSize bounds the rows examined per table (default 200).
	BatchSize int
}

// DefaultPruneBatch is the batch size of a zero RetentionPruneParams.BatchSize.
const DefaultPruneBatch = 200

// Batch returns the batch size with its default.
func (p *RetentionPruneParams) Batch() int {
	if p.BatchSize <= 0 {
		return DefaultPruneBatch
	}
	return p.BatchSize
}

// LatestCutoff is the latest of the cutoffs: no row at or after it is
// past any retention, so a scan in time order can stop there.
func (p *RetentionPruneParams) LatestCutoff() time.Time {
	latest := p.DefaultCutoff
	for _, c := range p.Cutoffs {
		if c.After(latest) {
			latest = c
		}
	}
	return latest
}

// CutoffOf returns the cutoff of a source (zero: keep everything).
func (p *RetentionPruneParams) CutoffOf(source string) time.Time {
	if c, ok := p.Cutoffs[source]; ok {
		return c
	}
	return p.DefaultCutoff
}

// RetentionPruneResult is what one batch deleted, per table, and where the
// pass goes on.
type RetentionPruneResult struct {
	Events, Deliveries, Work, LoopVisits, Audit int64
	// Effects is the number of effects deleted, each leaving a tombstone;
	// Attempts the number of their attempt rows deleted with them.
	Effects, Attempts int64
	// NextEffectID, NextEventPK and NextAuditID are the cursors for the
	// next batch.
	NextEffectID, NextEventPK, NextAuditID int64
	// EffectsDone, EventsDone and AuditDone report that the scan of that
	// table reached rows inside every retention (or the end): the pass is
	// over for it, and the next pass starts from 0 again.
	EffectsDone, EventsDone, AuditDone bool
	// Busy reports that another process holds the pruning lock
	// (PostgreSQL): nothing was deleted, and the caller tries again later.
	Busy bool
}

// Deleted is the total of rows deleted.
func (r *RetentionPruneResult) Deleted() int64 {
	return r.Events + r.Deliveries + r.Work + r.LoopVisits + r.Audit + r.Effects + r.Attempts
}

// Done reports that every scan of the pass is over.
func (r *RetentionPruneResult) Done() bool {
	return r.EffectsDone && r.EventsDone && r.AuditDone
}

// PruneKept documents, for both drivers, why an event past its cutoff is
// kept. An event is deleted only when none holds:
//   - its disposition is accepted (not processed yet) or dead_lettered
//     (waiting for a person), or it is not routed yet;
//   - it has work that is pending (a replay included) or dead-lettered;
//   - it is the source event of an effect still in the ledger (effects
//     reference their source event): an effect goes first, when
//     PruneEffectKept allows, and its event may go in a later batch;
//   - it is the event an entity's projection was last applied from.
const PruneKept = "unfinished, dead-lettered, source of a kept effect, or applied to a projection"

// PruneEffectKept documents, for both drivers, why an effect is kept. An
// effect is deleted, leaving a tombstone, only when all hold:
//   - its state is one of PruneEffectStates: nothing will change it
//     again but an operator's verification or compensation;
//   - it last changed (updated_at) before the cutoff of its source
//     event's source;
//   - it is not the original of a compensation that is not finished
//     itself: the console shows the pair while the undo is under way.
//
// The tombstone keeps the episode key, the names and the stored request,
// so that a resend, a replay or a refetched version that comes back to the
// key finds it and creates nothing, and a different request under the same
// key is still reported as a key conflict.
const PruneEffectKept = "not finished, changed inside the retention, or compensated by an unfinished effect"

// PruneEffectStates are the effect states an effect may be deleted in.
func PruneEffectStates() []EffectState {
	return []EffectState{EffectDone, EffectSuperseded, EffectResolved}
}

// EffectTombstone is what is left of a pruned effect: its episode key, for
// ever.
type EffectTombstone struct {
	EpisodeKey, Flow, Entity, Effect, Destination string
	State                                         EffectState
	Request                                       []byte
	CreatedAt, DeletedAt                          time.Time
}

// PruneTerminalDispositions are the dispositions an event may be deleted in.
func PruneTerminalDispositions() []Disposition {
	return []Disposition{DispositionApplied, DispositionDuplicate, DispositionStale, DispositionSuperseded,
		DispositionUnrouted, DispositionResolved}
}
