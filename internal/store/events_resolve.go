package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// EventResolver closes dead-lettered events by hand.
type EventResolver interface {
	// EventResolve closes a dead-lettered event that no replay can repair
	// (a version conflict, a payload the sender will never correct): a
	// person decided, and says why in the required note. In one
	// transaction the event becomes resolved, every one of its work items
	// that is dead_lettered (of any pass) becomes resolved with its reason
	// and done time kept, each (flow, entity) of those items counts the
	// item's order key as settled (so a resolved newest event no longer
	// leaves its entity behind in revision_lag), and an audit row
	// event_resolved records the actor and the note. It returns the event
	// as EventList shows it, with its routes.
	//
	// Only a dead_lettered event with no pending work can be resolved:
	// any other disposition, or a replay of the event still in flight,
	// fails with ErrInvalidTransition. A missing event is ErrNotFound; a
	// missing note, source or event id ErrInvalidArgument.
	//
	// A later replay of a resolved event still runs: its work items settle
	// with their own dispositions (shown in the event's routes, and the
	// projection and effects follow the revision guard as for any replay),
	// but the event stays resolved, because the aggregate rule only moves
	// an event that is accepted or dead_lettered. The person's decision
	// stands in the record; the replay's outcome is beside it.
	EventResolve(ctx context.Context, p *EventResolveParams) (*Event, error)
}

// EventResolveParams closes one event.
type EventResolveParams struct {
	Source  string
	EventID string
	Actor   string // "operator:alice"
	Note    string // required: what was checked or decided
	Now     time.Time
}

// ActionEventResolved is the audit action of EventResolve.
const ActionEventResolved = "event_resolved"

// EventStateError is the ErrInvalidTransition of EventResolve: the event's
// disposition, and how many work items of a replay of it are pending, so
// that a caller serving people can say which.
type EventStateError struct {
	Disposition Disposition
	Pending     int64
}

func (e *EventStateError) Error() string {
	if e.Pending > 0 {
		return fmt.Sprintf("the event is %s with %d work items of a replay still pending: wait for the replay to settle",
			e.Disposition, e.Pending)
	}
	return fmt.Sprintf("the event is %s: only a %s event can be resolved", e.Disposition, DispositionDeadLettered)
}

// Unwrap makes errors.Is(err, ErrInvalidTransition) hold.
func (e *EventStateError) Unwrap() error { return ErrInvalidTransition }

// checkEventResolve refuses params no database state could make valid.
func checkEventResolve(p *EventResolveParams) error {
	switch {
	case p == nil:
		return fmt.Errorf("no params: %w", ErrInvalidArgument)
	case p.Source == "":
		return fmt.Errorf("source is required: %w", ErrInvalidArgument)
	case p.EventID == "":
		return fmt.Errorf("event id is required: %w", ErrInvalidArgument)
	case strings.TrimSpace(p.Note) == "":
		return fmt.Errorf("a note is required to resolve an event: %w", ErrInvalidArgument)
	}
	for _, f := range []struct{ name, v string }{{"source", p.Source}, {"event id", p.EventID}, {"note", p.Note}, {"actor", p.Actor}} {
		if err := CheckText(f.name, f.v); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
	}
	return nil
}

// ResolvedWork is one work item an event resolve closed: its entity's
// settled key advances to the item's order key.
type ResolvedWork struct {
	Flow, Entity, OrderKey string
}

// eventResolveDetail is the audit detail of a resolve: the note, then
// which flows' dead letters it closed.
func eventResolveDetail(note string, work []ResolvedWork) string {
	var b strings.Builder
	b.WriteString("dead_lettered -> resolved: ")
	b.WriteString(note)
	if len(work) > 0 {
		b.WriteString(" (closed:")
		for i, w := range work {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, " flow %s entity %s", w.Flow, w.Entity)
		}
		b.WriteString(")")
	}
	return b.String()
}

// sortResolvedWork puts the items in (flow, entity, order key) order: the
// audit detail reads the same on both drivers, and PostgreSQL locks the
// entity rows in one order whoever resolves.
func sortResolvedWork(ws []ResolvedWork) {
	slices.SortFunc(ws, func(a, b ResolvedWork) int {
		return cmp.Or(cmp.Compare(a.Flow, b.Flow), cmp.Compare(a.Entity, b.Entity), cmp.Compare(a.OrderKey, b.OrderKey))
	})
}

