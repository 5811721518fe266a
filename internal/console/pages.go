package console

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/bodyview"
	"github.com/hookledger/hookledger/internal/store"
)

// pageSize is the console's default page: a screen or two of rows. A URL
// may ask for another with limit, as the API takes it.
const pageSize = 50

// pollEvery is how often a list refreshes its rows in place.
const pollEvery = "every 5s"

// timeParams are the list parameters that are times: a form's
// datetime-local field sends them without a zone, read as UTC.
var timeParams = []string{"received_from", "received_to", "occurred_from", "occurred_to",
	"created_from", "created_to", "updated_from", "updated_to"}

const localTime = "2006-01-02T15:04"

// cleanQuery drops empty parameters (a form sends every field) and turns a
// datetime-local value into RFC 3339 UTC, so that the API's parsers read
// the console's query and the URL stays short enough to paste.
func cleanQuery(in url.Values) url.Values {
	out := url.Values{}
	for k, vs := range in {
		for _, v := range vs {
			v = strings.TrimSpace(v)
			if v == "" {
				continue
			}
			if slices.Contains(timeParams, k) {
				v = rfc3339(v)
			}
			out.Add(k, v)
		}
	}
	return out
}

// rfc3339 converts a datetime-local value (with or without seconds) to RFC
// 3339 UTC and leaves anything else for the parser to judge.
func rfc3339(v string) string {
	for _, layout := range []string{localTime, localTime + ":05"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t.UTC().Format(time.RFC3339)
		}
	}
	return v
}

// formTime is a query time as a datetime-local field shows it.
func formTime(v string) string {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return v
	}
	return t.UTC().Format(localTime + ":05")
}

// filterForm is a list's filters as its form shows them.
type filterForm map[string]string

func newFilterForm(v url.Values) filterForm {
	f := filterForm{}
	for k := range v {
		f[k] = v.Get(k)
		if slices.Contains(timeParams, k) {
			f[k] = formTime(f[k])
		}
	}
	return f
}

// paramMessage words a filter mistake for the page.
func paramMessage(err error) string {
	var pe *api.ParamError
	if errors.As(err, &pe) {
		return "Filter " + pe.Param + ": " + pe.Msg
	}
	return err.Error()
}

// eventRow is one event in a list.
type eventRow struct {
	*store.Event
	// Entity is the envelope's entity, or the one every flow agreed on.
	Entity string
	Link   string
}

func newEventRow(e *store.Event) eventRow {
	return eventRow{Event: e, Entity: api.NewEventJSON(e).Entity, Link: eventLink(e.Source, e.EventID)}
}

func eventLink(source, eventID string) string {
	return "/event?" + url.Values{"source": {source}, "event_id": {eventID}}.Encode()
}

func entityLink(flow, entity string) string {
	return "/entity?" + url.Values{"flow": {flow}, "entity": {entity}}.Encode()
}

// listData is a list page's rows and links.
type listData struct {
	Filter filterForm
	// RowsURL is the rows fragment of the page's own query (filters and
	// cursor): the rows refresh from it, so a refresh never loses the
	// operator's filters. Live is false when the query is refused.
	RowsURL string
	Live    bool
	// First is the first page with the same filters; Next is the next
	// page, empty at the end.
	First, Next string
	Paged       bool
	Poll        string
	Events      []eventRow
	Effects     []*store.Effect
	// Now is when the effects were read, for each one's age.
	Now time.Time
	// DeadEvents are the exception queue's dead-lettered events (its
	// first page); MoreEvents lists all of them when there are more.
	DeadEvents []exceptionRow
	MoreEvents string
	// States and the other sets fill the filters' choices.
	Dispositions []store.Disposition
	States       []string
	Classes      []store.ErrorClass
}

// listEvents reads the events page's query and its page of rows.
func (c *Console) listEvents(r *http.Request) (*listData, int, string, error) {
	v := cleanQuery(r.URL.Query())
	d := &listData{Filter: newFilterForm(v), Dispositions: store.Dispositions(), Poll: pollEvery}
	p, err := api.EventFilter(v)
	if err != nil {
		return d, http.StatusBadRequest, paramMessage(err), nil
	}
	if !v.Has("limit") {
		p.Limit = pageSize
	}
	res, err := c.st.EventList(r.Context(), p)
	if err != nil {
		return d, 0, "", err
	}
	for _, e := range res.Events {
		d.Events = append(d.Events, newEventRow(e))
	}
	d.RowsURL, d.Live = "/events/rows?"+v.Encode(), true
	first := cloneWithout(v, "cursor")
	d.First, d.Paged = "/events?"+first.Encode(), v.Has("cursor")
	if res.NextAfterPK != 0 {
		first.Set("cursor", api.EncodeCursor(res.NextAfterPK))
		d.Next = "/events?" + first.Encode()
	}
	return d, http.StatusOK, "", nil
}

