package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/mattn/go-isatty"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/lint"
	"github.com/hookledger/hookledger/internal/senderkind"
)

var lintCommand = &command{
	name:    "lint",
	summary: "check an inventory of integration flows for designs that double-bill or lose events",
	run:     runLint,
}

const lintDescription = `Checks an inventory of integration flows (.csv with a header row, or a
.yaml list of flows) against the rules IP01, IP02, IP03, RT01, RT02 and WH01
and prints one finding per flow and rule: FAIL, WARN or PASS, with what to
change. See docs/lint.md for the columns and the rules.

Exit codes: 0 no FAIL (and, with --strict, no WARN); 1 findings that fail;
2 usage error or an inventory that cannot be read or holds invalid values
(the findings for the valid rows are still printed).`

func runLint(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "lint",
		"lint [--format text|json|sarif|markdown] [--strict] FILE\n       hookledger lint [--format ...] [--strict] --config FILE",
		lintDescription)
	formatName := fs.String("format", "text", "output `format`: text, json, sarif or markdown")
	strict := fs.Bool("strict", false, "exit 1 on any WARN as well as on any FAIL")
	configPath := fs.String("config", "", "lint the flows defined in a hookledger config `FILE`")

	files, code, ok := parseInterspersed(env, fs, args)
	if !ok {
		return code
	}
	format, err := lint.ParseFormat(*formatName)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger lint: --format: %v\n", err)
		return exitUsage
	}
	switch {
	case *configPath != "" && len(files) > 0:
		fmt.Fprintln(env.Stderr, "hookledger lint: give either an inventory FILE or --config FILE, not both")
		return exitUsage
	case *configPath == "" && len(files) != 1:
		fmt.Fprintf(env.Stderr, "hookledger lint: expected one inventory FILE (.csv, .yaml or .yml), got %d arguments\n", len(files))
		fs.Usage()
		return exitUsage
	}

	var rep *lint.Report
	if *configPath != "" {
		flows, err := configFlows(env, *configPath)
		if err != nil {
			fmt.Fprintf(env.Stderr, "hookledger lint: %v\n", err)
			return exitUsage
		}
		rep = lint.CheckFlows(flows)
		rep.Path = *configPath
	} else {
		inv, err := lint.ReadFile(files[0])
		if err != nil {
			fmt.Fprintf(env.Stderr, "hookledger lint: %v\n", err)
			return exitUsage
		}
		rep = lint.Check(inv)
	}

	for _, p := range rep.Problems {
		fmt.Fprintf(env.Stderr, "hookledger lint: %s\n", safe(problemText(rep.Path, p)))
	}
	if format == lint.FormatText || format == lint.FormatMarkdown {
		// An inventory is untrusted text: a flow name with an escape
		// sequence must not reach the terminal (JSON and SARIF escape it).
		for i := range rep.Findings {
			rep.Findings[i].Flow = safe(rep.Findings[i].Flow)
			rep.Findings[i].Message = safe(rep.Findings[i].Message)
		}
	}
	opts := lint.WriteOptions{Color: format == lint.FormatText && colourTerminal(env), ToolVersion: buildVersion()}
	if err := lint.Write(env.Stdout, rep, format, opts); err != nil {
		fmt.Fprintf(env.Stderr, "hookledger lint: %v\n", err)
		return exitFail
	}
	switch {
	case len(rep.Problems) > 0:
		return exitUsage
	case rep.Failed(*strict):
		return exitFail
	}
	return exitOK
}

// problemText writes an input error the way compilers do, path:line: ...,
// so editors can jump to it.
func problemText(path string, p lint.Problem) string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", path, p.Line, lint.Problem{Column: p.Column, Message: p.Message}.Error())
	}
	return fmt.Sprintf("%s: %s", path, p.Error())
}

// errNoConfigFlows is returned when the config defines no flows.
var errNoConfigFlows = errors.New("the config defines no flows to lint (it has no flows: section); lint an inventory instead: hookledger lint FILE")

