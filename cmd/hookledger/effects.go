package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os/user"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/bodyview"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

var effectsCommand = &command{
	name:    "effects",
	summary: "list, inspect, retry and resolve effects (the exception queue)",
	run:     runEffects,
}

const effectsUsage = `effects list    [--config FILE] [--state STATE] [--flow F] [--entity E] [--destination D]
                          [--owner O] [--class C] [--created-from T] [--created-to T]
                          [--updated-from T] [--updated-to T] [--limit N] [--cursor C] [--format text|json]
       hookledger effects show    [--config FILE] [--format text|json | --request] ID
       hookledger effects retry   [--config FILE] --note TEXT [--actor NAME] ID
       hookledger effects resolve [--config FILE] --note TEXT [--actor NAME] ID
       hookledger effects assign  [--config FILE] --owner NAME [--actor NAME] ID
       hookledger effects compensate [--config FILE] --note TEXT [--actor NAME] [--format text|json] ID`

const effectsDescription = `Works on the effect ledger of the configured store.

  list     the exception queue by default: effects in state dead or
           needs_reconciliation, oldest first. --state any lists every
           state (as GET /api/v1/effects does when it is given no state);
           --state takes one state or several separated by commas. The
           other filters narrow the list; times are RFC 3339
           (2026-11-03T09:00:00Z), from inclusive, to exclusive. At most
           --limit effects are listed (1 to 1000); when there are more, a
           last line on stderr gives the --cursor for the next page.
  show     one effect with the idempotency key its destination is sent,
           its reason, suggested repair, every attempt and its request:
           indented when it is JSON of at most 64 KiB nested at most 32
           deep, else as stored and cut at 64 KiB, with a note.
           --request prints the request alone, exactly as stored (the
           configured store only: the admin API does not serve requests)
  retry    put a dead or needs_reconciliation effect back to approved
  resolve  close an effect by hand (a person decided); --note is required
  assign   name who owns the repair; the effect's state does not change
  compensate
           undo a done, acknowledged or resolved effect: creates its
           compensation (episode key <key>:compensate) from the
           compensation: request of its effect in the config, delivered
           like any effect; at most once per effect; --note is required

Every action is written to the audit trail with the actor and the note.`

// effectsStore is what the verb needs from the store.
type effectsStore interface {
	EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error)
	EffectGet(ctx context.Context, id int64) (*store.Effect, error)
	EffectOperate(ctx context.Context, p *store.EffectOperateParams) (*store.Effect, error)
	AttemptList(ctx context.Context, effectID int64) ([]*store.Attempt, error)
	EffectCompensate(ctx context.Context, p *store.EffectCompensateParams) (*store.Effect, error)
	// idempotencyKey is the key e's destination is sent in its
	// idempotency header, "" when it has none: the store's side works it
	// out from the config, the server's reads it from its answers.
	idempotencyKey(e *store.Effect) string
}

// effectJSON renders an effect with the idempotency key its destination
// is sent.
func effectJSON(st effectsStore, e *store.Effect) api.EffectJSON {
	j := api.NewEffectJSON(e)
	j.IdempotencyKey = st.idempotencyKey(e)
	return j
}

