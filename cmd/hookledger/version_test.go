package main

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOf(t *testing.T) {
	vcs := func(rev, modified string) *debug.BuildInfo {
		bi := &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}
		bi.Settings = []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
		return bi
	}
	for _, tc := range []struct {
		name, stamped string
		bi            *debug.BuildInfo
		want          string
	}{
		{"stamped by make build", "2850138-dirty", vcs("abc", "true"), "2850138-dirty"},
		{"module version from go install", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.3.0"}}, "v0.3.0"},
		{"go build in a clone", "", vcs("2850138d0a1b2c3d4e5f", "false"), "2850138d0a1b"},
		{"go build in a clone with changes", "", vcs("2850138d0a1b2c3d4e5f", "true"), "2850138d0a1b-dirty"},
		{"nothing known", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "(devel)"},
		{"no build info", "", nil, "(devel)"},
	} {
		if got := versionOf(tc.stamped, tc.bi); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The version verb prints the stamped version.
func TestVersionVerbPrintsTheStamp(t *testing.T) {
	saved := version
	version = "v1.2.3-4-gabcdef0-dirty"
	defer func() { version = saved }()
	code, out, _ := run(t, "", nil, "version")
	if code != 0 || !strings.HasPrefix(out, "hookledger v1.2.3-4-gabcdef0-dirty (go") {
		t.Fatalf("version: %d %q", code, out)
	}
}