// configFlows derives one inventory row per flow of a hookledger config, as
// the engine runs it: an event pipeline that keys every effect on flow,
// entity, business version and effect name, behind an inbound webhook.
// Episode keys are kept for ever (a pruned effect leaves a tombstone), so
// the ledger's retention is unbounded; acknowledgement
// latency is left blank because it is a property of the deployment (measure
// it with /metrics' hookledger_receive_ack_seconds).
func configFlows(env *Env, path string) ([]lint.Flow, error) {
	// The linter reads the flows, never a secret.
	cfg, err := config.LoadOperator(path, env.LookupEnv)
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings {
		fmt.Fprintf(env.Stderr, "hookledger lint: %v\n", w)
	}
	if len(cfg.Flows) == 0 {
		return nil, fmt.Errorf("--config %s: %w", path, errNoConfigFlows)
	}
	// A source's kind names its delivery contract, so the linter can fill
	// replay windows and sender timeouts; generic kinds have none.
	registry := senderkind.Builtin()
	contractOf := map[string]string{}
	for _, s := range cfg.Sources {
		if c, ok := registry.Contract(s.Kind); ok {
			contractOf[s.Name] = c.Name
		}
	}
	destAttempts := map[string]int{}
	for _, d := range cfg.Destinations {
		destAttempts[d.Name] = d.Retry.Attempts
	}
	var out []lint.Flow
	for _, f := range cfg.Flows {
		row := lint.Flow{
			ID:                  f.Name,
			Method:              lint.MethodEventPipeline,
			CreatesRecords:      lint.No,
			SideEffect:          "none",
			IdempotencyKey:      "flow+entity+version+effect",
			LedgerRetentionDays: lint.Num(36500),
			RetryLayers:         lint.RetryLayers{Known: true},
			InboundWebhook:      lint.Yes,
			Extra:               map[string]string{"source": f.Source},
			Engine:              true,
		}
		var effects []string
		attempts := 0
		for _, e := range f.Effects {
			effects = append(effects, e.Name)
			if e.Operation == "create" {
				row.CreatesRecords = lint.Yes
			}
			if n, ok := destAttempts[e.Destination]; ok && n > attempts {
				attempts = n
			}
		}
		if attempts > 0 {
			// The delivery worker is the one retry layer: the HTTP client
			// below it never retries.
			row.RetryLayers = lint.RetryLayers{Known: true, Layers: []lint.RetryLayer{{Name: "worker", Attempts: attempts}}}
		}
		if len(effects) > 0 {
			row.SideEffect = strings.Join(effects, ";")
		}
		if v, ok := contractOf[f.Source]; ok {
			row.Sources = []string{v}
		}
		out = append(out, row)
	}
	return out, nil
}

// colourTerminal reports whether stdout is a terminal that should get
// colours: never for pipes, files or test buffers, and never when NO_COLOR
// is set.
func colourTerminal(env *Env) bool {
	if env.Getenv != nil && env.Getenv("NO_COLOR") != "" {
		return false
	}
	f, ok := env.Stdout.(*os.File)
	if !ok {
		return false
	}
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// parseInterspersed parses flags that may come before or after the
// positional arguments (lint FILE --strict as well as lint --strict FILE);
// the flag package alone stops at the first positional argument. Everything
// after a "--" is positional.
func parseInterspersed(env *Env, fs *flag.FlagSet, args []string) (positional []string, code int, ok bool) {
	rest := args
	for {
		if code, ok := parseFlags(env, fs, rest); !ok {
			return nil, code, false
		}
		consumed := len(rest) - fs.NArg()
		if consumed > 0 && rest[consumed-1] == "--" {
			return append(positional, fs.Args()...), 0, true
		}
		if fs.NArg() == 0 {
			return positional, 0, true
		}
		positional = append(positional, fs.Arg(0))
		rest = fs.Args()[1:]
	}
}

// checkArgs refuses positional arguments (extra) to a verb that takes
// none, and a --format other than text or json (format nil: the verb has
// no --format). Every verb words these two refusals the same; ok=false
// means the caller returns code at once.
func checkArgs(env *Env, verb string, extra []string, format *string) (code int, ok bool) {
	if len(extra) > 0 {
		fmt.Fprintf(env.Stderr, "hookledger %s: unexpected argument %q\n", verb, extra[0])
		return exitUsage, false
	}
	if format != nil && *format != "text" && *format != "json" {
		fmt.Fprintf(env.Stderr, "hookledger %s: --format %q: want text or json\n", verb, *format)
		return exitUsage, false
	}
	return 0, true
}
