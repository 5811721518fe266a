package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

func init() {
	register(&command{
		name:    "effects",
		summary: "list, inspect, retry and resolve effects (the exception queue)",
		run:     runEffects,
	})
}

const effectsUsage = `effects list    [--config FILE] [--state STATE] [--flow F] [--entity E] [--limit N] [--format text|json]
       hookledger effects show    [--config FILE] [--format text|json] ID
       hookledger effects retry   [--config FILE] --note TEXT [--actor NAME] ID
       hookledger effects resolve [--config FILE] --note TEXT [--actor NAME] ID
       hookledger effects assign  [--config FILE] --owner NAME [--actor NAME] ID`

const effectsDescription = `Works on the effect ledger of the configured store.

  list     effects in the exception queue (state dead or needs_reconciliation)
           by default; --state any, or one state, lists others
  show     one effect with its reason, suggested repair and every attempt
  retry    put a dead or needs_reconciliation effect back to approved
  resolve  close an effect by hand (a person decided); --note is required
  assign   name who owns the repair

Every action is written to the audit trail with the actor and the note.`

// effectsStore is what the verb needs from the store.
type effectsStore interface {
	EffectList(ctx context.Context, p *store.EffectListParams) ([]*store.Effect, error)
	EffectGet(ctx context.Context, id int64) (*store.Effect, error)
	EffectOperate(ctx context.Context, p *store.EffectOperateParams) (*store.Effect, error)
	AttemptList(ctx context.Context, effectID int64) ([]*store.Attempt, error)
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
	state := fs.String("state", "exceptions", "`state` to list: exceptions, any, or one effect state")
	flowName := fs.String("flow", "", "only this `flow`")
	entity := fs.String("entity", "", "only this `entity`")
	limit := fs.Int("limit", 100, "at most `N` effects")
	note := fs.String("note", "", "why (required for resolve and retry)")
	owner := fs.String("owner", "", "who owns the repair (assign)")
	actor := fs.String("actor", "", "who acts (default operator:$USER)")
	ids, code, ok := parseInterspersed(env, fs, rest)
	if !ok {
		return code
	}
	if *format != "text" && *format != "json" {
		fmt.Fprintf(env.Stderr, "hookledger effects: --format %q: want text or json\n", *format)
		return exitUsage
	}
	who := operatorActor(env, *actor)
	var id int64
	switch sub {
	case "list":
		if len(ids) != 0 {
			fmt.Fprintf(env.Stderr, "hookledger effects list: unexpected argument %q\n", ids[0])
			return exitUsage
		}
	case "show", "retry", "resolve", "assign":
		if len(ids) != 1 {
			fmt.Fprintf(env.Stderr, "hookledger effects %s: expected one effect ID\n", sub)
			return exitUsage
		}
		n, err := strconv.ParseInt(ids[0], 10, 64)
		if err != nil || n <= 0 {
			fmt.Fprintf(env.Stderr, "hookledger effects %s: %q is not an effect ID (a positive number)\n", sub, ids[0])
			return exitUsage
		}
		id = n
	default:
		fmt.Fprintf(env.Stderr, "hookledger effects: unknown action %q (list, show, retry, resolve, assign)\n", sub)
		return exitUsage
	}
	if (sub == "resolve" || sub == "retry") && strings.TrimSpace(*note) == "" {
		fmt.Fprintf(env.Stderr, "hookledger effects %s: --note is required: say what was checked or repaired\n", sub)
		return exitUsage
	}
	if sub == "assign" && *owner == "" {
		fmt.Fprintln(env.Stderr, "hookledger effects assign: --owner is required")
		return exitUsage
	}

	cfg, code := loadConfig(env, "effects", *cfgPath)
	if cfg == nil {
		return code
	}
	opened, err := storeopen.Open(ctx, cfg.Store)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects: %v\n", err)
		return exitFail
	}
	defer opened.Close()
	if _, err := opened.Migrate(ctx); err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects: %v\n", err)
		return exitFail
	}
	var st effectsStore = opened

	switch sub {
	case "list":
		return effectsList(ctx, env, st, *state, *flowName, *entity, *limit, *format)
	case "show":
		return effectsShow(ctx, env, st, id, *format)
	}
	action := map[string]string{"retry": store.OperateRetry, "resolve": store.OperateResolve, "assign": store.OperateAssign}[sub]
	e, err := st.EffectOperate(ctx, &store.EffectOperateParams{EffectID: id, Action: action, Actor: who, Owner: *owner, Note: *note, Now: time.Now().UTC()})
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects %s %d: %v\n", sub, id, err)
		return exitFail
	}
	fmt.Fprintf(env.Stdout, "effect %d (%s) is now %s\n", e.ID, e.EpisodeKey, e.State)
	return exitOK
}

