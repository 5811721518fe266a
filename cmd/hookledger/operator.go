package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// The operator verbs (effects, replay, lint --config, tail) read the store
// or talk to a running server. They verify no signature and call no
// destination, so they load the config without its secrets, and they never
// migrate: a schema change is the operator's decision (hookledger migrate)
// or the server's at start, not a side effect of listing the exception
// queue.

// loadOperatorConfig loads the file with config.LoadOperator and prints a
// config error (exit 2) with file:line.
func loadOperatorConfig(env *Env, verb, path string) (*config.Config, int) {
	cfg, err := config.LoadOperator(path, env.LookupEnv)
	if err != nil {
		fmt.Fprintf(env.Stderr, "hookledger %s: invalid configuration:\n%v\n", verb, err)
		return nil, exitUsage
	}
	return cfg, exitOK
}

// schemaChecker is what both drivers offer to tell a missing or older
// schema apart without migrating it.
type schemaChecker interface {
	SchemaPending(ctx context.Context) ([]string, error)
}

// storeAccess says what a verb does with the store it opens.
type storeAccess int

const (
	// readStore: the verb only reads (status, check, effects list and
	// show); the store is opened read-only, so a copy in a read-only
	// directory serves, and nothing can be written by mistake.
	readStore storeAccess = iota
	// writeStore: the verb records an operator's action.
	writeStore
)

// openOperatorStore opens the configured store without migrating it. A
// database that is not there (no SQLite file, or no hookledger schema) is
// never created: it is a configuration error (exit 2) naming the absolute
// path looked at, since a relative sqlite: path is relative to the config
// file (config.Load). A schema behind this binary is refused with what to
// run (exit 1).
func openOperatorStore(ctx context.Context, env *Env, verb string, cfg *config.Config, access storeAccess) (store.Store, int) {
	fail := func(code int, format string, args ...any) (store.Store, int) {
		fmt.Fprintf(env.Stderr, "hookledger %s: "+format+"\n", append([]any{verb}, args...)...)
		return nil, code
	}
	cfgPath := cfg.Path
	if abs, err := filepath.Abs(cfgPath); err == nil {
		cfgPath = abs
	}
	howTo := fmt.Sprintf("run 'hookledger migrate --config %s', or start 'hookledger serve', which migrates at start", cfgPath)
	open := storeopen.OpenExisting
	if access == readStore {
		open = storeopen.OpenReadOnly
	}
	st, err := open(ctx, cfg.Store)
	if errors.Is(err, fs.ErrNotExist) {
		return fail(exitUsage, "%v (store: %s in %s): %s", err, storeopen.Redact(cfg.Store), cfgPath, howTo)
	}
	if err != nil {
		return fail(exitFail, "%v", err)
	}
	sc, ok := st.(schemaChecker)
	if !ok {
		return st, exitOK
	}
	pending, err := sc.SchemaPending(ctx)
	if err != nil {
		st.Close()
		return fail(exitFail, "%v", err)
	}
	if len(pending) > 0 {
		st.Close()
		if v, _, _ := strings.Cut(pending[0], "_"); strings.TrimLeft(v, "0") == "1" {
			// The first migration creates the schema: nothing is there.
			return fail(exitUsage, "the database has no hookledger schema (store: %s in %s): %s", storeopen.Redact(cfg.Store), cfgPath, howTo)
		}
		return fail(exitFail, "the database schema is behind this binary (%s not applied) (store: %s): %s",
			strings.Join(pending, ", "), storeopen.Redact(cfg.Store), howTo)
	}
	return st, exitOK
}