func runEffects(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := env.Stdout
		code := exitOK
		if len(args) == 0 {
			w, code = env.Stderr, exitUsage
		}
		fmt.Fprintf(w, "Usage: hookledger %s\n\n%s\n", effectsUsage, effectsDescription)
		return code
	}
	sub, rest := args[0], args[1:]
	fs := newFlagSet(env, "effects "+sub, effectsUsage, effectsDescription)
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	format := fs.String("format", "text", "output `format`: text or json")
	// The list's filters are the API's query parameters, read by the same
	// code: each flag is the parameter's name with - for _.
	filters := map[string]*string{}
	for _, name := range api.EffectParams {
		if name == "limit" || name == "owner" { // declared below: they serve other actions too
			continue
		}
		filters[name] = fs.String(paramFlag(name), "", effectFlagHelp[name])
	}
	limit := fs.Int("limit", api.DefaultLimit, fmt.Sprintf("at most `N` effects (1 to %d)", api.MaxLimit))
	note := fs.String("note", "", "why (required for resolve, retry and compensate)")
	owner := fs.String("owner", "", "who owns the repair (assign); with list, only effects this person owns")
	actor := fs.String("actor", "", "who acts (default operator:$USER)")
	server := fs.String("server", "", serverFlagUsage)
	rawRequest := fs.Bool("request", false, "with show: print the effect's request alone, exactly as stored")
	ids, code, ok := parseInterspersed(env, fs, rest)
	if !ok {
		return code
	}
	if code, ok := checkArgs(env, "effects", nil, format); !ok {
		return code
	}
	who := operatorActor(env, *actor)
	var id int64
	var list *store.EffectListParams
	if sub == "list" {
		if list, code, ok = effectsListFilter(env, ids, filters, *limit, *owner); !ok {
			return code
		}
	} else if id, code, ok = effectsTarget(env, sub, ids); !ok {
		return code
	}
	if !effectsFlagsFit(env, sub, *rawRequest, requestFlagConflict(sub, *server, flagGiven(fs, "format")), *note, *owner) {
		return exitUsage
	}

	access := writeStore
	if sub == "list" || sub == "show" {
		access = readStore
	}
	st, closeStore, code := openEffects(ctx, env, fs, *server, *cfgPath, access)
	if st == nil {
		return code
	}
	defer closeStore()

	switch sub {
	case "list":
		return effectsList(ctx, env, st, list, *format)
	case "show":
		if *rawRequest {
			return effectsRequest(ctx, env, st, id)
		}
		return effectsShow(ctx, env, st, id, *format)
	case "compensate":
		return effectsCompensate(ctx, env, st, id, who, *note, *format)
	}
	return effectsOperate(ctx, env, st, sub, &store.EffectOperateParams{EffectID: id, Actor: who, Owner: *owner, Note: *note})
}

// effectsFlagsFit refuses flags the action cannot take with the others
// (conflict: what --request conflicts with, if anything) and the ones it
// requires; false means a usage error was printed.
func effectsFlagsFit(env *Env, sub string, rawRequest bool, conflict, note, owner string) bool {
	if rawRequest && conflict != "" {
		fmt.Fprintf(env.Stderr, "hookledger effects %s: --request %s\n", sub, conflict)
		return false
	}
	if (sub == "resolve" || sub == "retry" || sub == "compensate") && strings.TrimSpace(note) == "" {
		fmt.Fprintf(env.Stderr, "hookledger effects %s: --note is required: say what was checked or repaired\n", sub)
		return false
	}
	if sub == "assign" && owner == "" {
		fmt.Fprintln(env.Stderr, "hookledger effects assign: --owner is required")
		return false
	}
	return true
}

// effectsListFilter reads the list's filter flags the way the API reads
// its query parameters, so that both refuse the same values.
func effectsListFilter(env *Env, ids []string, filters map[string]*string, limit int, owner string) (*store.EffectListParams, int, bool) {
	if code, ok := checkArgs(env, "effects list", ids, nil); !ok {
		return nil, code, false
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}, "owner": {owner}}
	for name, v := range filters {
		q.Set(name, *v)
	}
	p, err := api.EffectFilter(q, api.StateExceptions)
	var pe *api.ParamError
	if errors.As(err, &pe) {
		fmt.Fprintf(env.Stderr, "hookledger effects list: --%s: %s\n", paramFlag(pe.Param), flagWords.Replace(safe(pe.Msg)))
		return nil, exitUsage, false
	}
	// Neither the table nor the JSON shows requests.
	p.WithoutRequest = true
	return p, 0, true
}

