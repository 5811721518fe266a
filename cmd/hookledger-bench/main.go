// Package main is hookledger-bench, the benchmark commands behind
// BENCHMARKS.md. Each subcommand prints its figures beside a baseline
// measured in the same run on the same machine, so that a reader compares
// numbers taken under identical conditions rather than against a figure
// from another day:
//
//	commit    durable commits/s of one-row-per-transaction against group
//	          commit, on SQLite and PostgreSQL, beside raw fsync/s
//	receive   signed webhooks per second through a running hookledger
//	          (SQLite and PostgreSQL) beside a no-op net/http server, then
//	          an account of every acknowledged event in the store
//	pipeline  events/s from a preloaded inbox to the effect ledger through
//	          the flow engine, one hot entity and many entities, beside the
//	          InboxCommit rate of the same events
//	e2e       signed webhooks in, effects done at a loopback destination,
//	          sustained, on SQLite and on PostgreSQL with one and with two
//	          serve processes at one send rate, with end-to-end latency,
//	          the servers' memory and CPU, and PostgreSQL statements per event
//	publish   messages accepted/s through POST /api/v1/messages with an
//	          Idempotency-Key, and fan-out deliveries/s to ten loopback
//	          endpoints with their latency, on SQLite and PostgreSQL, beside
//	          signed webhooks into the inbound path of the same store kind
//	bulkhead  effects/s to a healthy destination alone and beside one that
//	          hangs until its timeout, in one run (head-of-line blocking)
//	signals   the cost of computing the outcome signals on a store of
//	          a million events and effects, beside the same figures read by
//	          scanning the tables
//	console   p50/p99 of every console list page on a store of a million
//	          events and effects, beside the admin API's JSON and /healthz
//	bigbody   the serve process's peak RSS while the console shows the
//	          largest body the receiver accepts (1 MiB nested 9,990 deep) on
//	          every page that shows it, beside a 2 KB body
//	retention one pruning pass on a store of a million events (half past
//	          retention): its time and rows/s, and ingest p50/p99 beside it
//	          against ingest alone
//	replay    the replay verb of every stored event on stores of 10k, 100k
//	          and 1M events, to the last work item settled: its time per
//	          event and its peak RSS, beside the smallest size's
//	noop      the no-op server the receive benchmark measures against
//	serve     hookledger's server in this process, with an optional CPU
//	          profile, for finding where the receive time goes
//
// Exit codes: 0 ok, 1 failure (including an acknowledged event missing from
// the store or a row count that does not match), 2 usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// subcommand is one verb of the bench binary.
type subcommand struct {
	name    string
	summary string
	run     func(ctx context.Context, stdout, stderr io.Writer, args []string) int
}

func subcommands() []subcommand {
	return []subcommand{
		{"commit", "durable commits/s: one row per transaction against group commit", runCommit},
		{"receive", "signed webhooks/s through hookledger against a no-op server", runReceive},
		{"pipeline", "events/s from inbox to effect ledger through the flow engine", runPipeline},
		{"e2e", "signed webhooks in, effects done at a loopback destination, sustained", runE2E},
		{"publish", "messages/s through the publish API and fan-out deliveries/s to ten endpoints", runPublish},
		{"bulkhead", "effects/s to a healthy destination, alone and beside one that hangs", runBulkhead},
		{"signals", "the outcome signals on a store of a million events and effects", runSignals},
		{"console", "console list pages on a store of a million events and effects", runConsole},
		{"bigbody", "the console's peak RSS showing the largest body the receiver accepts", runBigbody},
		{"retention", "a pruning pass on a store of a million events, and ingest p99 beside it", runRetention},
		{"replay", "the replay verb's time and peak RSS on stores of 10k, 100k and 1M events", runReplayBench},
		{"noop", "serve a no-op HTTP handler (child process of receive)", runNoop},
		{"serve", "run hookledger's server in-process, optionally CPU-profiled", runServe},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Main dispatches args[0] and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return exitOK
	}
	for _, c := range subcommands() {
		if c.name == args[0] {
			return c.run(ctx, stdout, stderr, args[1:])
		}
	}
	fmt.Fprintf(stderr, "hookledger-bench: unknown subcommand %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: hookledger-bench <subcommand> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Subcommands:")
	for _, c := range subcommands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'hookledger-bench <subcommand> --help' for its flags.")
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 failure or a failed correctness check, 2 usage error.")
}

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(stderr io.Writer, name, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: hookledger-bench %s\n\n%s\n\nFlags:\n", synopsis, description)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args; ok=false means return code at once (0 after
// --help, printed to stdout; 2 after a flag error or a stray argument).
func parseFlags(stdout io.Writer, fs *flag.FlagSet, args []string) (code int, ok bool) {
	printUsage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = printUsage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return exitOK, false
	case err != nil:
		fs.Usage()
		return exitUsage, false
	case fs.NArg() > 0:
		fmt.Fprintf(fs.Output(), "hookledger-bench %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return exitUsage, false
	}
	return exitOK, true
}

// benchExit turns a benchmark's outcome into the exit code: 1 when it
// failed (the error is printed) or its figures did not add up.
func benchExit(stderr io.Writer, name string) func(ok bool, err error) int {
	return func(ok bool, err error) int {
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "hookledger-bench %s: %v\n", name, err)
			return exitFail
		case !ok:
			return exitFail
		}
		return exitOK
	}
}
