package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The exception queue: what waits for a person, dead effects and effects
// needing reconciliation (ExceptionStates) beside dead-lettered events,
// each with why, what to do and whose it is. It is read from EffectList
// and EventList, so both drivers answer it alike and a driver adds no
// statement for it.

// The kinds of exception.
const (
	ExceptionEffect = "effect"
	ExceptionEvent  = "event"
)

// ExceptionKinds returns the closed set of kinds, for validating a filter.
func ExceptionKinds() []string { return []string{ExceptionEffect, ExceptionEvent} }

// Owners are the configured owners: a destination's owner takes the dead
// effects that call it, a flow's the events it dead-letters, until someone
// assigns another (an effect's own owner).
type Owners struct {
	Destinations map[string]string
	Flows        map[string]string
}

// Effect is who owns the repair of e: the owner assigned to it, else its
// destination's configured owner.
func (o Owners) Effect(e *Effect) string {
	if e.Owner != "" {
		return e.Owner
	}
	return o.Destinations[e.Destination]
}

// Event is who owns the repair of a dead-lettered event: the configured
// owners of the flows that dead-lettered it, each once, in route order.
func (o Owners) Event(e *Event) string {
	var out []string
	for _, r := range e.Routes {
		// A flow that processed the event has nothing to repair.
		if w := o.Flows[r.Flow]; r.Disposition == DispositionDeadLettered && w != "" && !slices.Contains(out, w) {
			out = append(out, w)
		}
	}
	return strings.Join(out, ", ")
}

// Exception is one entry of the exception queue: an effect or an event.
type Exception struct {
	Kind   string
	Effect *Effect // kind effect
	Event  *Event  // kind event, with its routes
	// Reason says why it waits, Repair what a person may do about it,
	// Owner whose it is ("" when nobody's).
	Reason, Repair, Owner string
	// Since is when it began to wait: an effect's last change, an event's
	// first receipt (as the dead_letters signal ages them).
	Since time.Time
}

// ExceptionListParams pages the exception queue: every effect of the
// queue in id order, then every dead-lettered event in pk order.
type ExceptionListParams struct {
	// Kind lists one kind only ("" both).
	Kind   string
	Owners Owners
	// AfterKind and AfterID are the cursor: the entry after which the page
	// starts ("" for the first page).
	AfterKind string
	AfterID   int64
	Limit     int
}

// ExceptionListResult is one page; NextKind and NextID are the cursor of
// the next page, NextKind empty at the end.
type ExceptionListResult struct {
	Exceptions []*Exception
	NextKind   string
	NextID     int64
}

// ExceptionReader is what ExceptionList reads; Store has it.
type ExceptionReader interface {
	EffectList(ctx context.Context, p *EffectListParams) ([]*Effect, error)
	EventList(ctx context.Context, p *EventListParams) (*EventListResult, error)
}

// ExceptionList reads one page of the exception queue.
func ExceptionList(ctx context.Context, st ExceptionReader, p *ExceptionListParams) (*ExceptionListResult, error) {
	if p.Kind != "" && !slices.Contains(ExceptionKinds(), p.Kind) {
		return nil, fmt.Errorf("exception kind %q: want effect or event: %w", p.Kind, ErrInvalidArgument)
	}
	limit := ClampLimit(p.Limit)
	res := &ExceptionListResult{}
	if (p.Kind == "" || p.Kind == ExceptionEffect) && p.AfterKind != ExceptionEvent {
		// One row more than asked tells whether a next page exists.
		es, err := st.EffectList(ctx, &EffectListParams{States: ExceptionStates(), AfterID: p.AfterID, Limit: limit + 1,
			WithoutRequest: true})
		if err != nil {
			return nil, fmt.Errorf("list exceptions: effects: %w", err)
		}
		for _, e := range es {
			res.Exceptions = append(res.Exceptions, effectException(e, p.Owners))
		}
		if len(res.Exceptions) > limit {
			res.Exceptions = res.Exceptions[:limit]
			res.NextKind, res.NextID = ExceptionEffect, es[limit-1].ID
			return res, nil
		}
	}
	if p.Kind != "" && p.Kind != ExceptionEvent {
		return res, nil
	}
	after := int64(0)
	if p.AfterKind == ExceptionEvent {
		after = p.AfterID
	}
	room := limit - len(res.Exceptions)
	if room == 0 {
		// The page is full of effects: the events start the next one.
		res.NextKind, res.NextID = ExceptionEvent, 0
		return res, nil
	}
	evs, err := st.EventList(ctx, &EventListParams{Disposition: DispositionDeadLettered, WithRoutes: true,
		AfterPK: after, Limit: room})
	if err != nil {
		return nil, fmt.Errorf("list exceptions: events: %w", err)
	}
	for _, e := range evs.Events {
		res.Exceptions = append(res.Exceptions, eventException(e, p.Owners))
	}
	if evs.NextAfterPK != 0 {
		res.NextKind, res.NextID = ExceptionEvent, evs.NextAfterPK
	}
	return res, nil
}