func cloneWithout(v url.Values, drop string) url.Values {
	out := url.Values{}
	for k, vs := range v {
		if k != drop {
			out[k] = slices.Clone(vs)
		}
	}
	return out
}

// eventsPage serves GET /events: the filtered event list.
func (c *Console) eventsPage(w http.ResponseWriter, r *http.Request) {
	d, code, msg, err := c.listEvents(r)
	if err != nil {
		c.storeFailed(w, r, "list events", err)
		return
	}
	c.render(w, r, code, "events", &view{Title: "Events", Nav: "events", Error: msg, Data: d})
}

// eventRows serves GET /events/rows: the rows alone, for the live refresh.
func (c *Console) eventRows(w http.ResponseWriter, r *http.Request) {
	d, code, _, err := c.listEvents(r)
	if err != nil {
		c.log.Error("console: store failed", "op", "list events", "err", err)
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	c.fragment(w, code, "event-rows", d)
}

// eventData is the event page.
type eventData struct {
	Event  eventRow
	Routes []routeView
	// Deliveries are deliveriesPerPage at most, from the deliveries
	// cursor on; DeliveriesNext is the page of the next ones, empty at
	// the end, and DeliveriesFirst the first page, when this is not it.
	Deliveries                      []deliveryView
	DeliveriesNext, DeliveriesFirst string
	Effects                         []*store.Effect
	Audit                           []*store.AuditEntry
	// A dead-lettered event's repair (exceptions.go): who owns it, the
	// resolve form (with the note typed when it was refused) and the
	// replay page planning a replay of it.
	Owner      string
	CanResolve bool
	Note       string
	ReplayPlan string
}

type routeView struct {
	store.EventRoute
	Link string
	// Repair is a dead letter's suggested repair.
	Repair string
}

// eventPage serves GET /event?source=S&event_id=E: one event with all its
// evidence.
func (c *Console) eventPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	source, eventID := q.Get("source"), q.Get("event_id")
	if source == "" || eventID == "" {
		c.fail(w, r, http.StatusBadRequest, "An event is named by source and event_id.")
		return
	}
	var after int64
	if cur := q.Get("deliveries_cursor"); cur != "" {
		var err error
		if after, err = api.DecodeCursor(cur); err != nil {
			c.fail(w, r, http.StatusBadRequest, "Filter deliveries_cursor: not a cursor from this console.")
			return
		}
	}
	d, ok := c.loadEvent(w, r, source, eventID, after)
	if !ok {
		return
	}
	c.render(w, r, http.StatusOK, "event", &view{Title: "Event " + eventID, Nav: "events", Flash: eventDone[q.Get("done")], Data: d})
}

// loadEvent reads the event page's data, or answers the request itself
// (false) when the event cannot be shown.
func (c *Console) loadEvent(w http.ResponseWriter, r *http.Request, source, eventID string, after int64) (*eventData, bool) {
	if !c.textParams(w, r, "source", source, "event_id", eventID) {
		return nil, false
	}
	ctx := r.Context()
	res, err := c.st.EventList(ctx, &store.EventListParams{Source: source, EventID: eventID, WithRoutes: true, Limit: 1})
	if err != nil {
		c.storeFailed(w, r, "get event", err)
		return nil, false
	}
	if len(res.Events) == 0 {
		c.fail(w, r, http.StatusNotFound, "No event "+eventID+" from source "+source+".")
		return nil, false
	}
	ev := res.Events[0]
	d := &eventData{Event: newEventRow(ev)}
	for _, rt := range ev.Routes {
		rv := routeView{EventRoute: rt, Repair: api.RouteRepair(rt)}
		if rt.Entity != "" {
			rv.Link = entityLink(rt.Flow, rt.Entity)
		}
		d.Routes = append(d.Routes, rv)
	}
	if err := c.eventDeliveries(ctx, d, after); err != nil {
		c.storeFailed(w, r, "list deliveries", err)
		return nil, false
	}
	if d.Audit, err = c.st.AuditList(ctx, &store.AuditListParams{Source: source, EventID: eventID, Limit: 1000}); err != nil {
		c.storeFailed(w, r, "list audit", err)
		return nil, false
	}
	// The ledger is indexed by flow and entity, not by source event: the
	// effects an event caused are among its routes' entities' effects.
	for _, rt := range ev.Routes {
		if rt.Entity == "" {
			continue
		}
		es, err := c.st.EffectList(ctx, &store.EffectListParams{Flow: rt.Flow, Entity: rt.Entity, Limit: 1000, WithoutRequest: true})
		if err != nil {
			c.storeFailed(w, r, "list effects", err)
			return nil, false
		}
		for _, e := range es {
			if e.Source == source && e.SourceEventID == eventID {
				d.Effects = append(d.Effects, e)
			}
		}
	}
	c.eventRepair(d)
	return d, true
}

