package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
)

var tailCommand = &command{
	name:    "tail",
	summary: "follow events and effects as they happen, through a running server's admin API",
	run:     runTail,
}

const tailDescription = `Follows a running server's events and effects through its admin API and
prints one line per new event, per new effect and per change of their
state (an event going from accepted to applied, an effect from approved to
done or dead), until Ctrl-C. An effect is followed until it is final (done,
superseded or resolved): a dead effect's re-drive, retry or resolution is
printed too, as is a dead-lettered event's replay or resolution. What is
pending when tail starts (the newest 100 pending events and effects) is
followed from then on as well, though only --last prints its line. Text
from the senders is printed with its control characters escaped.

TIME is when the change happened, as the server stored it: an effect's
last update, an event's receipt, and for an event's later change the time
of its newest audit row. Rows printed by --last carry their stored times
too.

The server is --server URL, else the one at the config file's listen
address; the admin token is read from $` + adminTokenVar + `, else from the
config's admin.token.

--source, --type and --entity filter events, --source, --flow and --entity
effects (--source by the event that caused them); --disposition shows the
events as they reach that disposition. The filters go to the events and
effects APIs as query parameters (all but --disposition, which tail
applies to each change it sees, and --source for effects, which that API
does not take); when the server does not know a parameter, its answer
(400, naming it) is shown as it is.

Each line:
  TIME  event   SOURCE/EVENT_ID  TYPE  ENTITY  DISPOSITION
  TIME  effect  ID  EPISODE_KEY  DESTINATION  STATE  [CLASS: REASON]  [CHANGE]

CHANGE says what moved a dead effect on: "re-drive N", "retried" (by an
operator: the console, effects retry or a bulk retry) or "note: TEXT" for
a resolution.

Exit codes: 0 after Ctrl-C; 1 the server cannot be reached at start or
refuses the token; 2 usage error, or a filter the server refuses.`

// tailTrack bounds the events and effects whose state changes tail keeps
// asking about; each costs one request per poll.
const tailTrack = 200

