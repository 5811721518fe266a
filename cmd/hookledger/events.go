package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

var eventsCommand = &command{
	name:    "events",
	summary: "resolve a dead-lettered event that no replay can repair",
	run:     runEvents,
}

const eventsUsage = `events resolve --source NAME --event-id ID --note TEXT [--actor NAME]
                         [--config FILE | --server URL] [--format text|json]`

const eventsDescription = `Works on the events of the configured store, or of a running server with
--server.

  resolve  close a dead-lettered event by hand: a person decided that no
           replay will repair it (a version conflict, a payload the sender
           will never correct). The event and its dead-lettered work become
           resolved, its entities stop lagging in revision_lag, and it
           leaves dead_letters. --note is required and goes to the audit
           trail (event_resolved) with the actor. Only a dead_lettered event
           with no replay pending can be resolved: any other disposition is
           refused (exit 1), naming it.

A later replay of a resolved event still runs and its routes show how it
settled, but the event stays resolved.`

// eventResolver is what events resolve needs: the store, or a running
// server's admin API.
type eventResolver interface {
	EventResolve(ctx context.Context, p *store.EventResolveParams) (*store.Event, error)
}

func runEvents(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := env.Stdout
		code := exitOK
		if len(args) == 0 {
			w, code = env.Stderr, exitUsage
		}
		fmt.Fprintf(w, "Usage: hookledger %s\n\n%s\n", eventsUsage, eventsDescription)
		return code
	}
	sub, rest := args[0], args[1:]
	if sub != "resolve" {
		fmt.Fprintf(env.Stderr, "hookledger events: unknown action %q (resolve)\n", sub)
		return exitUsage
	}
	fs := newFlagSet(env, "events "+sub, eventsUsage, eventsDescription)
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	format := fs.String("format", "text", "output `format`: text or json")
	source := fs.String("source", "", "the `source` the event came from (required)")
	eventID := fs.String("event-id", "", "the sender's event `id` (required)")
	note := fs.String("note", "", "why the event is closed without a replay (required)")
	actor := fs.String("actor", "", "who acts (default operator:$USER)")
	server := fs.String("server", "", serverFlagUsage)
	extra, code, ok := parseInterspersed(env, fs, rest)
	if !ok {
		return code
	}
	if code, ok := checkArgs(env, "events resolve", extra, format); !ok {
		return code
	}
	for _, f := range []struct{ name, value string }{{"source", *source}, {"event-id", *eventID}} {
		if f.value == "" {
			fmt.Fprintf(env.Stderr, "hookledger events resolve: --%s is required\n", f.name)
			return exitUsage
		}
	}
	if strings.TrimSpace(*note) == "" {
		fmt.Fprintln(env.Stderr, "hookledger events resolve: --note is required: say why no replay will repair the event")
		return exitUsage
	}

	st, closeStore, code := openEvents(ctx, env, fs, *server, *cfgPath)
	if st == nil {
		return code
	}
	defer closeStore()
	e, err := st.EventResolve(ctx, &store.EventResolveParams{Source: *source, EventID: *eventID,
		Actor: operatorActor(env, *actor), Note: *note, Now: storeNow(ctx, env, st)})
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger events resolve %s/%s: %s\n", safe(*source), safe(*eventID), safe(eventResolveError(err)))
		return remoteExit(err)
	}
	if *format == "json" {
		return writeJSONOut(env.Stdout, api.EventResolveJSON{Event: api.NewEventJSON(e)})
	}
	fmt.Fprintf(env.Stdout, "event %s/%s is now %s\n", safe(e.Source), safe(e.EventID), safe(string(e.Disposition)))
	for _, r := range e.Routes {
		fmt.Fprintf(env.Stdout, "  flow %s  entity %s  %s\n", safe(r.Flow), dash(r.Entity), safe(string(r.Disposition)))
	}
	return exitOK
}

// eventResolveError words the store's refusals for a person; a server's
// answer already carries its own words.
func eventResolveError(err error) string {
	var ae *apiError
	if errors.As(err, &ae) {
		return err.Error()
	}
	var se *store.EventStateError
	switch {
	case errors.As(err, &se):
		return se.Error()
	case errors.Is(err, store.ErrNotFound):
		return "no such event"
	}
	return err.Error()
}

// openEvents returns what events resolve works on: a running server's
// admin API with --server, else the configured store, opened without
// migrating and without the config's secrets.
func openEvents(ctx context.Context, env *Env, fs *flag.FlagSet, server, cfgPath string) (eventResolver, func(), int) {
	if server != "" {
		r, code := newRemote(env, "events", server, cfgPath, flagGiven(fs, "config"))
		if r == nil {
			return nil, nil, code
		}
		return &remoteEvents{r: r}, func() {}, exitOK
	}
	cfg, code := loadOperatorConfig(env, "events", cfgPath)
	if cfg == nil {
		return nil, nil, code
	}
	st, code := openOperatorStore(ctx, env, "events", cfg, writeStore)
	if st == nil {
		return nil, nil, code
	}
	return st, func() { st.Close() }, exitOK
}

// remoteEvents resolves events through a running server's admin API.
type remoteEvents struct {
	r *remote
}

func (re *remoteEvents) EventResolve(ctx context.Context, p *store.EventResolveParams) (*store.Event, error) {
	// The API records the actor as operator:NAME itself.
	in := api.EventResolveRequest{Source: p.Source, EventID: p.EventID, Note: p.Note, Actor: strings.TrimPrefix(p.Actor, "operator:")}
	var out api.EventResolveJSON
	if err := re.r.call(ctx, http.MethodPost, "/api/v1/events/resolve", nil, in, &out); err != nil {
		return nil, err
	}
	return eventFromJSON(out.Event), nil
}

// eventFromJSON reads back an event the API rendered, so that the verb
// prints the same text and JSON either way.
func eventFromJSON(j api.EventJSON) *store.Event {
	e := &store.Event{Source: j.Source, EventID: j.EventID, Type: j.Type, Entity: j.Entity, ReceivedAt: parseTime(j.ReceivedAt),
		Deliveries: j.Deliveries, Disposition: store.Disposition(j.Disposition)}
	if j.OccurredAt != nil {
		e.OccurredAt = parseTime(*j.OccurredAt)
	}
	for _, r := range j.Routes {
		e.Routes = append(e.Routes, store.EventRoute{Flow: r.Flow, Entity: r.Entity, Disposition: store.Disposition(r.Disposition)})
	}
	return e
}