// eventDeliveries reads the event page's deliveries: deliveriesPerPage
// of them after delivery id after, each body read only as far as a page
// shows it.
func (c *Console) eventDeliveries(ctx context.Context, d *eventData, after int64) error {
	ds, err := c.st.DeliveryList(ctx, &store.DeliveryListParams{Source: d.Event.Source, EventID: d.Event.EventID,
		AfterID: after, Limit: deliveriesPerPage + 1, BodyPrefix: bodyview.RawMaxBytes})
	if err != nil {
		return err
	}
	page := eventLink(d.Event.Source, d.Event.EventID)
	if after != 0 {
		d.DeliveriesFirst = page + "#deliveries"
	}
	if len(ds) > deliveriesPerPage {
		ds = ds[:deliveriesPerPage]
		d.DeliveriesNext = page + "&" + url.Values{"deliveries_cursor": {api.EncodeCursor(ds[len(ds)-1].ID)}}.Encode() + "#deliveries"
	}
	for _, dl := range ds {
		d.Deliveries = append(d.Deliveries, newDeliveryView(dl))
	}
	return nil
}

// entityData is the entity page.
type entityData struct {
	Flow, Entity string
	Projection   *store.Projection
	// State is the projection's state as shown, when there is one.
	State   shownBody
	Events  []entityEvent
	Effects []*store.Effect
	Audit   []*store.AuditEntry
	// Truncated says the entity has more events than one page shows.
	Truncated bool
}

// entityPage serves GET /entity?flow=F&entity=E: the projection, its
// events in business order and its effects.
func (c *Console) entityPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	flow, entity := q.Get("flow"), q.Get("entity")
	if flow == "" || entity == "" {
		c.fail(w, r, http.StatusBadRequest, "An entity is named by flow and entity.")
		return
	}
	if !c.textParams(w, r, "flow", flow, "entity", entity) {
		return
	}
	ctx := r.Context()
	d := &entityData{Flow: flow, Entity: entity}
	var err error
	if d.Projection, err = c.st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: flow, Entity: entity}); err != nil {
		c.storeFailed(w, r, "get projection", err)
		return
	}
	if d.Projection != nil {
		d.State = shownBody{View: bodyview.Render(d.Projection.State), Label: "Current state", Raw: stateLink(flow, entity)}
	}
	const most = 1000
	if d.Events, d.Truncated, err = c.entityHistory(ctx, d.Projection, flow, entity, most); err != nil {
		c.storeFailed(w, r, "read entity history", err)
		return
	}
	if d.Effects, err = c.st.EffectList(ctx, &store.EffectListParams{Flow: flow, Entity: entity, Limit: most,
		WithoutRequest: true}); err != nil {
		c.storeFailed(w, r, "list effects", err)
		return
	}
	if d.Audit, err = c.st.AuditList(ctx, &store.AuditListParams{Entity: entity, Limit: most}); err != nil {
		c.storeFailed(w, r, "list audit", err)
		return
	}
	c.render(w, r, http.StatusOK, "entity", &view{Title: "Entity " + entity, Nav: "events", Data: d})
}

// effectStateChoices are the state filter's choices: the exception queue
// first (the page's default), every state, then each state.
func effectStateChoices() []string {
	out := []string{api.StateExceptions, api.StateAny}
	for _, s := range store.EffectStates() {
		out = append(out, string(s))
	}
	return out
}

