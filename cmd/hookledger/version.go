package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

// version is set at build time with -ldflags "-X main.version=…" (make build
// does); without it the Go toolchain's build information is used.
var version = ""

var versionCommand = &command{
	name:    "version",
	summary: "print the hookledger version",
	run: func(ctx context.Context, env *Env, args []string) int {
		fs := newFlagSet(env, "version", "version", "Prints the version of this binary and the Go version it was built with.")
		if code, ok := parseFlags(env, fs, args); !ok {
			return code
		}
		if code, ok := checkArgs(env, "version", fs.Args(), nil); !ok {
			return code
		}
		fmt.Fprintf(env.Stdout, "hookledger %s (%s)\n", buildVersion(), goVersion())
		return exitOK
	},
}

func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return versionOf(version, bi)
}

// versionOf picks the version to show: the one stamped at build time (make
// build stamps git describe --always --dirty), else the module version the
// Go toolchain recorded, else the commit from its VCS stamp (a plain
// go build in a clone). "(devel)" is left only for a build with neither.
func versionOf(stamped string, bi *debug.BuildInfo) string {
	if stamped != "" {
		return stamped
	}
	if bi == nil {
		return "(devel)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}
