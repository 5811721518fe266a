package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signals"
)

var statusCommand = &command{
	name:    "status",
	summary: "print the outcome signals; exit 1 when any is alert",
	run:     runStatus,
}

const statusDescription = `Measures the outcome signals (docs/signals.md) and prints them with
their status: ok, warn or alert from the thresholds of the config's signals
section. Meant for cron, CI and monitoring: the exit code says whether
anything needs a person now.

By default it reads the configured store directly (read-only, without
migrating and without the config's secrets; it never blocks a running
server, and reads a copy in a read-only directory). A relative sqlite:
path is relative to the config file's directory. With --server it asks a running server's GET /api/v1/signals
instead, so the server's thresholds apply; the admin token is read from
$` + adminTokenVar + `, else from the config's admin.token.

Text output is one line per signal:
  NAME  VALUE  OLDEST  STATUS  BREAKDOWN
OLDEST is the age of the oldest counted item (- when nothing counts);
BREAKDOWN lists each dimension's largest keys. --format json prints the
API's JSON: {"signals":[{"name","value","oldest_age_seconds","status",
"breakdown"}],"at"}.

Exit codes: 0 no signal is alert (warn included); 1 a signal is alert, or
the signals could not be measured (store or server unreachable); 2 usage
or configuration error, or no database at the configured store (it is
never created).`

// statusBreakdownKeys bounds the keys printed per breakdown dimension; the
// JSON has them all.
const statusBreakdownKeys = 3

func runStatus(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "status", "status [--config FILE] [--format text|json] [--server URL]", statusDescription)
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	format := fs.String("format", "text", "output `format`: text or json")
	server := fs.String("server", "", serverFlagUsage)
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	if code, ok := checkArgs(env, "status", fs.Args(), format); !ok {
		return code
	}
	var report *signals.Report
	if *server != "" {
		r, code := newRemote(env, "status", *server, *cfgPath, flagGiven(fs, "config"))
		if r == nil {
			return code
		}
		report = &signals.Report{}
		if err := r.call(ctx, http.MethodGet, "/api/v1/signals", nil, nil, report); err != nil {
			fmt.Fprintf(env.Stderr, "hookledger status: %v\n", err)
			return remoteExit(err)
		}
	} else {
		cfg, code := loadOperatorConfig(env, "status", *cfgPath)
		if cfg == nil {
			return code
		}
		st, code := openOperatorStore(ctx, env, "status", cfg, readStore)
		if st == nil {
			return code
		}
		defer st.Close()
		r, _, err := signals.Compute(ctx, st, &cfg.Signals, storeNow(ctx, env, st))
		if err != nil {
			fmt.Fprintf(env.Stderr, "hookledger status: %v\n", err)
			return exitFail
		}
		report = r
	}
	if *format == "json" {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			fmt.Fprintf(env.Stderr, "hookledger status: %v\n", err)
			return exitFail
		}
	} else {
		printStatus(env.Stdout, report)
	}
	if report.Worst() == signals.StatusAlert {
		return exitFail
	}
	return exitOK
}

// printStatus writes the report as a table. Breakdown keys come from the
// data (sources, owners, entities), so their control characters are
// escaped.
func printStatus(w io.Writer, r *signals.Report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVALUE\tOLDEST\tSTATUS\tBREAKDOWN")
	for _, s := range r.Signals {
		oldest := "-"
		if s.OldestAgeSeconds != nil {
			oldest = shortAge(time.Duration(*s.OldestAgeSeconds) * time.Second)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", safe(s.Name), s.Value, oldest, safe(s.Status), breakdownText(s.Breakdown))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nworst: %s (measured at %s)\n", r.Worst(), safe(r.At))
}

// shortAge prints an age in its two largest units: 45s, 12m5s, 3h20m, 2d4h.
func shortAge(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm%ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	return fmt.Sprintf("%dd%dh", int(d/(24*time.Hour)), int(d%(24*time.Hour)/time.Hour))
}

// breakdownText renders dimensions in name order, each with its largest
// keys first: "destination: crm=3 erp=1; owner: unassigned=4 +2 more".
func breakdownText(b map[string]map[string]int64) string {
	if len(b) == 0 {
		return "-"
	}
	dims := make([]string, 0, len(b))
	for d := range b {
		dims = append(dims, d)
	}
	slices.Sort(dims)
	parts := make([]string, 0, len(dims))
	for _, d := range dims {
		keys := make([]string, 0, len(b[d]))
		for k := range b[d] {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(x, y string) int {
			return cmp.Or(cmp.Compare(b[d][y], b[d][x]), strings.Compare(x, y))
		})
		items := make([]string, 0, statusBreakdownKeys+1)
		for i, k := range keys {
			if i == statusBreakdownKeys {
				items = append(items, fmt.Sprintf("+%d more", len(keys)-i))
				break
			}
			items = append(items, fmt.Sprintf("%s=%d", safe(k), b[d][k]))
		}
		parts = append(parts, safe(d)+": "+strings.Join(items, " "))
	}
	return strings.Join(parts, "; ")
}
