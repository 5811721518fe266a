package main

import (
	"context"
	"errors"
	"fmt"
	"os"
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

// openOperatorStore opens the configured store without migrating it. A
// SQLite file that does not exist is not created, and a schema that is
// missing or behind this binary is refused with what to run (exit 1).
func openOperatorStore(ctx context.Context, env *Env, verb string, cfg *config.Config) (store.Store, int) {
	fail := func(format string, args ...any) (store.Store, int) {
		fmt.Fprintf(env.Stderr, "hookledger %s: "+format+"\n", append([]any{verb}, args...)...)
		return nil, exitFail
	}
	howTo := fmt.Sprintf("run 'hookledger migrate --config %s', or start 'hookledger serve', which migrates at start", cfg.Path)
	if path, ok := strings.CutPrefix(cfg.Store, "sqlite:"); ok {
		if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
			return fail("no database at %s (store: %s): %s", path, cfg.Store, howTo)
		}
	}
	st, err := storeopen.Open(ctx, cfg.Store)
	if err != nil {
		return fail("%v", err)
	}
	sc, ok := st.(schemaChecker)
	if !ok {
		return st, exitOK
	}
	pending, err := sc.SchemaPending(ctx)
	if err != nil {
		st.Close()
		return fail("%v", err)
	}
	if len(pending) > 0 {
		st.Close()
		what := fmt.Sprintf("the database schema is behind this binary (%s not applied)", strings.Join(pending, ", "))
		if v, _, _ := strings.Cut(pending[0], "_"); strings.TrimLeft(v, "0") == "1" {
			// The first migration creates the schema: nothing is there.
			what = "the database has no hookledger schema"
		}
		return fail("%s (store: %s): %s", what, storeopen.Redact(cfg.Store), howTo)
	}
	return st, exitOK
}