// ResolveTx is the statements of EventResolve.
type ResolveTx interface {
	// EventLock reads the event (source, eventID): its pk, envelope
	// entity and disposition, found false when there is none. Where the
	// database has row locks it locks the event as the settling of its
	// work items does (EventWork), so that a settle and a resolve take
	// turns.
	EventLock(ctx context.Context, source, eventID string) (ev *ResolveEvent, found bool, err error)
	// WorkPendingCount counts the event's work items that are pending.
	WorkPendingCount(ctx context.Context, eventPK int64) (int64, error)
	// WorkResolve moves the event's dead_lettered work items to resolved,
	// keeping their reason and done time, and returns them.
	WorkResolve(ctx context.Context, eventPK int64) ([]ResolvedWork, error)
	// EntitySettledKey raises the entity's settled key to key (an older
	// key leaves it as it is).
	EntitySettledKey(ctx context.Context, w ResolvedWork) error
}

// ResolveEvent is an event as EventResolve reads it.
type ResolveEvent struct {
	PK          int64
	Entity      string
	Disposition Disposition
}

// EventResolve closes a dead-lettered event by hand (see EventResolver),
// in a transaction of its own (TxOperate): it is rare, and must not share
// the fate of a batch of pipeline writes.
func (r *Rules) EventResolve(ctx context.Context, p *EventResolveParams) (*Event, error) {
	if err := checkEventResolve(p); err != nil {
		return nil, fmt.Errorf("resolve event: %w", err)
	}
	what := fmt.Sprintf("resolve event %s/%s", p.Source, p.EventID)
	var pk int64
	err := r.db.InTx(ctx, TxOperate, func(ctx context.Context, tx Tx) error {
		var err error
		pk, err = resolveEvent(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	// Read back through EventList so the caller sees the event exactly as
	// the list shows it, routes included.
	res, err := r.db.EventList(ctx, &EventListParams{AfterPK: pk - 1, Limit: 1, WithRoutes: true})
	if err != nil {
		return nil, fmt.Errorf("%s: resolved, but reading it back failed: %w", what, err)
	}
	if len(res.Events) != 1 || res.Events[0].PK != pk {
		return nil, fmt.Errorf("%s: resolved, but reading it back found nothing: %w", what, ErrNotFound)
	}
	return res.Events[0], nil
}

func resolveEvent(ctx context.Context, tx Tx, p *EventResolveParams) (int64, error) {
	ev, found, err := tx.EventLock(ctx, p.Source, p.EventID)
	if err != nil {
		return 0, fmt.Errorf("read event: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("event: %w", ErrNotFound)
	}
	if ev.Disposition != DispositionDeadLettered {
		return 0, &EventStateError{Disposition: ev.Disposition}
	}
	// A replay of the event still in flight may yet repair it: closing it
	// by hand now would race the worker, so the operator waits for it.
	pending, err := tx.WorkPendingCount(ctx, ev.PK)
	if err != nil {
		return 0, fmt.Errorf("count pending work: %w", err)
	}
	if pending > 0 {
		return 0, &EventStateError{Disposition: ev.Disposition, Pending: pending}
	}
	// Reason and done_at stay: why the item failed is the evidence the
	// note answers.
	closed, err := tx.WorkResolve(ctx, ev.PK)
	if err != nil {
		return 0, fmt.Errorf("resolve work: %w", err)
	}
	// Sorted, so that concurrent resolves lock entity rows in one order.
	sortResolvedWork(closed)
	// A resolved item is settled for revision_lag, as FlowApply counts an
	// applied one: the entity is no longer behind because of it.
	for _, w := range closed {
		if err := tx.EntitySettledKey(ctx, w); err != nil {
			return 0, fmt.Errorf("settle %s/%s: %w", w.Flow, w.Entity, err)
		}
	}
	if err := tx.SetDisposition(ctx, ev.PK, DispositionResolved); err != nil {
		return 0, fmt.Errorf("set disposition: %w", err)
	}
	if err := tx.Audit(ctx, &AuditInsertParams{At: p.Now, Actor: p.Actor, Action: ActionEventResolved,
		Source: p.Source, EventID: p.EventID, Entity: ev.Entity, Detail: eventResolveDetail(p.Note, closed)}); err != nil {
		return 0, err
	}
	return ev.PK, nil
}
