package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"time"

	"github.com/google/uuid"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/verify"
)

func init() {
	register(&command{
		name:    "sign",
		summary: "print the headers a source's sender would send for a body",
		run:     runSign,
	})
}

func runSign(_ context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "sign", "sign --config FILE --source NAME [--event-id ID] [--url URL] [--format headers|curl] [BODY_FILE|-]",
		"Signs a body the way the named source's sender would and prints the headers,\n"+
			"one 'Name: value' per line (or curl -H arguments with --format curl), for\n"+
			"trying a configured source with curl and for tests. The body is read from\n"+
			"BODY_FILE, or from standard input when it is '-' or absent.\n\n"+
			"Example:\n"+
			"  hookledger sign --source stripe event.json |\n"+
			"    curl -H @- --data-binary @event.json http://127.0.0.1:8080/hooks/stripe")
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	sourceName := fs.String("source", "", "source `name` from the config (required)")
	eventID := fs.String("event-id", "", "event `id` for schemes that carry it in a header (standard-webhooks webhook-id); a fresh one when empty")
	target := fs.String("url", "", "`URL` the request is sent to, for schemes that sign it (HubSpot v2/v3); default public_url or http://LISTEN/hooks/NAME")
	format := fs.String("format", "headers", "output `format`: headers or curl")
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	if *sourceName == "" {
		fmt.Fprintln(env.Stderr, "hookledger sign: --source is required")
		return exitUsage
	}
	if *format != "headers" && *format != "curl" {
		fmt.Fprintf(env.Stderr, "hookledger sign: --format %q: want headers or curl\n", *format)
		return exitUsage
	}
	if fs.NArg() > 1 {
		fmt.Fprintf(env.Stderr, "hookledger sign: expected at most one BODY_FILE, got %d arguments\n", fs.NArg())
		return exitUsage
	}
	cfg, code := loadConfig(env, "sign", *cfgPath)
	if cfg == nil {
		return code
	}
	var src *config.Source
	for i := range cfg.Sources {
		if cfg.Sources[i].Name == *sourceName {
			src = &cfg.Sources[i]
		}
	}
	if src == nil {
		names := make([]string, 0, len(cfg.Sources))
		for _, s := range cfg.Sources {
			names = append(names, s.Name)
		}
		fmt.Fprintf(env.Stderr, "hookledger sign: no source %q in %s (sources: %v)\n", *sourceName, *cfgPath, names)
		return exitUsage
	}

	var body []byte
	var err error
	if fs.NArg() == 0 || fs.Arg(0) == "-" {
		body, err = io.ReadAll(env.Stdin)
	} else {
		body, err = os.ReadFile(fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger sign: read body: %v\n", err)
		return exitFail
	}

	scheme, err := verify.New(src.SchemeOptions())
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger sign: source %s: %v\n", src.Name, err)
		return exitUsage
	}
	u := *target
	if u == "" {
		u = src.PublicURL
	}
	if u == "" {
		host := cfg.Listen
		if h, p, err := net.SplitHostPort(cfg.Listen); err == nil && (h == "" || h == "0.0.0.0" || h == "::") {
			host = net.JoinHostPort("127.0.0.1", p)
		}
		u = "http://" + host + "/hooks/" + src.Name
	}
	id := *eventID
	if id == "" {
		id = "msg_" + uuid.NewString()
	}
	h, err := scheme.Sign(&verify.Request{Method: "POST", URL: u, Body: body}, time.Now(), id)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger sign: %v\n", err)
		return exitFail
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		for _, v := range h.Values(k) {
			if *format == "curl" {
				fmt.Fprintf(env.Stdout, "-H %s ", shellQuote(k+": "+v))
			} else {
				fmt.Fprintf(env.Stdout, "%s: %s\n", k, v)
			}
		}
	}
	if *format == "curl" {
		fmt.Fprintln(env.Stdout)
	}
	return exitOK
}

// shellQuote single-quotes s for a POSIX shell.
func shellQuote(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, `'\''`...)
		} else {
			out = append(out, s[i])
		}
	}
	return string(append(out, '\''))
}
