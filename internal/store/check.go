package store

import (
	"context"
	"fmt"
	"time"
)

// hookledger check: the list of invariants is here, once, with what each
// violation says; each driver runs one statement per query (CheckTx), and
// every row it hands back is one violation.

// CheckTx is the statements of InvariantCheck. Each hands visit every row
// of its query, in the order given; an error from visit ends it.
type CheckTx interface {
	// CheckEventsStuck: accepted events that are routed (not waiting for
	// the router in any way the driver queues them) and have no pending
	// work item, in pk order.
	CheckEventsStuck(ctx context.Context, visit func(*StuckEvent) error) error
	// CheckKeysShared: the episode keys more than one effect holds, in the
	// order of their smallest effect id, with the ids in order.
	CheckKeysShared(ctx context.Context, visit func(*SharedKey) error) error
	// CheckKeysTombstoned: effects whose episode key a tombstone holds,
	// in id order.
	CheckKeysTombstoned(ctx context.Context, visit func(*TombstonedKey) error) error
	// CheckDoneUnproven: done effects, in id order, with no attempts row
	// of class "" and no audit row of their settle to done decided by a
	// reconciliation: action p.Action, of the effect's entity and source
	// event, whose detail starts with "<episode key>: " and holds p.Mark.
	CheckDoneUnproven(ctx context.Context, p *DoneEvidenceParams, visit func(*UnprovenDone) error) error
	// CheckProjections: every entity's projection, in (flow, entity)
	// order, that is either recorded (its applied event's work item of
	// the entity applied a version) but not matched (none such applied
	// the projection's version_sort), or, when its version_sort is not a
	// hash (64 lowercase hex digits), behind the newest version_sort any
	// work item of the entity applied.
	CheckProjections(ctx context.Context, visit func(*ProjectionCheck) error) error
	// CheckEffectsOrphaned: effects whose source event does not exist,
	// in id order.
	CheckEffectsOrphaned(ctx context.Context, visit func(*OrphanEffect) error) error
	// CheckEffectStates: effects whose state is none of states, in id
	// order.
	CheckEffectStates(ctx context.Context, states []EffectState, visit func(*StrayState) error) error
}

// DoneEvidenceParams says which audit rows prove a done effect that has
// no successful attempts row.
type DoneEvidenceParams struct {
	// Action is the audit action of a settle to done; Mark what its
	// detail holds when a reconciliation decided it: the settle's reason,
	// "reconciled: ...".
	Action, Mark string
}

// StuckEvent is an accepted, routed event without pending work.
type StuckEvent struct {
	Source, EventID string
	ReceivedAt      time.Time
	Work            int64 // its work items, none pending
}

// SharedKey is an episode key held by more than one effect.
type SharedKey struct {
	Key     string
	Effects int64
	IDs     string // "3, 7"
}

// TombstonedKey is an effect beside a tombstone of its episode key.
type TombstonedKey struct {
	Key      string
	EffectID int64
	PrunedAt time.Time
}

// UnprovenDone is a done effect without the evidence of its success.
type UnprovenDone struct {
	ID        int64
	Key       string
	UpdatedAt time.Time
	// Attempts is the effect's counter, Rows its attempts rows.
	Attempts, Rows int64
}

// ProjectionCheck is a projection that the work items that applied
// versions to its entity contradict.
type ProjectionCheck struct {
	Flow, Entity, Version, Sort string
	EventPK                     int64  // the applied event, 0 for none
	Top                         string // the newest sort applied, "" for none
	Recorded, Matched           bool
}

// OrphanEffect is an effect whose source event is gone.
type OrphanEffect struct {
	ID      int64
	Key     string
	EventPK int64
}

// StrayState is an effect in a state outside the closed set.
type StrayState struct {
	ID         int64
	Key, State string
}

