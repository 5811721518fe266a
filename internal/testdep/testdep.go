// Package testdep decides what a test does when something it needs from
// the machine is missing: a PostgreSQL server, Chromium, Node.js, FUSE, a
// pseudo-terminal. On a developer's machine the test skips, saying what is
// missing and how to get it. Under CI (the CI variable set to any value)
// it fails instead, so that a CI run never passes with part of the suite
// unrun. scripts/test.sh names every skipped test at the end of
// `make test`, and fails a CI run in which one skipped for a missing
// dependency all the same.
package testdep

import (
	"fmt"
	"os"
	"testing"
)

// prefix starts the message of every test stopped by Missing; the summary
// of scripts/test.sh recognises missing dependencies by it.
const prefix = "MISSING DEPENDENCY: "

// underCI reports whether the tests run under underCI: the underCI variable is set to a
// value, whatever it is (underCI services set underCI=true; some set underCI=1).
func underCI() bool { return os.Getenv("CI") != "" }

// Missing stops t because something it needs is missing: format and args
// say what, and how to get it. It skips t, or fails it under CI.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := prefix + fmt.Sprintf(format, args...)
	if underCI() {
		t.Fatal(msg + " (CI is set: a test that cannot run fails)")
	}
	t.Skip(msg)
}
