package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/replay"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

func init() {
	register(&command{
		name:    "replay",
		summary: "re-run processing for stored events (same identities, no duplicate effects)",
		run:     runReplay,
	})
}

func runReplay(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "replay", "replay --config FILE [--source S] [--flow F] [--entity E] [--from TIME] [--to TIME] [--actor NAME]",
		"Enqueues a replay of the stored events selected by source, flow, entity and\n"+
			"receipt time (RFC 3339; --from inclusive, --to exclusive). The events keep their\n"+
			"identities and pass the same revision guard and effect ledger again: effects\n"+
			"already in the ledger are not created twice, applied events stay applied, and\n"+
			"dead-lettered ones are repaired once their cause is fixed. A running\n"+
			"'hookledger serve' on the same store processes the replay.")
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	source := fs.String("source", "", "only events of this `source`")
	flowName := fs.String("flow", "", "only into this `flow`")
	entity := fs.String("entity", "", "only this `entity`")
	from := fs.String("from", "", "received at or after this `time` (RFC 3339)")
	to := fs.String("to", "", "received before this `time` (RFC 3339)")
	actor := fs.String("actor", "", "who replays (default operator:$USER)")
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(env.Stderr, "hookledger replay: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	sel := replay.Selection{Source: *source, Flow: *flowName, Entity: *entity}
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"--from", *from, &sel.From}, {"--to", *to, &sel.To}} {
		if t.v == "" {
			continue
		}
		parsed, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			fmt.Fprintf(env.Stderr, "hookledger replay: %s %q: want an RFC 3339 time such as 2026-11-03T09:00:00Z\n", t.name, t.v)
			return exitUsage
		}
		*t.dst = parsed
	}
	sel.Actor = operatorActor(env, *actor)
	cfg, code := loadConfig(env, "replay", *cfgPath)
	if cfg == nil {
		return code
	}
	if sel.Flow != "" && !hasFlow(cfg, sel.Flow) {
		fmt.Fprintf(env.Stderr, "hookledger replay: --flow %q: no such flow in %s\n", sel.Flow, *cfgPath)
		return exitUsage
	}
	st, err := storeopen.Open(ctx, cfg.Store)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger replay: %v\n", err)
		return exitFail
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		fmt.Fprintf(env.Stderr, "hookledger replay: %v\n", err)
		return exitFail
	}
	// The engine only computes routes here; it never starts processing.
	engine := flow.New(cfg, st, flow.Options{})
	res, err := replay.Run(ctx, st, engine, sel, time.Now().UTC())
	if errors.Is(err, replay.ErrNothingSelected) {
		fmt.Fprintln(env.Stderr, "hookledger replay: the selection matches no stored event of any flow")
		return exitFail
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger replay: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(env.Stdout, "replay %d enqueued: %d events, %d work items\n", res.ReplayID, res.Events, res.WorkItems)
	return exitOK
}

func hasFlow(cfg *config.Config, name string) bool {
	for _, f := range cfg.Flows {
		if f.Name == name {
			return true
		}
	}
	return false
}
