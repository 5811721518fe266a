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

// CheckEventResolve refuses params no database state could make valid.
func CheckEventResolve(p *EventResolveParams) error {
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

// EventResolveDetail is the audit detail of a resolve: the note, then
// which flows' dead letters it closed.
func EventResolveDetail(note string, work []ResolvedWork) string {
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

// SortResolvedWork puts the items in (flow, entity, order key) order: the
// audit detail reads the same on both drivers, and PostgreSQL locks the
// entity rows in one order whoever resolves.
func SortResolvedWork(ws []ResolvedWork) {
	slices.SortFunc(ws, func(a, b ResolvedWork) int {
		return cmp.Or(cmp.Compare(a.Flow, b.Flow), cmp.Compare(a.Entity, b.Entity), cmp.Compare(a.OrderKey, b.OrderKey))
	})
}
