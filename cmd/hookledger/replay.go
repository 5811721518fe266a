package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/replay"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

var replayCommand = &command{
	name:    "replay",
	summary: "re-run processing for stored events (same identities, no duplicate effects)",
	run:     runReplay,
}

const replayDescription = `Replays the stored events selected by source, flow, entity and receipt time
(RFC 3339; --from inclusive, --to exclusive). The events keep their
identities and pass the same revision guard and effect ledger again: effects
already in the ledger are not created twice, applied events stay applied,
and dead-lettered ones are repaired once their cause is fixed.

The replay is enqueued in the store and processed by a running
'hookledger serve' on it. The verb shows the progress and, once every work
item is settled, the outcome: applied, duplicate, stale, superseded,
dead-lettered, effects created, and the selected events skipped (still
pending their first processing, or whose route cannot be computed).
Ctrl-C, --timeout or --no-wait stop waiting, not the replay.

The replay is enqueued in batches of at most 5,000 events, each in a
transaction of its own, so the verb's memory does not grow with the
selection. Stopped
while it still reads the stored events, it names the replay: the batches
already enqueued are processed, the rest of the selection is not.

--plan prints the replay's dry run instead: the events and work items it
would select, the effects they caused that the ledger holds (by state;
none is created again) and the work items that may create effects. It
reads the configured store read-only, enqueues nothing, and has no
--server form.

With --server the running server enqueues and watches the replay itself
(POST /api/v1/replays). Without it the verb opens the configured store; it
needs none of the config's secrets and never migrates the schema.

Exit codes: 0 the replay is enqueued (and, unless --no-wait, fully
processed); 1 it matches nothing, or waiting stopped before the end, or
the store or server failed; 2 usage or configuration error.`

// remoteReplayWait is how long --server waits when --timeout is not
// given: as long as the server lets a request wait.
const remoteReplayWait = api.MaxReplayWait

func runReplay(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "replay",
		"replay [--config FILE | --server URL] [--source S [--event-id ID]] [--flow F] [--entity E] [--from TIME] [--to TIME]\n"+
			"                         [--actor NAME] [--no-wait] [--timeout DURATION] [--plan] [--format text|json]",
		replayDescription)
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	source := fs.String("source", "", "only events of this `source`")
	eventID := fs.String("event-id", "", "only this event of --source (a dead letter's `id`)")
	flowName := fs.String("flow", "", "only into this `flow`")
	entity := fs.String("entity", "", "only this `entity`")
	from := fs.String("from", "", "received at or after this `time` (RFC 3339)")
	to := fs.String("to", "", "received before this `time` (RFC 3339)")
	actor := fs.String("actor", "", "who replays (default operator:$USER)")
	server := fs.String("server", "", serverFlagUsage)
	noWait := fs.Bool("no-wait", false, "enqueue the replay and exit without waiting for its outcome")
	timeout := fs.Duration("timeout", 0, "stop waiting after this `duration` (default: until done; with --server at most 10m)")
	format := fs.String("format", "text", "output `format`: text or json")
	plan := fs.Bool("plan", false, "print the replay's dry run from the configured store, read-only, and enqueue nothing")
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	if code, ok := checkArgs(env, "replay", fs.Args(), format); !ok {
		return code
	}
	if *plan && *server != "" {
		fmt.Fprintln(env.Stderr, "hookledger replay: --plan reads the configured store, not a server: give --config (the console's Replay page plans through a running server)")
		return exitUsage
	}
	if *timeout < 0 || (*server != "" && *timeout > remoteReplayWait) {
		fmt.Fprintf(env.Stderr, "hookledger replay: --timeout %s: want a positive duration (at most %s with --server)\n", *timeout, remoteReplayWait)
		return exitUsage
	}
	if *eventID != "" && *source == "" {
		fmt.Fprintln(env.Stderr, "hookledger replay: --event-id needs --source: an event is named by its source too")
		return exitUsage
	}
	sel := replay.Selection{Source: *source, EventID: *eventID, Flow: *flowName, Entity: *entity}
	if !parseReplayTimes(env, &sel, *from, *to) {
		return exitUsage
	}
	sel.Actor = operatorActor(env, *actor)
	out := &replayOutput{env: env, format: *format, tty: stderrTerminal(env)}
	if *plan {
		return replayPlan(ctx, env, out, sel, *cfgPath)
	}

	if *server != "" {
		r, code := newRemote(env, "replay", *server, *cfgPath, flagGiven(fs, "config"))
		if r == nil {
			return code
		}
		wait := *timeout
		switch {
		case *noWait:
			wait = 0
		case wait == 0:
			wait = remoteReplayWait
		}
		return replayRemote(ctx, r, out, api.ReplayRequest{Source: *source, EventID: *eventID, Flow: *flowName, Entity: *entity, From: *from, To: *to,
			Actor: strings.TrimPrefix(sel.Actor, "operator:"), WaitSeconds: int(wait / time.Second)})
	}
	return replayLocal(ctx, env, out, sel, *cfgPath, *noWait, *timeout)
}