// listEffects reads the effects page's query and its page of rows. With
// no state it shows the exception queue.
func (c *Console) listEffects(r *http.Request) (*listData, int, string, error) {
	v := cleanQuery(r.URL.Query())
	d := &listData{Filter: newFilterForm(v), States: effectStateChoices(), Classes: store.ErrorClasses(), Poll: pollEvery}
	if d.Filter["state"] == "" {
		d.Filter["state"] = api.StateExceptions
	}
	p, err := api.EffectFilter(v, api.StateExceptions)
	if err != nil {
		return d, http.StatusBadRequest, paramMessage(err), nil
	}
	if !v.Has("limit") {
		p.Limit = pageSize
	}
	// One row more than shown tells whether a next page exists.
	limit := p.Limit
	p.Limit++
	p.WithoutRequest = true
	list, err := c.st.EffectList(r.Context(), p)
	if err != nil {
		return d, 0, "", err
	}
	d.RowsURL, d.Live = "/effects/rows?"+v.Encode(), true
	first := cloneWithout(v, "cursor")
	d.First, d.Paged = "/effects?"+first.Encode(), v.Has("cursor")
	if len(list) > limit {
		list = list[:limit]
		first.Set("cursor", api.EncodeCursor(list[limit-1].ID))
		d.Next = "/effects?" + first.Encode()
	}
	c.queueOwner(list)
	d.Effects, d.Now = list, c.clk.Now()
	return d, http.StatusOK, "", nil
}

// effectsPage serves GET /effects: the exception queue, or any state.
func (c *Console) effectsPage(w http.ResponseWriter, r *http.Request) {
	d, code, msg, err := c.listEffects(r)
	if err != nil {
		c.storeFailed(w, r, "list effects", err)
		return
	}
	title, nav := "Effects", "effects"
	if d.Filter["state"] == api.StateExceptions {
		title, nav = "Exception queue", "exceptions"
		if code == http.StatusOK {
			if err := c.queueEvents(r.Context(), d); err != nil {
				c.storeFailed(w, r, "list dead-lettered events", err)
				return
			}
		}
	}
	c.render(w, r, code, "effects", &view{Title: title, Nav: nav, Error: msg, Data: d})
}

// effectRows serves GET /effects/rows for the live refresh.
func (c *Console) effectRows(w http.ResponseWriter, r *http.Request) {
	d, code, _, err := c.listEffects(r)
	if err != nil {
		c.log.Error("console: store failed", "op", "list effects", "err", err)
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	c.fragment(w, code, "effect-rows", d)
}

// effectData is the effect page.
type effectData struct {
	Effect   *store.Effect
	Attempts []*store.Attempt
	Request  shownBody
	// Forward is a forward's request, its body decoded (forward.go); nil
	// for any other request.
	Forward   *forwardView
	Repair    string
	EventLink string
	// SourceEvents is every event that asked for the effect, oldest
	// first, each with the link to its page.
	SourceEvents []sourceEvent
	Entity       string
	// KeyHeader and Key are the idempotency header and the key the
	// destination was sent (empty for none).
	KeyHeader, Key string
	// Form keeps what the operator typed when an action was refused.
	Note, Owner string
	CanRetry    bool
	CanResolve  bool
	CanAssign   bool
	// CanCompensate offers the compensate form (compensate.go).
	CanCompensate bool
}

// sourceEvent is one event that asked for an effect, with its page.
type sourceEvent struct {
	store.EventRef
	Link string
}

func (c *Console) loadEffect(w http.ResponseWriter, r *http.Request) (int64, *effectData, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		c.fail(w, r, http.StatusNotFound, "No such effect.")
		return 0, nil, false
	}
	e, err := c.st.EffectGet(r.Context(), id)
	if err != nil {
		c.storeFailed(w, r, "get effect", err)
		return 0, nil, false
	}
	if e == nil {
		c.fail(w, r, http.StatusNotFound, "No effect "+strconv.FormatInt(id, 10)+".")
		return 0, nil, false
	}
	atts, err := c.st.AttemptList(r.Context(), id)
	if err != nil {
		c.storeFailed(w, r, "list attempts", err)
		return 0, nil, false
	}
	c.queueOwner([]*store.Effect{e})
	d := &effectData{Effect: e, Attempts: atts, Repair: store.EffectRepair(e), Entity: entityLink(e.Flow, e.Entity),
		Request: shownBody{View: bodyview.Render(e.Request), Label: "Request", Raw: requestLink(e.ID)},
		Forward: newForwardView(e.ID, e.Request)}
	if e.Source != "" && e.SourceEventID != "" {
		d.EventLink = eventLink(e.Source, e.SourceEventID)
	}
	for _, s := range e.SourceEvents {
		d.SourceEvents = append(d.SourceEvents, sourceEvent{EventRef: s, Link: eventLink(s.Source, s.EventID)})
	}
	if c.extra.IdempotencyKey != nil {
		d.KeyHeader, d.Key = c.extra.IdempotencyKey(e.Destination, e.EpisodeKey)
	}
	// The forms shown follow EffectOperate's transitions; the store
	// decides in the end.
	switch e.State {
	case store.EffectDead, store.EffectNeedsReconciliation:
		d.CanRetry, d.CanResolve, d.CanAssign = true, true, true
	case store.EffectRetryWait, store.EffectApproved:
		d.CanResolve, d.CanAssign = true, true
	case store.EffectAcknowledged:
		d.CanAssign = true
	}
	d.CanCompensate = c.canCompensate(e)
	return id, d, true
}