// effectsTarget reads the one effect ID that every action but list takes,
// and refuses an unknown action.
func effectsTarget(env *Env, sub string, ids []string) (int64, int, bool) {
	switch sub {
	case "show", "retry", "resolve", "assign", "compensate":
		if len(ids) != 1 {
			fmt.Fprintf(env.Stderr, "hookledger effects %s: expected one effect ID\n", sub)
			return 0, exitUsage, false
		}
		n, err := strconv.ParseInt(ids[0], 10, 64)
		if err != nil || n <= 0 {
			fmt.Fprintf(env.Stderr, "hookledger effects %s: %q is not an effect ID (a positive number)\n", sub, ids[0])
			return 0, exitUsage, false
		}
		return n, 0, true
	}
	fmt.Fprintf(env.Stderr, "hookledger effects: unknown action %q (list, show, retry, resolve, assign, compensate)\n", sub)
	return 0, exitUsage, false
}

// effectsOperate carries out retry, resolve or assign (sub) on one effect
// and says where the effect stands after it.
func effectsOperate(ctx context.Context, env *Env, st effectsStore, sub string, p *store.EffectOperateParams) int {
	p.Action = map[string]string{"retry": store.OperateRetry, "resolve": store.OperateResolve, "assign": store.OperateAssign}[sub]
	p.Now = storeNow(ctx, env, st)
	e, err := st.EffectOperate(ctx, p)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects %s %d: %s\n", sub, p.EffectID, safe(err.Error()))
		return exitFail
	}
	if sub == "assign" {
		// Assigning changes who owns the repair, not where the effect is.
		fmt.Fprintf(env.Stdout, "effect %d (%s) is now owned by %s; its state stays %s\n", e.ID, safe(e.EpisodeKey), safe(e.Owner), safe(string(e.State)))
		return exitOK
	}
	fmt.Fprintf(env.Stdout, "effect %d (%s) is now %s\n", e.ID, safe(e.EpisodeKey), safe(string(e.State)))
	return exitOK
}

// effectFlagHelp documents the list's filter flags.
var effectFlagHelp = map[string]string{
	"state":           "`state` to list: exceptions (the default: dead and needs_reconciliation), any, or states separated by commas",
	"flow":            "only this `flow`",
	"entity":          "only this `entity`",
	"destination":     "only calls to this `destination`",
	"class":           "only this error `class` (transient, quota, contention, permanent, unknown_outcome, hidden_failure)",
	"created_from":    "only effects created at or after `time` (RFC 3339)",
	"created_to":      "only effects created before `time` (RFC 3339)",
	"updated_from":    "only effects last changed at or after `time` (RFC 3339)",
	"updated_to":      "only effects last changed before `time` (RFC 3339)",
	"deadline_missed": "`true`: only effects whose business deadline was missed and escalated",
	"compensations":   "`true`: only compensation effects",
	"cursor":          "the `cursor` printed by the previous page",
}

// paramFlag is the flag that sets a query parameter: created_from is
// --created-from.
func paramFlag(param string) string { return strings.ReplaceAll(param, "_", "-") }

// flagWords rewrites the parameter names in a message as flags.
var flagWords = func() *strings.Replacer {
	var pairs []string
	for _, p := range api.EffectParams {
		if strings.Contains(p, "_") {
			pairs = append(pairs, p, "--"+paramFlag(p))
		}
	}
	return strings.NewReplacer(pairs...)
}()