// parseReplayTimes sets the selection's bounds from --from and --to, and
// reports a malformed one; false means a usage error was printed.
func parseReplayTimes(env *Env, sel *replay.Selection, from, to string) bool {
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"--from", from, &sel.From}, {"--to", to, &sel.To}} {
		if t.v == "" {
			continue
		}
		parsed, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			fmt.Fprintf(env.Stderr, "hookledger replay: %s %q: want an RFC 3339 time such as 2026-11-03T09:00:00Z\n", t.name, t.v)
			return false
		}
		*t.dst = parsed
	}
	return true
}

// openReplayStore loads the config, checks the selection's flow against
// it and opens the store as mode asks; a nil store comes with the exit
// code, its reason already printed.
func openReplayStore(ctx context.Context, env *Env, sel replay.Selection, cfgPath string, mode storeAccess) (*config.Config, store.Store, int) {
	cfg, code := loadOperatorConfig(env, "replay", cfgPath)
	if cfg == nil {
		return nil, nil, code
	}
	if sel.Flow != "" && !hasFlow(cfg, sel.Flow) {
		fmt.Fprintf(env.Stderr, "hookledger replay: --flow %q: no such flow in %s\n", sel.Flow, cfgPath)
		return nil, nil, exitUsage
	}
	st, code := openOperatorStore(ctx, env, "replay", cfg, mode)
	if st == nil {
		return nil, nil, code
	}
	return cfg, st, 0
}

// replayLocal enqueues the replay in the configured store and, unless
// noWait, waits for a running server to process it.
func replayLocal(ctx context.Context, env *Env, out *replayOutput, sel replay.Selection, cfgPath string, noWait bool, timeout time.Duration) int {
	cfg, st, code := openReplayStore(ctx, env, sel, cfgPath, writeStore)
	if st == nil {
		return code
	}
	defer st.Close()
	// The engine only computes routes here; it never starts processing.
	engine := flow.New(cfg, st, flow.Options{})
	res, err := replay.RunWith(ctx, st, engine, sel, storeNow(ctx, env, st), replay.Options{Progress: out.selecting})
	out.endLine()
	if errors.Is(err, replay.ErrNothingSelected) {
		fmt.Fprintln(env.Stderr, "hookledger replay: the selection matches no stored event of any flow")
		return exitFail
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger replay: %v\n", err)
		return exitFail
	}
	o := replay.Outcome{ReplayID: res.ReplayID, Events: res.Events, WorkItems: res.WorkItems, Skipped: res.Skipped}
	if out.format == "text" {
		fmt.Fprintf(env.Stdout, "replay %d enqueued: %d events, %d work items", res.ReplayID, res.Events, res.WorkItems)
		if res.Skipped > 0 {
			fmt.Fprintf(env.Stdout, " (%d selected events skipped)", res.Skipped)
		}
		fmt.Fprintln(env.Stdout)
	}
	if noWait {
		return out.final(o, false, "")
	}
	fmt.Fprintf(env.Stderr, "waiting for 'hookledger serve' on %s to process it (Ctrl-C stops waiting; the replay goes on)\n", storeName(cfg))
	return watchReplay(ctx, env, out, st, res, timeout)
}

