package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/store"
)

// The exception queue's dead-lettered events and the event page's repair:
// an event waits for a person as a dead effect does, so the queue lists
// it beside the effects, and its page offers what repairs it: a replay
// (planned on the replay page first) once the flow's configuration is
// corrected, or a resolve with a note when nothing will.

// eventResolver is what resolving an event needs; store.Store has it.
type eventResolver interface {
	EventResolve(ctx context.Context, p *store.EventResolveParams) (*store.Event, error)
}

// exceptionRow is one dead-lettered event of the queue.
type exceptionRow struct {
	*store.Exception
	Link  string
	Flows []string
	Age   time.Duration
}

// queueEvents reads the first page of the queue's dead-lettered events,
// and the events list of all of them when there are more.
func (c *Console) queueEvents(ctx context.Context, d *listData) error {
	st, ok := c.st.(store.ExceptionReader)
	if !ok {
		return nil
	}
	res, err := store.ExceptionList(ctx, st, &store.ExceptionListParams{Kind: store.ExceptionEvent,
		Owners: c.extra.Owners, Limit: pageSize})
	if err != nil {
		return err
	}
	now := c.clk.Now()
	for _, x := range res.Exceptions {
		row := exceptionRow{Exception: x, Link: eventLink(x.Event.Source, x.Event.EventID), Age: age(now, x.Since)}
		row.Flows = api.NewExceptionJSON(x, now).Flows
		d.DeadEvents = append(d.DeadEvents, row)
	}
	if res.NextKind != "" {
		d.MoreEvents = "/events?" + url.Values{"disposition": {string(store.DispositionDeadLettered)}}.Encode()
	}
	return nil
}

// eventRepair fills the event page's repair: the owner, and the actions
// a dead-lettered event offers.
func (c *Console) eventRepair(d *eventData) {
	ev := d.Event.Event
	if ev.Disposition != store.DispositionDeadLettered {
		return
	}
	d.Owner = c.extra.Owners.Event(ev)
	_, d.CanResolve = c.st.(eventResolver)
	if _, ok := c.st.(replayStore); ok && c.extra.Router != nil {
		d.ReplayPlan = "/replay?" + url.Values{"source": {ev.Source}, "event_id": {ev.EventID}, "plan": {"1"}}.Encode()
	}
}

// eventDone are the flashes of the event page's actions.
var eventDone = map[string]string{
	"resolve": "Resolved, with your note in the audit trail.",
}

// resolveEvent serves POST /event/resolve (source, event_id, note), the
// CSRF token already checked: done, it redirects to the event page;
// refused, it shows the page again with the reason and the note typed.
func (c *Console) resolveEvent(w http.ResponseWriter, r *http.Request) {
	rs, ok := c.st.(eventResolver)
	if !ok {
		c.fail(w, r, http.StatusNotFound, "This console cannot resolve events.")
		return
	}
	source, eventID := r.PostFormValue("source"), r.PostFormValue("event_id")
	note := strings.TrimSpace(r.PostFormValue("note"))
	if source == "" || eventID == "" {
		c.fail(w, r, http.StatusBadRequest, "An event is named by source and event_id.")
		return
	}
	d, ok := c.loadEvent(w, r, source, eventID, 0)
	if !ok {
		return
	}
	d.Note = note
	refuse := func(code int, msg string) {
		c.render(w, r, code, "event", &view{Title: "Event " + eventID, Nav: "events", Error: msg, Data: d})
	}
	if note == "" {
		refuse(http.StatusBadRequest, "Resolve needs a note: say why no replay will repair this event.")
		return
	}
	_, err := rs.EventResolve(r.Context(), &store.EventResolveParams{Source: source, EventID: eventID, Actor: actor,
		Note: note, Now: c.clk.Now()})
	var se *store.EventStateError
	switch {
	case errors.As(err, &se):
		refuse(http.StatusConflict, "Cannot resolve: "+se.Error()+" (it may have changed since the page was loaded).")
		return
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, "No event "+eventID+" from source "+source+".")
		return
	case errors.Is(err, store.ErrInvalidArgument):
		refuse(http.StatusBadRequest, "The store refused this resolve: check the note.")
		return
	case err != nil:
		c.storeFailed(w, r, "resolve event", err)
		return
	}
	c.log.Info("console: operator action", "event", source+"/"+eventID, "action", "resolve", "actor", actor)
	http.Redirect(w, r, eventLink(source, eventID)+"&done=resolve", http.StatusSeeOther)
}

// queueOwner shows an effect of the queue with the owner who repairs it:
// the one assigned, else its destination's configured owner.
func (c *Console) queueOwner(es []*store.Effect) {
	for _, e := range es {
		if slices.Contains(store.ExceptionStates(), e.State) {
			e.Owner = c.extra.Owners.Effect(e)
		}
	}
}