func effectsList(ctx context.Context, env *Env, st effectsStore, p *store.EffectListParams, format string) int {
	// One row more than asked tells whether a next page exists.
	limit := p.Limit
	p.Limit++
	all, err := st.EffectList(ctx, p)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects list: %s\n", safe(err.Error()))
		return exitFail
	}
	next := ""
	if len(all) > limit {
		all = all[:limit]
		next = api.EncodeCursor(all[limit-1].ID)
	}
	if format == "json" {
		out := struct {
			Effects    []api.EffectJSON `json:"effects"`
			NextCursor string           `json:"next_cursor,omitempty"`
		}{Effects: []api.EffectJSON{}, NextCursor: next}
		for _, e := range all {
			out.Effects = append(out.Effects, effectJSON(st, e))
		}
		return writeJSONOut(env.Stdout, out)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tCLASS\tATTEMPTS\tEPISODE\tDESTINATION\tOWNER\tREASON")
	for _, e := range all {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.ID, safe(string(e.State)), dash(string(e.ErrorClass)), e.Attempts,
			safe(e.EpisodeKey), safe(e.Destination), dash(e.Owner), dash(e.Reason))
	}
	_ = tw.Flush()
	if len(all) == 0 {
		fmt.Fprintln(env.Stdout, "(no effects)")
	}
	if next != "" {
		fmt.Fprintf(env.Stderr, "more: run again with --cursor %s\n", next)
	}
	return exitOK
}

func effectsShow(ctx context.Context, env *Env, st effectsStore, id int64, format string) int {
	e, err := st.EffectGet(ctx, id)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects show: %s\n", safe(err.Error()))
		return exitFail
	}
	if e == nil {
		fmt.Fprintf(env.Stderr, "hookledger effects show: no effect %d\n", id)
		return exitFail
	}
	atts, err := st.AttemptList(ctx, id)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects show: %s\n", safe(err.Error()))
		return exitFail
	}
	if format == "json" {
		out := struct {
			Effect   api.EffectJSON    `json:"effect"`
			Attempts []api.AttemptJSON `json:"attempts"`
		}{Effect: effectJSON(st, e), Attempts: []api.AttemptJSON{}}
		for _, a := range atts {
			out.Attempts = append(out.Attempts, api.NewAttemptJSON(a))
		}
		return writeJSONOut(env.Stdout, out)
	}
	w := env.Stdout
	fmt.Fprintf(w, "effect %d  %s\n", e.ID, safe(e.EpisodeKey))
	if key := st.idempotencyKey(e); key != "" {
		// What the destination's dashboard shows for this effect.
		fmt.Fprintf(w, "  idem. key    %s\n", safe(key))
	}
	fmt.Fprintf(w, "  state        %s\n  destination  %s\n  attempts     %s\n", safe(string(e.State)), safe(e.Destination), attemptsLine(e, atts))
	fmt.Fprintf(w, "  source event %s/%s\n", safe(e.Source), safe(e.SourceEventID))
	for _, kv := range [][2]string{{"class", string(e.ErrorClass)}, {"reason", e.Reason}, {"repair", e.SuggestedRepair},
		{"owner", e.Owner}, {"note", e.Note}, {"dest. ref", e.DestinationRef}} {
		if kv[1] != "" {
			fmt.Fprintf(w, "  %-12s %s\n", kv[0], safe(kv[1]))
		}
	}
	if e.Compensates != 0 {
		fmt.Fprintf(w, "  compensates  effect %d\n", e.Compensates)
	}
	if !e.NextAttemptAt.IsZero() {
		fmt.Fprintf(w, "  next         %s\n", e.NextAttemptAt.Format(time.RFC3339))
	}
	writeRequest(w, e)
	if e.LastResponse != "" {
		fmt.Fprintf(w, "  last answer  %s\n", safe(e.LastResponse))
	}
	fmt.Fprintln(w, "\nattempts:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tSTARTED\tMS\tSTATUS\tCLASS\tRETRY-AFTER\tWAIT\tNOTE")
	for _, a := range atts {
		ra := "-"
		if a.RetryAfter != "" {
			ra = safe(a.RetryAfter + " (" + a.RetryAfterUnit + ")")
		}
		noteText := a.Error
		if a.Reconcile {
			noteText = "lookup: " + noteText
		}
		if a.Restart != "" {
			noteText = strings.TrimSuffix("restarted by "+a.Restart+"; "+noteText, "; ")
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", a.Number, a.StartedAt.Format(time.RFC3339), a.Duration.Milliseconds(),
			a.Status, attemptClass(a.Class), ra, a.Wait, dash(noteText))
	}
	_ = tw.Flush()
	return exitOK
}