// replayPlan prints the plan of a replay of sel: the work it would
// enqueue and what the ledger holds of it. It opens the store read-only,
// like the other verbs that only read: planning never writes, and never
// creates or migrates a database.
func replayPlan(ctx context.Context, env *Env, out *replayOutput, sel replay.Selection, cfgPath string) int {
	cfg, st, code := openReplayStore(ctx, env, sel, cfgPath, readStore)
	if st == nil {
		return code
	}
	defer st.Close()
	// The engine only computes routes here; it never starts processing.
	p, err := replay.MakePlan(ctx, st, flow.New(cfg, st, flow.Options{}), sel, replay.PlanOptions{Progress: out.selecting})
	out.endLine()
	if errors.Is(err, replay.ErrNothingSelected) {
		fmt.Fprintln(env.Stderr, "hookledger replay: the selection matches no stored event of any flow")
		return exitFail
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger replay: %v\n", err)
		return exitFail
	}
	if out.format == "json" {
		return writeJSONOut(env.Stdout, planJSONOf(p))
	}
	printPlan(env, p)
	return exitOK
}

// planJSON is a plan as --format json prints it, its samples in the
// API's snake case.
type planJSON struct {
	*replay.Plan
	Samples []planSampleJSON `json:"samples"`
}

type planSampleJSON struct {
	Source   string `json:"source"`
	EventID  string `json:"event_id"`
	Flow     string `json:"flow"`
	Entity   string `json:"entity"`
	InLedger int    `json:"in_ledger"`
}

func planJSONOf(p *replay.Plan) planJSON {
	j := planJSON{Plan: p, Samples: make([]planSampleJSON, 0, len(p.Samples))}
	for _, s := range p.Samples {
		j.Samples = append(j.Samples, planSampleJSON{Source: s.Source, EventID: s.EventID, Flow: s.Flow, Entity: s.Entity, InLedger: s.InLedger})
	}
	return j
}

// planSamplesShown bounds the work items the text plan lists.
const planSamplesShown = 10

// printPlan writes a plan as text, the counts the console's Replay page
// shows.
func printPlan(env *Env, p *replay.Plan) {
	w := env.Stdout
	fmt.Fprintf(w, "plan: %d events, %d work items on %d entities", p.Events, p.WorkItems, p.Entities)
	if p.Skipped > 0 {
		fmt.Fprintf(w, " (%d selected events skipped)", p.Skipped)
	}
	fmt.Fprintln(w)
	states := make([]string, 0, len(p.ByState))
	for s, n := range p.ByState {
		states = append(states, fmt.Sprintf("%s %d", s, n))
	}
	sort.Strings(states)
	fmt.Fprintf(w, "  effects in the ledger: %d", p.InLedger)
	if len(states) > 0 {
		fmt.Fprintf(w, " (%s)", strings.Join(states, ", "))
	}
	fmt.Fprintln(w, ", not created again")
	fmt.Fprintf(w, "  work items that may create effects: %d (the flow decides when it processes them)\n", p.MayCreate)
	if p.Unchecked > 0 {
		fmt.Fprintf(w, "  work items whose ledger was not read: %d\n", p.Unchecked)
	}
	for i, it := range p.Samples {
		if i == planSamplesShown {
			fmt.Fprintf(w, "  ... %d more work items\n", p.WorkItems-planSamplesShown)
			break
		}
		ledger := "ledger not read"
		if it.InLedger >= 0 {
			ledger = fmt.Sprintf("%d in the ledger", it.InLedger)
		}
		fmt.Fprintf(w, "  %s/%s -> %s %s (%s)\n", termLine(it.Source), termLine(it.EventID), termLine(it.Flow), termLine(it.Entity), ledger)
	}
	fmt.Fprintln(w, "nothing was enqueued: run the same command without --plan to replay")
}