// invariantQuery is one query of an invariant: it reports each violation
// it finds with its subject and detail.
type invariantQuery struct {
	name string
	run  func(ctx context.Context, tx Tx, report func(subject, detail string)) error
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// invariantQueries are the invariants' queries in the order they run
// (Invariants' order); an invariant may have more than one.
var invariantQueries = []invariantQuery{{
	// Visibly pending: not routed yet (the router will take it), or with
	// a work item still pending. Routing and settling the last work item
	// decide the disposition in the transaction that does them, so an
	// accepted event with neither is stuck for good.
	name: InvariantEventPending,
	run: func(ctx context.Context, tx Tx, report func(subject, detail string)) error {
		return tx.CheckEventsStuck(ctx, func(e *StuckEvent) error {
			report("event "+e.Source+"/"+e.EventID, fmt.Sprintf("accepted (received %s) and routed, but none of its %d work items is pending: no process will settle it",
				stamp(e.ReceivedAt), e.Work))
			return nil
		})
	},
}, {
	name: InvariantEpisodeKeyOnce,
	run: func(ctx context.Context, tx Tx, report func(subject, detail string)) error {
		return tx.CheckKeysShared(ctx, func(k *SharedKey) error {
			report("episode key "+k.Key, fmt.Sprintf("held by %d effects (ids %s): the effect can happen more than once", k.Effects, k.IDs))
			return nil
		})
	},
}, {
	// A pruned effect's tombstone holds its key; a live effect beside it
	// was made after the prune, which the ledger's insert forbids.
	name: InvariantEpisodeKeyOnce,
	run: func(ctx context.Context, tx Tx, report func(subject, detail string)) error {
		return tx.CheckKeysTombstoned(ctx, func(k *TombstonedKey) error {
			report("episode key "+k.Key, fmt.Sprintf("held by effect %d and by the tombstone of an effect pruned %s: the effect can happen more than once",
				k.EffectID, stamp(k.PrunedAt)))
			return nil
		})
	},
}, {
	// Evidence that a done effect was done: an attempts row of class ""
	// is a call the worker classified as success (a 2xx, or an answer a
	// classification rule calls success) or a lookup that got an answer
	// (reconcile); the worker settles done on nothing else. One
	// legitimate path leaves no such row: a lookup made in the claim of
	// the call whose unknown outcome it settles is not recorded as a row
	// of its own (the call's row, class unknown_outcome, is), and a
	// reconciliation decided from stored evidence records no attempt at
	// all. Their evidence is the settle's audit row, effect_done with the
	// reason "reconciled: ...".
	name: InvariantDoneEvidence,
	run: func(ctx context.Context, tx Tx, report func(subject, detail string)) error {
		evidence := &DoneEvidenceParams{Action: SettleAction(EffectDone), Mark: ": reconciled"}
		return tx.CheckDoneUnproven(ctx, evidence, func(f *UnprovenDone) error {
			report(fmt.Sprintf("effect %d", f.ID), fmt.Sprintf("%s: done since %s, but none of its %d attempts rows succeeded and no reconciliation settled it (attempts counted: %d)",
				f.Key, stamp(f.UpdatedAt), f.Rows, f.Attempts))
			return nil
		})
	},
}, {
	// A projection holds the version its applied event's work item
	// applied, and, when versions are ordered, no work item of the entity
	// applied a newer one. Hash versions (64 hex digits, from refetch with
	// version.hash) are compared for equality only: the newest of them is
	// the last applied, which the applied event names. Work items from
	// before migration 0007 record no version and are left out.
	name: InvariantProjectionVersion,
	run: func(ctx context.Context, tx Tx, report func(subject, detail string)) error {
		return tx.CheckProjections(ctx, func(pr *ProjectionCheck) error {
			subject := "entity " + pr.Flow + "/" + pr.Entity
			if pr.Recorded && !pr.Matched {
				report(subject, fmt.Sprintf("projection at version %q (sort %q), but the work item that applied its event (pk %d) applied sort %q",
					pr.Version, pr.Sort, pr.EventPK, pr.Top))
				return nil
			}
			report(subject, fmt.Sprintf("projection at version %q (sort %q), but a newer version was applied to it: applied sort %q",
				pr.Version, pr.Sort, pr.Top))
			return nil
		})
	},
}, {
	name: InvariantEffectEvent,
	run: func(ctx context.Context, tx Tx, report func(subject, detail string)) error {
		return tx.CheckEffectsOrphaned(ctx, func(f *OrphanEffect) error {
			report(fmt.Sprintf("effect %d", f.ID), fmt.Sprintf("%s: its source event (pk %d) does not exist", f.Key, f.EventPK))
			return nil
		})
	},
}, {
	name: InvariantEffectState,
	run: func(ctx context.Context, tx Tx, report func(subject, detail string)) error {
		return tx.CheckEffectStates(ctx, EffectStates(), func(f *StrayState) error {
			report(fmt.Sprintf("effect %d", f.ID), fmt.Sprintf("%s: state %q is not one of the effect states", f.Key, f.State))
			return nil
		})
	},
}}

// InvariantCheck audits the store's invariants on one snapshot
// (TxSnapshot), which takes no lock a writer waits for, so a check beside
// a busy server delays nothing (see Outcomes).
func (r *Rules) InvariantCheck(ctx context.Context, p *InvariantCheckParams) (*InvariantCheckResult, error) {
	limit := int64(ClampLimit(p.Limit))
	var res *InvariantCheckResult
	err := r.db.InTx(ctx, TxSnapshot, func(ctx context.Context, tx Tx) error {
		res = &InvariantCheckResult{Counts: map[string]int64{}}
		for _, q := range invariantQueries {
			var n int64
			err := q.run(ctx, tx, func(subject, detail string) {
				if n++; n <= limit {
					res.Findings = append(res.Findings, &Finding{Invariant: q.name, Subject: subject, Detail: detail})
				}
			})
			if err != nil {
				return fmt.Errorf("check %s: %w", q.name, err)
			}
			res.Counts[q.name] += n
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check invariants: %w", err)
	}
	return res, nil
}