// requestFlagConflict says why --request cannot go with this call, or "".
func requestFlagConflict(sub, server string, formatGiven bool) string {
	switch {
	case sub != "show":
		return "goes with show only"
	case server != "":
		return "reads the configured store: it prints the stored bytes exactly, which a JSON answer " +
			"cannot carry (drop --server; show --server prints the request as the API answers it)"
	case formatGiven:
		return "prints the request alone: give --format or --request, not both"
	}
	return ""
}

// effectsRequest prints an effect's request exactly as the store holds
// it, and nothing else, for a file or a JSON tool.
func effectsRequest(ctx context.Context, env *Env, st effectsStore, id int64) int {
	e, err := st.EffectGet(ctx, id)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects show: %s\n", safe(err.Error()))
		return exitFail
	}
	if e == nil {
		fmt.Fprintf(env.Stderr, "hookledger effects show: no effect %d\n", id)
		return exitFail
	}
	if _, err := env.Stdout.Write(e.Request); err != nil {
		return exitFail
	}
	return exitOK
}

// writeRequest prints an effect's request as the console shows it
// (package bodyview): indented when it is small and shallow JSON, else as
// stored and cut at 64 KiB, with a note saying so; --request prints it
// whole. Each line is indented under the label, control characters
// escaped. Through the admin API there is no request to show.
func writeRequest(w io.Writer, e *store.Effect) {
	v := bodyview.Render(e.Request)
	note := ""
	switch {
	case v.Cut():
		note = fmt.Sprintf("cut: the first %d of %d bytes are shown", v.Shown, v.Size)
		if v.Reason != "" {
			note += ", as stored (not pretty-printed: " + v.Reason + ")"
		}
		note += fmt.Sprintf("; the whole request: hookledger effects show --request %d", e.ID)
	case v.Reason != "":
		note = "shown as stored, not pretty-printed: " + v.Reason
	}
	if note == "" {
		fmt.Fprintln(w, "  request")
	} else {
		fmt.Fprintf(w, "  request      %s\n", note)
	}
	fmt.Fprintf(w, "    %s\n", strings.ReplaceAll(termSafe(v.Text), "\n", "\n    "))
}

// attemptClass names an attempt's outcome: its error class, or success
// when the call was classified as no failure at all.
func attemptClass(c store.ErrorClass) string {
	if c == store.ClassNone {
		return "success"
	}
	return safe(string(c))
}

func writeJSONOut(w io.Writer, v any) int {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return exitFail
	}
	return exitOK
}

// operatorActor names who acts in the audit trail: --actor, or the login
// name as operator:$USER, else as the OS user the process runs as.
func operatorActor(env *Env, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if env.Getenv != nil && env.Getenv("USER") != "" {
		return "operator:" + env.Getenv("USER")
	}
	// cron and systemd set no $USER: the account the process runs as
	// still says who acted.
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "operator:" + u.Username
	}
	return "operator:unknown"
}

// dash prints text for a table cell: made safe, and "-" when empty.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return safe(s)
}

// attemptsLine counts an effect's calls across every restart of its retry
// count (an operator's retry, a re-drive), as its attempt rows number
// them, then the calls since the last restart when they differ, and the
// re-drives.
func attemptsLine(e *store.Effect, atts []*store.Attempt) string {
	calls := e.Calls
	for _, a := range atts {
		if !a.Reconcile {
			calls = max(calls, a.Number)
		}
	}
	calls = max(calls, e.Attempts)
	out := fmt.Sprint(calls)
	if calls != e.Attempts {
		out += fmt.Sprintf(" (%d since the last restart)", e.Attempts)
	}
	return out + fmt.Sprintf(", re-drives %d", e.Redrives)
}