// watchReplay follows the enqueued replay until every work item settled,
// the timeout passed or the caller stopped waiting; the replay itself
// goes on either way.
func watchReplay(ctx context.Context, env *Env, out *replayOutput, st replay.AuditStore, res *replay.Result, timeout time.Duration) int {
	waitCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		waitCtx, cancel = context.WithTimeout(ctx, timeout)
	}
	defer cancel()
	stall := out.stallHint(replayStallAfter)
	o, err := replay.Watch(waitCtx, st, res, replay.WatchOptions{Progress: func(p replay.Outcome) { stall.reset(); out.processing(p) }})
	stall.stop()
	out.endLine()
	switch {
	case err == nil:
		return out.final(o, true, "")
	case waitCtx.Err() != nil && ctx.Err() == nil:
		return out.final(o, false, fmt.Sprintf("still processing after %s", timeout))
	case ctx.Err() != nil:
		return out.final(o, false, "stopped waiting")
	}
	fmt.Fprintf(env.Stderr, "hookledger replay: %v\n", err)
	return exitFail
}

// replayStallAfter is how long the verb waits without any work item
// settling before it says that nothing seems to process the replay.
const replayStallAfter = 15 * time.Second

func replayRemote(ctx context.Context, r *remote, out *replayOutput, req api.ReplayRequest) int {
	if req.WaitSeconds > 0 {
		fmt.Fprintf(out.env.Stderr, "waiting up to %s for the server at %s to process the replay (Ctrl-C stops waiting; the replay goes on)\n",
			time.Duration(req.WaitSeconds)*time.Second, r.base.Redacted())
	}
	var resp struct {
		Replay api.ReplayJSON `json:"replay"`
	}
	err := r.call(ctx, http.MethodPost, "/api/v1/replays", nil, req, &resp)
	var ae *apiError
	switch {
	case errors.As(err, &ae) && ae.status == http.StatusUnprocessableEntity:
		fmt.Fprintf(out.env.Stderr, "hookledger replay: %s\n", ae.msg)
		return exitFail
	case ctx.Err() != nil:
		fmt.Fprintln(out.env.Stderr, "hookledger replay: stopped waiting; the server goes on with the replay if it was enqueued")
		return exitFail
	case err != nil:
		fmt.Fprintf(out.env.Stderr, "hookledger replay: %v\n", err)
		return remoteExit(err)
	}
	o := resp.Replay.Outcome
	if out.format == "text" {
		fmt.Fprintf(out.env.Stdout, "replay %d enqueued: %d events, %d work items", o.ReplayID, o.Events, o.WorkItems)
		if o.Skipped > 0 {
			fmt.Fprintf(out.env.Stdout, " (%d selected events skipped)", o.Skipped)
		}
		fmt.Fprintln(out.env.Stdout)
	}
	switch {
	case req.WaitSeconds == 0:
		return out.final(o, false, "")
	case !resp.Replay.Done:
		return out.final(o, false, fmt.Sprintf("still processing after %s", time.Duration(req.WaitSeconds)*time.Second))
	}
	return out.final(o, true, "")
}

// replayOutput prints the progress to stderr (one line rewritten in
// place on a terminal, a line per change otherwise) and the outcome to
// stdout.
type replayOutput struct {
	env    *Env
	format string
	tty    bool

	mu      sync.Mutex
	pending bool // a progress line without its newline is on the terminal
}

func (o *replayOutput) line(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.tty {
		fmt.Fprintf(o.env.Stderr, "\r\033[K%s", s)
		o.pending = true
		return
	}
	fmt.Fprintln(o.env.Stderr, s)
}

// endLine ends a progress line left open on a terminal.
func (o *replayOutput) endLine() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.pending {
		fmt.Fprintln(o.env.Stderr)
		o.pending = false
	}
}

