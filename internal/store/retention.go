package store

import (
	"context"
	"time"
)

// Retention is the maintenance part of the contract: deleting what is
// past its source's retention (docs/retention.md).
type Retention interface {
	// RetentionPrune runs one batch of the pruning pass in short
	// transactions of its own: it examines up to BatchSize events after
	// AfterEventPK and deletes, with their deliveries, work rows and loop
	// visits, those that are past their source's cutoff and that nothing
	// still needs (see PruneKept); then it deletes up to BatchSize audit
	// rows after AfterAuditID that are past their source's cutoff and do
	// not concern an unfinished event. Effects and their attempts are never
	// deleted, so an event that caused an effect is kept (see
	// docs/retention.md for why). On PostgreSQL only one process prunes at
	// a time: a batch that finds another process pruning returns Busy and
	// deletes nothing.
	RetentionPrune(ctx context.Context, p *RetentionPruneParams) (*RetentionPruneResult, error)
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
	// AfterEventPK and AfterAuditID are the pass's cursors: each batch
	// continues where the previous one stopped (the result's Next
	// fields), so rows kept for a reason are examined once per pass.
	AfterEventPK int64
	AfterAuditID int64
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
	// NextEventPK and NextAuditID are the cursors for the next batch.
	NextEventPK, NextAuditID int64
	// EventsDone and AuditDone report that the scan of that table reached
	// rows inside every retention (or the end): the pass is over for it,
	// and the next pass starts from 0 again.
	EventsDone, AuditDone bool
	// Busy reports that another process holds the pruning lock
	// (PostgreSQL): nothing was deleted, and the caller tries again later.
	Busy bool
}

// Deleted is the total of rows deleted.
func (r *RetentionPruneResult) Deleted() int64 {
	return r.Events + r.Deliveries + r.Work + r.LoopVisits + r.Audit
}

// PruneKept documents, for both drivers, why an event past its cutoff is
// kept. An event is deleted only when none holds:
//   - its disposition is accepted (not processed yet) or dead_lettered
//     (waiting for a person), or it is not routed yet;
//   - it has work that is pending (a replay included) or dead-lettered;
//   - it is the source event of any effect: the effect ledger is never
//     pruned, because the unique episode key is what stops a resend or a
//     replay from running a business effect twice, and effects reference
//     their source event;
//   - it is the event an entity's projection was last applied from.
const PruneKept = "unfinished, dead-lettered, source of an effect, or applied to a projection"

// PruneTerminalDispositions are the dispositions an event may be deleted in.
func PruneTerminalDispositions() []Disposition {
	return []Disposition{DispositionApplied, DispositionDuplicate, DispositionStale, DispositionSuperseded,
		DispositionUnrouted, DispositionResolved}
}
