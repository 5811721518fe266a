// Command hookledger receives webhooks, stores them durably, processes each
// entity in business order and carries out every business effect once.
//
// Each verb lives in its own file as one command value, listed in verbs;
// Main parses the verb apart from running it so that tests can drive the
// real command line in-process.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"

	"github.com/hookledger/hookledger/internal/suggest"
)

// Exit codes pinned by the product surface.
const (
	exitOK    = 0 // success
	exitFail  = 1 // findings or a failure while running
	exitUsage = 2 // bad flags, bad arguments or bad configuration
)

// Env carries the process environment into a verb so tests can replace it.
type Env struct {
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Getenv reads environment variables (for ${VAR} expansion in config).
	Getenv func(string) string
	// LookupEnv reports whether a variable is set at all.
	LookupEnv func(string) (string, bool)
	// Transport carries the admin API calls of --server (nil:
	// http.DefaultTransport). The tests check every exchange against the
	// OpenAPI document through it, so the verbs ask only what the
	// document allows and read only what it promises.
	Transport http.RoundTripper
}

// command is one verb of the binary.
type command struct {
	name    string
	summary string
	// run executes the verb with the arguments after the verb name and
	// returns the process exit code.
	run func(ctx context.Context, env *Env, args []string) int
}

// verbs lists every verb of the binary, in the order usage prints them:
// the list is the one place a verb is added, not an init in its file.
var verbs = []*command{
	serveCommand, migrateCommand, demoCommand, devDestinationCommand, sendCommand, signCommand, tailCommand,
	statusCommand, checkCommand, effectsCommand, exceptionsCommand, eventsCommand, replayCommand,
	lintCommand, validateCommand, vendorsCommand, openapiCommand, versionCommand,
}

// lookup finds a verb by name.
func lookup(name string) (*command, bool) {
	for _, c := range verbs {
		if c.name == name {
			return c, true
		}
	}
	return nil, false
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := Main(ctx, os.Args[1:], &Env{
		Stdin:     os.Stdin,
		Stdout:    os.Stdout,
		Stderr:    os.Stderr,
		Getenv:    os.Getenv,
		LookupEnv: os.LookupEnv,
	})
	stop()
	os.Exit(code)
}

// Main runs the verb named by args[0] and returns the exit code.
func Main(ctx context.Context, args []string, env *Env) int {
	if len(args) == 0 {
		usage(env.Stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(env.Stdout)
		return exitOK
	case "-version", "--version":
		return versionCommand.run(ctx, env, args[1:])
	}
	c, ok := lookup(args[0])
	if !ok {
		names := make([]string, len(verbs))
		for i, v := range verbs {
			names[i] = v.name
		}
		if near, ok := suggest.Nearest(args[0], names); ok {
			fmt.Fprintf(env.Stderr, "hookledger: unknown verb %q: did you mean %q?\n\n", args[0], near)
		} else {
			fmt.Fprintf(env.Stderr, "hookledger: unknown verb %q\n\n", args[0])
		}
		usage(env.Stderr)
		return exitUsage
	}
	return c.run(ctx, env, args[1:])
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: hookledger <verb> [flags] [arguments]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Verbs:")
	width := 0
	for _, c := range verbs {
		width = max(width, len(c.name))
	}
	for _, c := range verbs {
		fmt.Fprintf(w, "  %-*s %s\n", width, c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'hookledger <verb> --help' for the flags of one verb; 'hookledger --version' prints the version.")
	fmt.Fprintln(w, "Exit codes: 0 ok, 1 findings or failure, 2 usage or configuration error.")
}

// newFlagSet returns a flag set that writes its usage to env.Stderr and
// reports errors instead of exiting, with a usage line for the verb.
func newFlagSet(env *Env, name, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: hookledger %s\n\n%s\n", synopsis, description)
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(out, "\nFlags:")
			printDefaults(out, fs)
		}
	}
	return fs
}

// oneDashFlag is the start of a flag's line in the flag package's usage.
var oneDashFlag = regexp.MustCompile(`(?m)^  -`)

// printDefaults is fs.PrintDefaults with each flag written with two
// dashes, as the docs and examples write them: the flag package accepts
// both and prints one.
func printDefaults(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	out := fs.Output()
	fs.SetOutput(&b)
	fs.PrintDefaults()
	fs.SetOutput(out)
	_, _ = io.WriteString(w, oneDashFlag.ReplaceAllString(b.String(), "  --"))
}

// parseFlags parses args; ok=false means the caller returns code at once
// (0 after --help, which prints usage to stdout, 2 after a flag error).
func parseFlags(env *Env, fs *flag.FlagSet, args []string) (code int, ok bool) {
	// The flag package prints usage on every error; keep it quiet during
	// Parse and print once, to stdout for --help and to stderr otherwise.
	printUsage := fs.Usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.Usage = printUsage
	if err == nil {
		return 0, true
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(env.Stdout)
		fs.Usage()
		return exitOK, false
	}
	fs.Usage()
	return exitUsage, false
}