func (o *replayOutput) selecting(p replay.Progress) {
	o.line(fmt.Sprintf("reading stored events: %d read, %d selected (%d work items), %d skipped", p.Scanned, p.Events, p.WorkItems, p.Skipped))
}

func (o *replayOutput) processing(p replay.Outcome) {
	o.line(fmt.Sprintf("replay %d: %d of %d work items settled (applied %d, duplicate %d, stale %d, superseded %d, dead-lettered %d; effects created %d)",
		p.ReplayID, p.Settled, p.WorkItems, p.Applied, p.Duplicate, p.Stale, p.Superseded, p.DeadLettered, p.EffectsCreated))
}

// final prints the outcome and returns the exit code: 0 when done or
// when not waiting, 1 when waiting stopped early (why says why).
func (o *replayOutput) final(out replay.Outcome, done bool, why string) int {
	w := o.env.Stdout
	code := exitOK
	if why != "" {
		code = exitFail
		fmt.Fprintf(o.env.Stderr, "hookledger replay: %s: %d of %d work items settled; the replay goes on (follow it with 'hookledger tail')\n",
			why, out.Settled, out.WorkItems)
	}
	if o.format == "json" {
		writeJSONOut(w, map[string]api.ReplayJSON{"replay": {Outcome: out, Done: done}})
		return code
	}
	if why == "" && !done {
		return code // enqueued only: the enqueued line said it all
	}
	state := "done"
	if !done {
		state = "so far"
	}
	fmt.Fprintf(w, "replay %d %s: %d of %d work items settled\n", out.ReplayID, state, out.Settled, out.WorkItems)
	rows := []struct {
		name string
		n    int
		note string
	}{
		{"applied", out.Applied, ""},
		{"duplicate", out.Duplicate, "already applied with the same state"},
		{"stale", out.Stale, "older than the applied version"},
		{"superseded", out.Superseded, ""},
		{"dead-lettered", out.DeadLettered, "see the audit trail for the reasons"},
		{"effects created", out.EffectsCreated, "effects already in the ledger are never created twice"},
		{"skipped", out.Skipped, "selected events still pending their first processing, or whose route cannot be computed"},
	}
	if out.Other > 0 {
		rows = append(rows, struct {
			name string
			n    int
			note string
		}{"other", out.Other, "dispositions this version does not know"})
	}
	width := 1
	for _, r := range rows {
		width = max(width, len(strconv.Itoa(r.n)))
	}
	for _, r := range rows {
		line := fmt.Sprintf("  %-16s %*d", r.name, width, r.n)
		if r.n > 0 && r.note != "" {
			line += "  (" + r.note + ")"
		}
		fmt.Fprintln(w, line)
	}
	return code
}

// stallTimer prints a hint once when no progress came for a while.
type stallTimer struct {
	t     *time.Timer
	after time.Duration
}

func (o *replayOutput) stallHint(after time.Duration) *stallTimer {
	return &stallTimer{after: after, t: time.AfterFunc(after, func() {
		o.endLine()
		o.mu.Lock()
		defer o.mu.Unlock()
		fmt.Fprintf(o.env.Stderr, "no work item settled for %s: is 'hookledger serve' running on this store?\n", after)
	})}
}

func (s *stallTimer) reset() { s.t.Reset(s.after) }
func (s *stallTimer) stop()  { s.t.Stop() }

// stderrTerminal reports whether stderr is a terminal, where progress is
// rewritten in place.
func stderrTerminal(env *Env) bool {
	f, ok := env.Stderr.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

// storeName names the store for messages, without a password.
func storeName(cfg *config.Config) string {
	if p, ok := strings.CutPrefix(cfg.Store, "sqlite:"); ok {
		return p
	}
	return storeopen.Redact(cfg.Store)
}

func hasFlow(cfg *config.Config, name string) bool {
	for _, f := range cfg.Flows {
		if f.Name == name {
			return true
		}
	}
	return false
}
