package store

import (
	"context"
	"fmt"
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
	// source's cutoff and that nothing still needs (see "Why an event past its cutoff is kept"); then it
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

// defaultPruneBatch is the batch size of a zero RetentionPruneParams.BatchSize.
const defaultPruneBatch = 200

// Batch returns the batch size with its default.
func (p *RetentionPruneParams) Batch() int {
	if p.BatchSize <= 0 {
		return defaultPruneBatch
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

// Why an event past its cutoff is kept, for both drivers. An event is
// deleted only when none holds:
//   - its disposition is accepted (not processed yet) or dead_lettered
//     (waiting for a person), or it is not routed yet;
//   - it has work that is pending (a replay included) or dead-lettered;
//   - it is the source event of an effect still in the ledger (effects
//     reference their source event): an effect goes first, when
//     the effect rules below allow, and its event may go in a later batch;
//   - it is the event an entity's projection was last applied from.

// Why an effect is kept, for both drivers. An effect is deleted, leaving
// a tombstone, only when all hold:
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

// pruneTerminalDispositions are the dispositions an event may be deleted in.
func pruneTerminalDispositions() []Disposition {
	return []Disposition{DispositionApplied, DispositionDuplicate, DispositionStale, DispositionSuperseded,
		DispositionUnrouted, DispositionResolved}
}

// RetentionTx is the statements of the pruning pass. The scans hand back
// one window of rows after a cursor with, for each, whether the rules
// that the driver's SQL can answer keep it; the rules then judge each
// row's time against its source's cutoff.
type RetentionTx interface {
	// PruneLock takes, for the transaction, the lock that lets one
	// process at a time prune where several share the database, without
	// waiting: false when another process holds it.
	PruneLock(ctx context.Context) (bool, error)
	// PruneEffectScan reads up to Limit effects with an id above After,
	// in id order, each with its source event's source, flow and entity,
	// At its created_at (which grows with the id), CutAt its updated_at,
	// and Deletable: updated before Latest, its state one of States, and
	// not the original of a compensation whose own state is not one of
	// States.
	PruneEffectScan(ctx context.Context, p *PruneScanParams) ([]PruneRow, error)
	// PruneEffectsHold returns the ids of the candidates that may be
	// deleted now. Where the database has row locks, a concurrent flow
	// apply could otherwise insert a candidate's episode key again
	// between its check and the delete: it locks, without waiting, the
	// entity row every apply locks for its whole transaction (except for
	// the flow NoEntityFlow, whose effects have no entity row and no
	// apply that inserts them) and the effect rows, leaves out what
	// another transaction holds, and asks again, on the rows locked,
	// whether each is still deletable (its state one of States, updated
	// before its Cut, no compensation of it outside States). Without row
	// locks (one writer) it returns every id.
	PruneEffectsHold(ctx context.Context, p *PruneHoldParams) ([]int64, error)
	// PruneEffects deletes effects ids with their attempts rows, first
	// writing a tombstone of each (deleted at now) unless its key has
	// one, and returns the attempts rows and effects deleted.
	PruneEffects(ctx context.Context, ids []int64, now time.Time) (attempts, effects int64, err error)
	// PruneEventScan reads up to Limit events with a pk above After, in pk
	// order, each with its source, At and CutAt its received_at, and
	// Deletable: received before Latest, routed, its disposition one of
	// Dispositions, no work item pending or dead-lettered, no effect of
	// which it is the source event, and no entity whose projection it was
	// last applied from (see "Why an event past its cutoff is kept").
	PruneEventScan(ctx context.Context, p *PruneScanParams) ([]PruneRow, error)
	// PruneEvents deletes events pks with their deliveries, settled work
	// rows and loop visits, and returns what it deleted.
	PruneEvents(ctx context.Context, pks []int64) (*PrunedEvents, error)
	// PruneAuditScan reads up to Limit audit rows with an id above After,
	// in id order, each with its source, At and CutAt its time, and
	// Deletable: written before Latest, and not about an event (its source
	// and event id; an audit row without an event id is about none) that
	// is not routed, whose disposition is not one of Dispositions, that
	// has a work item pending or dead-lettered, or that is the source
	// event of an effect whose state is not one of States.
	PruneAuditScan(ctx context.Context, p *PruneScanParams) ([]PruneRow, error)
	// PruneAudit deletes audit rows ids and returns how many.
	PruneAudit(ctx context.Context, ids []int64) (int64, error)
}

// PruneScanParams is one window of a pruning scan.
type PruneScanParams struct {
	// Latest is the latest cutoff (RetentionPruneParams.LatestCutoff).
	Latest time.Time
	After  int64
	Limit  int
	// States and Dispositions are PruneEffectStates and
	// PruneTerminalDispositions.
	States       []EffectState
	Dispositions []Disposition
}

// PruneRow is one row a pruning scan read.
type PruneRow struct {
	ID     int64
	Source string
	// At is the time its window is judged by, CutAt the time its cutoff
	// is judged by.
	At, CutAt time.Time
	Deletable bool
	// Flow and Entity are an effect's.
	Flow, Entity string
}

// PruneCandidate is an effect the scan found deletable.
type PruneCandidate struct {
	ID           int64
	Flow, Entity string
	Cut          time.Time
}

// PruneHoldParams asks which candidates may go.
type PruneHoldParams struct {
	Candidates   []PruneCandidate
	States       []EffectState
	NoEntityFlow string
}

// PrunedEvents is what PruneEvents deleted.
type PrunedEvents struct {
	Deliveries, Work, LoopVisits, Events int64
}

// RetentionPrune runs one batch of the pruning pass (see Retention): the
// effects, the events and the audit rows each in a transaction of its
// own (TxWrite), each under the pruning lock. A batch that finds the
// lock taken reports Busy: another process is pruning, and two passes
// would only contend for the same rows.
func (r *Rules) RetentionPrune(ctx context.Context, p *RetentionPruneParams) (*RetentionPruneResult, error) {
	res := &RetentionPruneResult{NextEffectID: p.AfterEffectID, NextEventPK: p.AfterEventPK, NextAuditID: p.AfterAuditID}
	latest := p.LatestCutoff()
	if latest.IsZero() {
		res.EffectsDone, res.EventsDone, res.AuditDone = true, true, true
		return res, nil
	}
	scan := func(after int64) *PruneScanParams {
		return &PruneScanParams{Latest: latest, After: after, Limit: p.Batch(),
			States: PruneEffectStates(), Dispositions: pruneTerminalDispositions()}
	}
	// Effects first: an event whose last effect goes in this batch can go
	// in the events transaction right after it, when the event scan has
	// not passed it yet.
	for _, b := range []struct {
		what string
		run  func(ctx context.Context, tx Tx) error
	}{
		{"prune effects", func(ctx context.Context, tx Tx) error { return pruneEffects(ctx, tx, p, scan(p.AfterEffectID), res) }},
		{"prune events", func(ctx context.Context, tx Tx) error { return pruneEvents(ctx, tx, p, scan(p.AfterEventPK), res) }},
		{"prune audit", func(ctx context.Context, tx Tx) error { return pruneAudit(ctx, tx, p, scan(p.AfterAuditID), res) }},
	} {
		err := r.db.InTx(ctx, TxWrite, func(ctx context.Context, tx Tx) error {
			if ok, err := tx.PruneLock(ctx); err != nil || !ok {
				res.Busy = !ok
				return err
			}
			return b.run(ctx, tx)
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", b.what, err)
		}
		if res.Busy {
			return res, nil
		}
	}
	return res, nil
}

// pruneWindow picks, of one window of rows, those past their source's
// cutoff that nothing needs, and says where the scan goes on. The window
// is done when it came back short or held no row older than the latest
// cutoff: keys grow with time, so what follows is inside every
// retention.
func pruneWindow(rows []PruneRow, p *RetentionPruneParams, s *PruneScanParams) (picked []PruneCandidate, next int64, done bool) {
	next, old := s.After, false
	for _, row := range rows {
		next = row.ID
		if !row.At.Before(s.Latest) {
			continue
		}
		old = true
		if cut := p.CutoffOf(row.Source); row.Deletable && !cut.IsZero() && row.CutAt.Before(cut) {
			picked = append(picked, PruneCandidate{ID: row.ID, Flow: row.Flow, Entity: row.Entity, Cut: cut})
		}
	}
	return picked, next, len(rows) < s.Limit || !old
}

func candidateIDs(cs []PruneCandidate) []int64 {
	ids := make([]int64, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids
}

func pruneEffects(ctx context.Context, tx Tx, p *RetentionPruneParams, s *PruneScanParams, res *RetentionPruneResult) error {
	rows, err := tx.PruneEffectScan(ctx, s)
	if err != nil {
		return fmt.Errorf("scan effects: %w", err)
	}
	cands, next, done := pruneWindow(rows, p, s)
	res.NextEffectID, res.EffectsDone = next, done
	if len(cands) == 0 {
		return nil
	}
	ids, err := tx.PruneEffectsHold(ctx, &PruneHoldParams{Candidates: cands, States: s.States, NoEntityFlow: PublishFlow})
	if err != nil || len(ids) == 0 {
		return err
	}
	res.Attempts, res.Effects, err = tx.PruneEffects(ctx, ids, p.Now)
	return err
}

func pruneEvents(ctx context.Context, tx Tx, p *RetentionPruneParams, s *PruneScanParams, res *RetentionPruneResult) error {
	rows, err := tx.PruneEventScan(ctx, s)
	if err != nil {
		return fmt.Errorf("scan events: %w", err)
	}
	cands, next, done := pruneWindow(rows, p, s)
	res.NextEventPK, res.EventsDone = next, done
	if len(cands) == 0 {
		return nil
	}
	n, err := tx.PruneEvents(ctx, candidateIDs(cands))
	if err != nil {
		return err
	}
	res.Deliveries, res.Work, res.LoopVisits, res.Events = n.Deliveries, n.Work, n.LoopVisits, n.Events
	return nil
}

func pruneAudit(ctx context.Context, tx Tx, p *RetentionPruneParams, s *PruneScanParams, res *RetentionPruneResult) error {
	rows, err := tx.PruneAuditScan(ctx, s)
	if err != nil {
		return fmt.Errorf("scan audit: %w", err)
	}
	cands, next, done := pruneWindow(rows, p, s)
	res.NextAuditID, res.AuditDone = next, done
	if len(cands) == 0 {
		return nil
	}
	res.Audit, err = tx.PruneAudit(ctx, candidateIDs(cands))
	return err
}
