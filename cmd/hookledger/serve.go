package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/server"
	"github.com/hookledger/hookledger/internal/tracing"
)

var serveCommand = &command{
	name:    "serve",
	summary: "receive webhooks and serve the admin API",
	run:     runServe,
}

var migrateCommand = &command{
	name:    "migrate",
	summary: "apply the database schema",
	run:     runMigrate,
}

func runServe(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "serve", "serve [--config FILE] [--log-level LEVEL] [--log-format text|json]",
		"Receives webhooks on POST /hooks/{source}, stores each durably before acknowledging it,\n"+
			"and serves /healthz, /readyz, /metrics and the admin API under /api/v1.\n"+
			"The schema is migrated at start. SIGINT or SIGTERM stop it cleanly: no new\n"+
			"connections, in-flight requests drained, pending commits finished, exit 0.")
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	lf := addLogFlags(fs)
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	if code, ok := checkArgs(env, "serve", fs.Args(), nil); !ok {
		return code
	}
	log, err := lf.logger(env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger serve: %v\n", err)
		return exitUsage
	}
	cfg, code := loadConfig(env, "serve", *cfgPath)
	if cfg == nil {
		return code
	}
	warnDefaultedSecrets(log, cfg)
	host, err := hostClock(env)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger serve: %v\n", err)
		return exitUsage
	}
	if _, set := env.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(serveGCPercent)
	}
	// Listen before the store is opened and migrated: a port in use is
	// the most common reason serve cannot start, and it must say so
	// without having created or changed a database first.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		hint := ""
		if errors.Is(err, errAddrInUse) {
			hint = fmt.Sprintf(" (another hookledger or program is using it: stop it, or set listen: in %s to a free port)", cfg.Path)
		}
		fmt.Fprintf(env.Stderr, "hookledger serve: cannot listen on %s: %v%s\n", cfg.Listen, err, hint)
		return exitFail
	}
	srv := server.New(cfg, server.Options{Logger: log, HostClock: host, Listener: ln, Version: buildVersion()})
	if err := srv.Run(ctx); err != nil {
		fmt.Fprintf(env.Stderr, "hookledger serve: %v\n", err)
		return exitFail
	}
	return exitOK
}

// serveGCPercent is serve's garbage collection target unless GOGC is set.
// A receiver allocates for every request (the body, its headers, the
// store's parameters) and keeps little: its live heap is a few tens of
// megabytes, which Go's default target of 100 collects every few
// milliseconds under load, each collection taking processor time from the
// requests. At 400 the heap may grow to five times what is live (the
// end-to-end benchmark peaks at 75–90 MB instead of 50), and at 32
// concurrent senders on two cores p99 fell from 23 to 19–20 ms
// (docs/benchmarks-history.md, "One statement per table, statistics that
// keep up"). docs/deploy.md tells operators how to cap it.
const serveGCPercent = 400

// clockSkewEnv shifts the host clock of serve and of the operator verbs
// (storeNow). It is a test aid: the multi-process tests run a real process
// whose host clock is minutes off, to prove that on PostgreSQL leases and
// due times follow the database's clock (docs/architecture.md, "The
// database's clock").
const clockSkewEnv = "HOOKLEDGER_TEST_CLOCK_SKEW"

// hostClock is the real clock, shifted by $HOOKLEDGER_TEST_CLOCK_SKEW (a
// Go duration such as 5m or -90s) when that is set.
func hostClock(env *Env) (clock.Clock, error) {
	v, ok := env.LookupEnv(clockSkewEnv)
	if !ok || v == "" {
		return clock.Real{}, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return nil, fmt.Errorf("%s=%q: want a duration such as 5m or -90s", clockSkewEnv, v)
	}
	return clock.Shifted{Base: clock.Real{}, By: d}, nil
}

func runMigrate(ctx context.Context, env *Env, args []string) int {
	fs := newFlagSet(env, "migrate", "migrate [--config FILE]",
		"Applies the embedded schema migrations to the configured store and exits.\n"+
			"serve does this at start too; migrate lets you do it explicitly first.\n"+
			"Safe to run while other processes start on the same PostgreSQL.")
	cfgPath := fs.String("config", config.DefaultPath, "configuration `file`")
	if code, ok := parseFlags(env, fs, args); !ok {
		return code
	}
	if code, ok := checkArgs(env, "migrate", fs.Args(), nil); !ok {
		return code
	}
	cfg, code := loadConfig(env, "migrate", *cfgPath)
	if cfg == nil {
		return code
	}
	applied, err := server.Migrate(ctx, cfg)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger migrate: %v\n", err)
		return exitFail
	}
	if len(applied) == 0 {
		fmt.Fprintln(env.Stdout, "schema is up to date")
	}
	for _, a := range applied {
		fmt.Fprintf(env.Stdout, "applied %s\n", a)
	}
	return exitOK
}

// loadConfig loads the file and prints a config error (exit 2) or an
// unreadable file (exit 2) precisely.
func loadConfig(env *Env, verb, path string) (*config.Config, int) {
	cfg, err := config.Load(path, env.LookupEnv)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger %s: invalid configuration:\n%v\n", verb, err)
		return nil, exitUsage
	}
	return cfg, exitOK
}

type logFlags struct {
	level  *string
	format *string
}

func addLogFlags(fs interface {
	String(name, value, usage string) *string
}) *logFlags {
	return &logFlags{
		level:  fs.String("log-level", "info", "log `level`: debug, info, warn or error"),
		format: fs.String("log-format", "text", "log `format`: text or json"),
	}
}

func (l *logFlags) logger(env *Env) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*l.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", *l.level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch *l.format {
	case "text":
		return slog.New(tracing.LogHandler(slog.NewTextHandler(env.Stderr, opts))), nil
	case "json":
		return slog.New(tracing.LogHandler(slog.NewJSONHandler(env.Stderr, opts))), nil
	}
	return nil, errors.New("--log-format: want text or json")
}

// warnDefaultedSecrets names every secret-bearing field whose value came
// from a ${VAR:-default} written in the config file, such as the
// quick-start's demo secrets: whoever can read the file (or the
// repository) knows the value. It names the variable and the field, never
// the value.
func warnDefaultedSecrets(log *slog.Logger, cfg *config.Config) {
	for _, d := range cfg.DefaultedSecrets {
		log.Warn("secret taken from the default written in the config file: anyone who can read the file knows it; set the variable before exposing this server",
			"variable", d.Var, "field", d.Field, "at", fmt.Sprintf("%s:%d", cfg.Path, d.Line))
	}
}