func effectsList(ctx context.Context, env *Env, st effectsStore, state, flowName, entity string, limit int, format string) int {
	var states []store.EffectState
	switch state {
	case "exceptions":
		states = []store.EffectState{store.EffectDead, store.EffectNeedsReconciliation}
	case "any":
		states = []store.EffectState{""}
	default:
		states = []store.EffectState{store.EffectState(state)}
	}
	var all []*store.Effect
	for _, s := range states {
		es, err := st.EffectList(ctx, &store.EffectListParams{Flow: flowName, Entity: entity, State: s, Limit: limit})
		if err != nil {
			fmt.Fprintf(env.Stderr, "hookledger effects list: %v\n", err)
			return exitFail
		}
		all = append(all, es...)
	}
	if format == "json" {
		out := struct {
			Effects []api.EffectJSON `json:"effects"`
		}{Effects: []api.EffectJSON{}}
		for _, e := range all {
			out.Effects = append(out.Effects, api.NewEffectJSON(e))
		}
		return writeJSONOut(env.Stdout, out)
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tCLASS\tATTEMPTS\tEPISODE\tDESTINATION\tOWNER\tREASON")
	for _, e := range all {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.ID, e.State, dash(string(e.ErrorClass)), e.Attempts, e.EpisodeKey, e.Destination, dash(e.Owner), dash(e.Reason))
	}
	_ = tw.Flush()
	if len(all) == 0 {
		fmt.Fprintln(env.Stdout, "(no effects)")
	}
	return exitOK
}

func effectsShow(ctx context.Context, env *Env, st effectsStore, id int64, format string) int {
	e, err := st.EffectGet(ctx, id)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects show: %v\n", err)
		return exitFail
	}
	if e == nil {
		fmt.Fprintf(env.Stderr, "hookledger effects show: no effect %d\n", id)
		return exitFail
	}
	atts, err := st.AttemptList(ctx, id)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger effects show: %v\n", err)
		return exitFail
	}
	if format == "json" {
		out := struct {
			Effect   api.EffectJSON    `json:"effect"`
			Attempts []api.AttemptJSON `json:"attempts"`
		}{Effect: api.NewEffectJSON(e), Attempts: []api.AttemptJSON{}}
		for _, a := range atts {
			out.Attempts = append(out.Attempts, api.NewAttemptJSON(a))
		}
		return writeJSONOut(env.Stdout, out)
	}
	w := env.Stdout
	fmt.Fprintf(w, "effect %d  %s\n", e.ID, e.EpisodeKey)
	fmt.Fprintf(w, "  state        %s\n  destination  %s\n  attempts     %d (re-drives %d)\n", e.State, e.Destination, e.Attempts, e.Redrives)
	fmt.Fprintf(w, "  source event %s/%s\n", e.Source, e.SourceEventID)
	for _, kv := range [][2]string{{"class", string(e.ErrorClass)}, {"reason", e.Reason}, {"repair", e.SuggestedRepair},
		{"owner", e.Owner}, {"note", e.Note}, {"dest. ref", e.DestinationRef}} {
		if kv[1] != "" {
			fmt.Fprintf(w, "  %-12s %s\n", kv[0], kv[1])
		}
	}
	if !e.NextAttemptAt.IsZero() {
		fmt.Fprintf(w, "  next         %s\n", e.NextAttemptAt.Format(time.RFC3339))
	}
	fmt.Fprintf(w, "  request      %s\n", e.Request)
	if e.LastResponse != "" {
		fmt.Fprintf(w, "  last answer  %s\n", e.LastResponse)
	}
	fmt.Fprintln(w, "\nattempts:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tSTARTED\tMS\tSTATUS\tCLASS\tRETRY-AFTER\tWAIT\tNOTE")
	for _, a := range atts {
		ra := "-"
		if a.RetryAfter != "" {
			ra = a.RetryAfter + " (" + a.RetryAfterUnit + ")"
		}
		noteText := a.Error
		if a.Reconcile {
			noteText = "lookup: " + noteText
		}
		fmt.Fprintf(tw, "  %d\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", a.Number, a.StartedAt.Format(time.RFC3339), a.Duration.Milliseconds(),
			a.Status, dash(string(a.Class)), ra, a.Wait, dash(noteText))
	}
	_ = tw.Flush()
	return exitOK
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
// name as operator:$USER.
func operatorActor(env *Env, flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	u := "unknown"
	if env.Getenv != nil && env.Getenv("USER") != "" {
		u = env.Getenv("USER")
	}
	return "operator:" + u
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