var doneMessages = map[string]string{
	store.OperateRetry:   "Retry requested: the effect is approved again and will be sent by the next delivery pass.",
	store.OperateResolve: "Resolved, with your note in the audit trail.",
	store.OperateAssign:  "Assigned.",
	// POST /effects/{id}/compensate has its own handler (compensate.go).
	"compensate": compensateDone,
}

// effectPage serves GET /effects/{id}: the effect, its attempt timeline
// and the repair forms.
func (c *Console) effectPage(w http.ResponseWriter, r *http.Request) {
	_, d, ok := c.loadEffect(w, r)
	if !ok {
		return
	}
	c.render(w, r, http.StatusOK, "effect", &view{Title: "Effect " + r.PathValue("id"), Nav: "effects",
		Flash: doneMessages[r.URL.Query().Get("done")], Data: d})
}

// operate serves POST /effects/{id}/{action} (retry, resolve, assign),
// the CSRF token already checked: done, it redirects to the effect page
// (so a reload does not repeat it); refused, it shows the page again with
// the reason and what was typed.
func (c *Console) operate(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if _, ok := doneMessages[action]; !ok {
		c.fail(w, r, http.StatusNotFound, "No action "+action+": retry, resolve or assign.")
		return
	}
	id, d, ok := c.loadEffect(w, r)
	if !ok {
		return
	}
	note, owner := strings.TrimSpace(r.PostFormValue("note")), strings.TrimSpace(r.PostFormValue("owner"))
	d.Note, d.Owner = note, owner
	refuse := func(code int, msg string) {
		c.render(w, r, code, "effect", &view{Title: "Effect " + r.PathValue("id"), Nav: "effects", Error: msg, Data: d})
	}
	switch {
	case action == store.OperateResolve && note == "":
		refuse(http.StatusBadRequest, "Resolve needs a note: say how the effect was closed.")
		return
	case action == store.OperateAssign && owner == "":
		refuse(http.StatusBadRequest, "Assign needs an owner: who repairs this effect.")
		return
	}
	_, err := c.st.EffectOperate(r.Context(), &store.EffectOperateParams{EffectID: id, Action: action, Actor: actor,
		Owner: owner, Note: note, Now: c.clk.Now()})
	switch {
	case errors.Is(err, store.ErrInvalidTransition):
		refuse(http.StatusConflict, "Cannot "+action+" an effect that is "+string(d.Effect.State)+
			" (it may have changed since the page was loaded).")
		return
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, "No effect "+r.PathValue("id")+".")
		return
	case errors.Is(err, store.ErrInvalidArgument):
		refuse(http.StatusBadRequest, "The store refused this "+action+": check the note and the owner.")
		return
	case err != nil:
		c.storeFailed(w, r, "operate on effect", err)
		return
	}
	c.log.Info("console: operator action", "effect", id, "action", action, "actor", actor)
	http.Redirect(w, r, "/effects/"+strconv.FormatInt(id, 10)+"?done="+action, http.StatusSeeOther)
}