func runTail(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "tail",
		"tail [--server URL] [--config FILE] [--source S] [--type T] [--entity E] [--flow F]\n"+
			"                       [--disposition D] [--events|--effects] [--last N] [--interval DURATION]",
		tailDescription)
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file` whose listen address and admin.token are used when --server or the token are not given")
	server := fs.String("server", "", "the running server's `URL`, such as http://127.0.0.1:8080")
	source := fs.String("source", "", "only events and effects of this `source`")
	typ := fs.String("type", "", "only events of this `type`")
	entity := fs.String("entity", "", "only events and effects of this `entity`")
	flowName := fs.String("flow", "", "only effects of this `flow`")
	disposition := fs.String("disposition", "", "only events as they reach this `disposition` (applied, duplicate, stale, dead_lettered, ...)")
	onlyEvents := fs.Bool("events", false, "follow events only")
	onlyEffects := fs.Bool("effects", false, "follow effects only")
	last := fs.Int("last", 0, "first print the last `N` events and effects already stored")
	interval := fs.Duration("interval", time.Second, "how often to ask the server")
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(env.Stderr, "hookledger tail: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	case *onlyEvents && *onlyEffects:
		fmt.Fprintln(env.Stderr, "hookledger tail: give --events or --effects, not both")
		return exitUsage
	case *interval <= 0:
		fmt.Fprintln(env.Stderr, "hookledger tail: --interval must be positive")
		return exitUsage
	case *last < 0 || *last > 1000:
		fmt.Fprintln(env.Stderr, "hookledger tail: --last must be from 0 to 1000")
		return exitUsage
	}
	r, code := newRemote(env, "tail", *server, *cfgPath, flagGiven(fs, "config"))
	if r == nil {
		return code
	}
	t := &tailer{r: r, env: env, disposition: *disposition, source: *source, typ: *typ, entity: *entity, flow: *flowName,
		events: !*onlyEffects, effects: !*onlyEvents, pendingEvents: map[eventRef]string{}, pendingEffects: map[int64]effectSeen{}}
	if err := t.start(ctx, *last); err != nil {
		if ctx.Err() != nil {
			return exitOK
		}
		fmt.Fprintf(env.Stderr, "hookledger tail: %v\n", err)
		return remoteExit(err)
	}
	fmt.Fprintf(env.Stderr, "following %s at %s (Ctrl-C stops)\n", t.what(), r.base.Redacted())
	failing := false
	for {
		select {
		case <-ctx.Done():
			return exitOK
		case <-time.After(*interval):
		}
		err := t.poll(ctx)
		switch {
		case ctx.Err() != nil:
			return exitOK
		case err == nil:
			if failing {
				fmt.Fprintln(env.Stderr, "hookledger tail: the server answers again")
			}
			failing = false
		case isFatal(err):
			fmt.Fprintf(env.Stderr, "hookledger tail: %v\n", err)
			return remoteExit(err)
		case !failing:
			// A restarting server: keep asking, say so once.
			fmt.Fprintf(env.Stderr, "hookledger tail: %v; retrying\n", err)
			failing = true
		}
	}
}

// isFatal tells the errors that asking again cannot fix: a refused token
// or a refused filter.
func isFatal(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && (ae.status == http.StatusUnauthorized || ae.status == http.StatusBadRequest || ae.status == http.StatusNotFound)
}

type eventRef struct{ source, eventID string }

// tailEvent is an event as the events API shows it. Routes, where the
// server lists them, name the entity each flow computed, which --entity
// matches as well as the envelope's.
type tailEvent struct {
	Source      string `json:"source"`
	EventID     string `json:"event_id"`
	Type        string `json:"type"`
	Entity      string `json:"entity"`
	Disposition string `json:"disposition"`
	ReceivedAt  string `json:"received_at"`
	Routes      []struct {
		Entity string `json:"entity"`
	} `json:"routes"`
}

type tailEventPage struct {
	Events     []tailEvent `json:"events"`
	NextCursor string      `json:"next_cursor"`
}

type tailer struct {
	r   *remote
	env *Env

	source, typ, entity, flow, disposition string
	events, effects                        bool

	eventPos  position[tailEvent]
	effectPos position[api.EffectJSON]
	// The state last printed of the events and effects whose state may
	// still change.
	pendingEvents  map[eventRef]string
	pendingEffects map[int64]effectSeen
	dropped        bool
}

func (t *tailer) what() string {
	switch {
	case !t.effects:
		return "events"
	case !t.events:
		return "effects"
	}
	return "events and effects"
}

func (t *tailer) eventQuery() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"source": t.source, "type": t.typ, "entity": t.entity} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// effectQuery holds the effect filters of the effects API. It has no
// source filter: effects are matched to --source here, by the source of
// the event that caused them.
func (t *tailer) effectQuery() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"flow": t.flow, "entity": t.entity} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// start walks to the end of both lists, printing the last n entries, so
// that following begins with what happens from now on. What is pending
// already (an event being processed or dead-lettered, an effect not yet
// final) is followed from here too, printed or not: an operator who starts
// tail and then repairs what waits sees the repair. The newest half of
// tailTrack of each are, so that room is left for what arrives later.
func (t *tailer) start(ctx context.Context, n int) error {
	if t.events {
		recent, pending := newest[tailEvent]{n: n}, newest[tailEvent]{n: tailTrack / 2}
		err := t.pageEvents(ctx, func(e tailEvent) {
			if t.matchEvent(e) {
				recent.add(e)
				if !finalEvent(e.Disposition) {
					pending.add(e)
				}
			}
		})
		if err != nil {
			return err
		}
		for _, p := range pending.rows {
			t.trackEvent(p)
		}
		for _, row := range recent.rows {
			t.printMatching(row)
		}
		t.droppedAtStart(pending.over)
	}
	if t.effects {
		recent, pending := newest[api.EffectJSON]{n: n}, newest[api.EffectJSON]{n: tailTrack / 2}
		err := t.pageEffects(ctx, func(e api.EffectJSON) {
			if t.matchEffect(e) {
				recent.add(e)
				if !finalEffect(e.State) {
					pending.add(e)
				}
			}
		})
		if err != nil {
			return err
		}
		for _, p := range pending.rows {
			t.trackEffect(p)
		}
		for _, row := range recent.rows {
			t.printEffect(row, "")
		}
		t.droppedAtStart(pending.over)
	}
	return nil
}

// newest keeps the last n rows it is given.
type newest[T any] struct {
	n    int
	rows []T
	// over says rows were given beyond the n kept.
	over bool
}

func (k *newest[T]) add(row T) {
	if k.n <= 0 {
		return
	}
	k.rows = append(k.rows, row)
	if len(k.rows) > k.n {
		k.rows = k.rows[1:]
		k.over = true
	}
}

func (t *tailer) droppedAtStart(over bool) {
	if over {
		fmt.Fprintf(t.env.Stderr, "hookledger tail: more than %d events or effects were pending when tail started; the state changes of the oldest are not followed\n", tailTrack/2)
	}
}

// poll prints what is new: events and effects past the cursors, and the
// state changes of the ones still pending.
func (t *tailer) poll(ctx context.Context) error {
	if t.events {
		if err := t.recheckEvents(ctx); err != nil {
			return err
		}
		if err := t.pageEvents(ctx, t.event); err != nil {
			return err
		}
	}
	if t.effects {
		if err := t.recheckEffects(ctx); err != nil {
			return err
		}
		if err := t.pageEffects(ctx, t.effect); err != nil {
			return err
		}
	}
	return nil
}

func (t *tailer) pageEvents(ctx context.Context, each func(tailEvent)) error {
	return t.eventPos.next(ctx, func(ctx context.Context, cursor string, limit int) ([]tailEvent, string, error) {
		q := t.eventQuery()
		q.Set("limit", strconv.Itoa(limit))
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page tailEventPage
		err := t.r.call(ctx, http.MethodGet, "/api/v1/events", q, nil, &page)
		return page.Events, page.NextCursor, err
	}, each)
}

func (t *tailer) pageEffects(ctx context.Context, each func(api.EffectJSON)) error {
	return t.effectPos.next(ctx, func(ctx context.Context, cursor string, limit int) ([]api.EffectJSON, string, error) {
		q := t.effectQuery()
		q.Set("limit", strconv.Itoa(limit))
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Effects    []api.EffectJSON `json:"effects"`
			NextCursor string           `json:"next_cursor"`
		}
		err := t.r.call(ctx, http.MethodGet, "/api/v1/effects", q, nil, &page)
		return page.Effects, page.NextCursor, err
	}, each)
}

// position is how far tail has read a list of the admin API: after the
// row its opaque cursor names, and then skip rows more. A list's last page
// carries no cursor, so the rows of a partial last page are counted
// instead; the cursor moves on as soon as the API hands out a later one.
type position[T any] struct {
	cursor string
	skip   int
}

// listFunc fetches one page after cursor: the rows and the cursor after
// the last of them, empty on the last page.
type listFunc[T any] func(ctx context.Context, cursor string, limit int) ([]T, string, error)

// next calls each for every row past the position, in list order, and
// moves the position past the last row.
func (p *position[T]) next(ctx context.Context, list listFunc[T], each func(T)) error {
	for {
		rows, cursor, err := list(ctx, p.cursor, 1000)
		if err != nil {
			return err
		}
		for _, r := range rows[min(p.skip, len(rows)):] {
			each(r)
		}
		if cursor == "" {
			p.skip = max(p.skip, len(rows))
			break
		}
		p.cursor, p.skip = cursor, 0
	}
	if p.skip > 1 {
		// Asking for one row fewer than were counted makes the API name
		// the cursor after the last but one: from there one row is known.
		if _, cursor, err := list(ctx, p.cursor, p.skip-1); err == nil && cursor != "" {
			p.cursor, p.skip = cursor, 1
		}
	}
	return nil
}

// event prints an event, and keeps asking about it while it is pending.
func (t *tailer) event(e tailEvent) {
	if !t.matchEvent(e) {
		return
	}
	t.trackEvent(e)
	t.printMatching(e)
}

// trackEvent keeps asking about an event while it is pending.
func (t *tailer) trackEvent(e tailEvent) {
	if finalEvent(e.Disposition) {
		return
	}
	if len(t.pendingEvents) < tailTrack {
		t.pendingEvents[eventRef{e.Source, e.EventID}] = e.Disposition
	} else {
		t.dropOne()
	}
}

// printMatching prints an event at its receipt, unless --disposition
// asks for another.
func (t *tailer) printMatching(e tailEvent) {
	if t.disposition == "" || e.Disposition == t.disposition {
		t.printEvent(e, e.ReceivedAt)
	}
}

// finalEvent says an event's disposition will not change by itself or by
// a person: accepted events are still being processed, and a dead letter
// waits for a replay or a resolution.
func finalEvent(disposition string) bool {
	return disposition != "accepted" && disposition != "dead_lettered"
}

// matchEvent filters here too: a server that ignores a parameter it does
// not know would otherwise show every event.
func (t *tailer) matchEvent(e tailEvent) bool {
	if (t.source != "" && e.Source != t.source) || (t.typ != "" && e.Type != t.typ) {
		return false
	}
	if t.entity == "" || e.Entity == t.entity {
		return true
	}
	for _, r := range e.Routes {
		if r.Entity == t.entity {
			return true
		}
	}
	return false
}

func (t *tailer) printEvent(e tailEvent, at string) {
	fmt.Fprintf(t.env.Stdout, "%s  event   %s/%s  %s  %s  %s\n", stamp(at), termLine(e.Source), termLine(e.EventID),
		termLine(dash(e.Type)), termLine(dash(e.Entity)), termLine(e.Disposition))
}

func (t *tailer) recheckEvents(ctx context.Context) error {
	for ref, was := range t.pendingEvents {
		var page tailEventPage
		q := url.Values{"source": {ref.source}, "event_id": {ref.eventID}}
		if err := t.r.call(ctx, http.MethodGet, "/api/v1/events", q, nil, &page); err != nil {
			return err
		}
		if len(page.Events) != 1 {
			delete(t.pendingEvents, ref)
			continue
		}
		e := page.Events[0]
		if e.Disposition == was {
			continue
		}
		if finalEvent(e.Disposition) {
			delete(t.pendingEvents, ref)
		} else {
			t.pendingEvents[ref] = e.Disposition
		}
		if t.disposition == "" || e.Disposition == t.disposition {
			at, err := t.eventChangedAt(ctx, ref)
			if err != nil {
				return err
			}
			t.printEvent(e, at)
		}
	}
	return nil
}

// eventChangedAt is when an event's disposition last changed: the time of
// its newest audit row, since every change of disposition writes one. An
// event has few rows, so reading them all is cheap.
func (t *tailer) eventChangedAt(ctx context.Context, ref eventRef) (string, error) {
	q := url.Values{"source": {ref.source}, "event_id": {ref.eventID}, "limit": {"1000"}}
	at := ""
	for {
		var page struct {
			Audit []struct {
				At string `json:"at"`
			} `json:"audit"`
			NextCursor string `json:"next_cursor"`
		}
		if err := t.r.call(ctx, http.MethodGet, "/api/v1/audit", q, nil, &page); err != nil {
			return "", err
		}
		if n := len(page.Audit); n > 0 {
			at = page.Audit[n-1].At
		}
		if page.NextCursor == "" {
			return at, nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

// finalEffect says an effect's state will not change any more. A dead
// effect is not final: a re-drive, an operator's retry or a resolution
// moves it on, and tail shows that.
func finalEffect(state string) bool {
	switch state {
	case "done", "superseded", "resolved":
		return true
	}
	return false
}

// effectSeen is what tail last printed of an effect: a change of any of
// it is a new line.
type effectSeen struct {
	state              string
	attempts, redrives int
	reason             string
}

func seenOf(e api.EffectJSON) effectSeen {
	return effectSeen{state: e.State, attempts: e.Attempts, redrives: e.Redrives, reason: e.Reason}
}

func (t *tailer) effect(e api.EffectJSON) {
	if !t.matchEffect(e) {
		return
	}
	t.trackEffect(e)
	t.printEffect(e, "")
}

func (t *tailer) matchEffect(e api.EffectJSON) bool {
	return (t.source == "" || e.Source == t.source) && (t.flow == "" || e.Flow == t.flow) && (t.entity == "" || e.Entity == t.entity)
}

// trackEffect keeps asking about an effect until it is final.
func (t *tailer) trackEffect(e api.EffectJSON) {
	if finalEffect(e.State) {
		return
	}
	if len(t.pendingEffects) < tailTrack {
		t.pendingEffects[e.ID] = seenOf(e)
	} else {
		t.dropOne()
	}
}

// printEffect prints an effect's line; change says what moved it on.
func (t *tailer) printEffect(e api.EffectJSON, change string) {
	why := ""
	// A retried effect keeps its last error until the next call: it is
	// no reason for the retry.
	if e.State != "done" && e.State != "resolved" && change != "retried" && (e.ErrorClass != "" || e.Reason != "") {
		why = "  " + termLine(strings.TrimPrefix(e.ErrorClass+": "+e.Reason, ": "))
	}
	if change != "" {
		change = "  " + termLine(change)
	}
	fmt.Fprintf(t.env.Stdout, "%s  effect  %d  %s  %s  %s%s%s\n", stamp(e.UpdatedAt), e.ID, termLine(e.EpisodeKey), termLine(e.Destination),
		termLine(e.State), why, change)
}

// effectChange names what moved an effect on from was, where the state
// alone does not say it: a re-drive, an operator's retry of a dead
// effect, a resolution's note.
func effectChange(was effectSeen, e api.EffectJSON) string {
	switch {
	case e.State == "resolved":
		return "note: " + e.Note
	case e.Redrives > was.redrives:
		return fmt.Sprintf("re-drive %d", e.Redrives)
	case was.state == "dead" && e.State != "dead" && e.State != "superseded" || e.Attempts < was.attempts:
		// An operator's retry starts the attempts again.
		return "retried"
	}
	return ""
}

func (t *tailer) recheckEffects(ctx context.Context) error {
	for id, was := range t.pendingEffects {
		var one struct {
			Effect api.EffectJSON `json:"effect"`
		}
		err := t.r.call(ctx, http.MethodGet, "/api/v1/effects/"+strconv.FormatInt(id, 10), nil, nil, &one)
		var ae *apiError
		if errors.As(err, &ae) && ae.status == http.StatusNotFound {
			delete(t.pendingEffects, id)
			continue
		}
		if err != nil {
			return err
		}
		now := seenOf(one.Effect)
		if now == was {
			continue
		}
		if finalEffect(one.Effect.State) {
			delete(t.pendingEffects, id)
		} else {
			t.pendingEffects[id] = now
		}
		t.printEffect(one.Effect, effectChange(was, one.Effect))
	}
	return nil
}

func (t *tailer) dropOne() {
	if !t.dropped {
		t.dropped = true
		fmt.Fprintf(t.env.Stderr, "hookledger tail: more than %d events or effects are pending; the state changes of the newest are not followed\n", tailTrack)
	}
}

// stamp renders a stored time (RFC 3339) as tail prints it, to the
// second in UTC. A time the server did not send is shown as "-": tail
// never puts its own clock's time in place of when a change happened.
func stamp(stored string) string {
	at, err := time.Parse(time.RFC3339Nano, stored)
	if err != nil {
		return "-" + strings.Repeat(" ", len("2006-01-02T15:04:05Z")-1)
	}
	return at.UTC().Format(time.RFC3339)
}
