package main

import (
	"context"
	"fmt"

	"github.com/hookledger/hookledger/internal/openapi"
)

var openapiCommand = &command{
	name:    "openapi",
	summary: "print the OpenAPI document of the admin API",
	run: func(ctx context.Context, env *Env, args []string) int {
		fs := newFlagSet(env, "openapi", "openapi",
			"Prints the OpenAPI 3.1 document of the admin and publishing API (docs/openapi.yaml), as\n"+
				"GET /api/v1/openapi.yaml serves it: feed it to a client generator, for example\n\n"+
				"  hookledger openapi > openapi.yaml")
		if code, ok := parseFlags(env, fs, args); !ok {
			return code
		}
		if fs.NArg() > 0 {
			fmt.Fprintf(env.Stderr, "hookledger openapi: unexpected argument %q\n", fs.Arg(0))
			return exitUsage
		}
		if _, err := env.Stdout.Write(openapi.Document); err != nil {
			fmt.Fprintf(env.Stderr, "hookledger openapi: %v\n", err)
			return exitFail
		}
		return exitOK
	},
}