func effectException(e *Effect, o Owners) *Exception {
	return &Exception{Kind: ExceptionEffect, Effect: e, Reason: e.Reason, Repair: EffectRepair(e),
		Owner: o.Effect(e), Since: e.UpdatedAt}
}

func eventException(e *Event, o Owners) *Exception {
	x := &Exception{Kind: ExceptionEvent, Event: e, Owner: o.Event(e), Since: e.ReceivedAt}
	var reasons, repairs []string
	for _, r := range e.Routes {
		if r.Disposition != DispositionDeadLettered {
			continue
		}
		reasons = append(reasons, "flow "+r.Flow+": "+r.Reason)
		if rp := DeadLetterRepair(r.Reason); !slices.Contains(repairs, rp) {
			repairs = append(repairs, rp)
		}
	}
	x.Reason, x.Repair = strings.Join(reasons, "; "), strings.Join(repairs, " ")
	return x
}

// EffectRepair is the suggested repair of an effect waiting for a person:
// the worker's own when it left one, else its error class's.
func EffectRepair(e *Effect) string {
	if e.SuggestedRepair != "" || !slices.Contains(ExceptionStates(), e.State) {
		return e.SuggestedRepair
	}
	return classRepair[e.ErrorClass]
}

// classRepair is the suggestion for a class when the worker left none.
var classRepair = map[ErrorClass]string{
	ClassPermanent:     "The destination refused the request as it is: correct the data or the destination's configuration, then retry; or resolve with a note saying how it was handled.",
	ClassUnknown:       "The outcome of a call is unknown: check at the destination whether it happened. If it did, resolve with the destination's reference in the note; if not, retry.",
	ClassHiddenFailure: "The destination answered success but its body reported a failure: check the destination, then retry or resolve.",
	ClassQuota:         "The destination is rate limiting: retry once its quota allows.",
	ClassTransient:     "The destination failed for a while: retry once it is healthy.",
	ClassContention:    "The destination reported a conflicting write: retry, which reads its state again.",
}

// deadLetterRepairs suggest a repair by the first word of a dead letter's
// reason, which names the stage that failed (the flow engine and the
// revision guard write them).
var deadLetterRepairs = []struct{ prefix, repair string }{
	{"version_conflict:", "Two different states came with the same version: check which one the sender holds now. A replay meets the same conflict; resolve the event with a note saying which state is right."},
	{"loop_hop_limit:", "The event came back through a feedback loop too many times: break the loop (a when: that skips the flow's own writes), then resolve the event with a note."},
	{"payload:", "The body is not JSON the flow can read: ask the sender to correct it and send again, or resolve the event with a note."},
	{"when:", "The flow's when: expression failed on this event: correct it in the configuration, restart, then replay the event."},
	{"entity:", "The flow's entity: expression gave no id for this event: correct it in the configuration, restart, then replay the event; or resolve it with a note if the event has no entity."},
	{"order key", "The event's order key is not storable text: correct the flow's version: settings, restart, then replay the event."},
	{"version", "The event's version could not be read as the flow's version: settings say: correct them, restart, then replay the event; or resolve it with a note if the event carries no version."},
	{"refetch:", "Fetching the entity's current state failed: check the source's API and credentials, then replay the event."},
	{"processing:", "The store refused a value of this event: correct the flow's state: or effects so they store valid text, restart, then replay the event; or resolve it with a note."},
}

// defaultDeadLetterRepair is the suggestion for any other reason.
const defaultDeadLetterRepair = "Read the reason: when the flow's configuration was at fault, correct it, restart, then replay the event; when nothing will repair it, resolve it with a note."

// DeadLetterRepair is the suggested repair of a route dead-lettered for
// reason.
func DeadLetterRepair(reason string) string {
	for _, r := range deadLetterRepairs {
		if strings.HasPrefix(reason, r.prefix) {
			return r.repair
		}
	}
	return defaultDeadLetterRepair
}
