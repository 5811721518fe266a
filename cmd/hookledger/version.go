package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=…"; without it
// the module version recorded by the Go toolchain is used.
var version = ""

func init() {
	register(&command{
		name:    "version",
		summary: "print the hookledger version",
		run: func(ctx context.Context, env *Env, args []string) int {
			fs := newFlagSet(env, "version", "version", "Prints the version of this binary and the Go version it was built with.")
			if code, ok := parseFlags(env, fs, args); !ok {
				return code
			}
			if fs.NArg() > 0 {
				fmt.Fprintf(env.Stderr, "hookledger version: unexpected argument %q\n", fs.Arg(0))
				return exitUsage
			}
			fmt.Fprintf(env.Stdout, "hookledger %s (%s)\n", buildVersion(), goVersion())
			return exitOK
		},
	})
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}
