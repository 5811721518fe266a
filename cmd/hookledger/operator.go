package main

import (
	"fmt"

	"github.com/hookledger/hookledger/internal/config"
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
