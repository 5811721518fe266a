package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

var checkCommand = &command{
	name:    "check",
	summary: "audit the store's invariants offline (exit 1 on any violation)",
	run:     runCheck,
}

const checkDescription = `Audits the invariants of the configured store on one consistent read-only
snapshot, without taking the write lock, so it can run beside 'hookledger serve':

  event_pending       every accepted event is terminal or visibly pending
                      (not routed yet, or with a pending work item)
  episode_key_once    no episode key is held by two effects
  done_evidence       every done effect has a successful attempt, a lookup
                      that answered, or the audit row of the reconciliation
                      that settled it
  projection_version  every projection holds the version its newest applied
                      work item applied
  effect_event        every effect's source event exists
  effect_state        every effect's state is one of the effect states

The store is opened read-only: a copy in a read-only directory can be
checked, and a database that is not there is never created.

Prints one line per violation (at most --limit per invariant) and a summary
per invariant. Exit 0 when every invariant holds, 1 on any violation (or when
the store cannot be read), 2 on a usage or configuration error or when there
is no database at the configured store.`

// checkOutput is the JSON form.
type checkOutput struct {
	Findings []checkFinding   `json:"findings"`
	Counts   map[string]int64 `json:"counts"`
	OK       bool             `json:"ok"`
}

type checkFinding struct {
	Invariant string `json:"invariant"`
	Subject   string `json:"subject"`
	Detail    string `json:"detail"`
}

func runCheck(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "check", "check [--config FILE] [--format text|json] [--limit N]", checkDescription)
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	format := fs.String("format", "text", "output `format`: text or json")
	limit := fs.Int("limit", 100, "report at most `N` violations per invariant (1 to 1000); counts stay exact")
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	if code, ok := checkArgs(env, "check", fs.Args(), format); !ok {
		return code
	}
	if *limit < 1 || *limit > 1000 {
		fmt.Fprintf(env.Stderr, "hookledger check: --limit %d: want 1 to 1000\n", *limit)
		return exitUsage
	}
	cfg, code := loadOperatorConfig(env, "check", *cfgPath)
	if cfg == nil {
		return code
	}
	st, code := openOperatorStore(ctx, env, "check", cfg, readStore)
	if st == nil {
		return code
	}
	defer st.Close()
	res, err := st.InvariantCheck(ctx, &store.InvariantCheckParams{Limit: *limit})
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger check: %v\n", err)
		return exitFail
	}
	out := checkOutput{Findings: []checkFinding{}, Counts: map[string]int64{}, OK: true}
	for _, name := range store.Invariants() {
		out.Counts[name] = res.Counts[name]
		if res.Counts[name] > 0 {
			out.OK = false
		}
	}
	for _, f := range res.Findings {
		out.Findings = append(out.Findings, checkFinding{Invariant: f.Invariant, Subject: f.Subject, Detail: f.Detail})
	}
	if *format == "json" {
		if code := writeJSONOut(env.Stdout, out); code != exitOK {
			return code
		}
	} else {
		writeCheckText(env, res, out)
	}
	if !out.OK {
		return exitFail
	}
	return exitOK
}

func writeCheckText(env *Env, res *store.InvariantCheckResult, out checkOutput) {
	for _, f := range res.Findings {
		fmt.Fprintf(env.Stdout, "%s: %s: %s\n", f.Invariant, safe(f.Subject), safe(f.Detail))
	}
	if len(res.Findings) > 0 {
		fmt.Fprintln(env.Stdout)
	}
	shown := map[string]int{}
	for _, f := range res.Findings {
		shown[f.Invariant]++
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	for _, name := range store.Invariants() {
		n := out.Counts[name]
		switch {
		case n == 0:
			fmt.Fprintf(tw, "%s\tok\n", name)
		case int64(shown[name]) < n:
			fmt.Fprintf(tw, "%s\t%s (%d listed)\n", name, violations(n), shown[name])
		default:
			fmt.Fprintf(tw, "%s\t%s\n", name, violations(n))
		}
	}
	tw.Flush()
}

func violations(n int64) string {
	if n == 1 {
		return "1 violation"
	}
	return fmt.Sprintf("%d violations", n)
}
