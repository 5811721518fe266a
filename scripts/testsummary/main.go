// Command testsummary reads the event stream of `go test -json` and prints
// what plain `go test` would: a line per package, and the whole output of
// every test that failed (and of a package that failed outside its tests).
// It also writes, to the file named by -skips, how many tests were skipped
// and why, grouped by reason. scripts/test.sh runs the suite through it and
// prints that report at the end of `make test`.
//
//	go test -json ./... 2>&1 | testsummary -skips FILE
//
// With -conformance it writes to that file the store conformance suite's
// report: for each package that ran TestConformance, the driver it ran
// on, the suite's result line and the package's, as a verbose run of the
// suite alone would print them (scripts/test.sh prints it; running the
// suite again for its report took a minute and a half of every make
// test).
//
// It exits 1 when a test or a package failed, like go test; lines that are
// not JSON (the go command's own messages) are printed as they come.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

func main() {
	skips := flag.String("skips", "", "write the report of skipped tests to this `file`")
	conformance := flag.String("conformance", "", "write the store conformance suite's report to this `file`")
	flag.Parse()
	s := newSummary(os.Stdout)
	if err := s.read(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if *skips != "" {
		if err := os.WriteFile(*skips, []byte(s.skipReport()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
	}
	if *conformance != "" {
		if err := os.WriteFile(*conformance, []byte(strings.Join(s.conformance, "")), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
	}
	if s.failed {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type testKey struct{ pkg, test string }

// skip is one skipped test and the message it gave.
type skip struct {
	test   testKey
	reason string
}

type summary struct {
	out    io.Writer
	tests  map[testKey][]string // output of each test still running
	pkgOut map[string][]string  // output of each package outside its tests
	// runs numbers the tests in the order they started: the order in
	// which go test prints failed subtests under their test.
	runs map[testKey]int
	// failedSubs holds each failed subtest's output until its top-level
	// test ends.
	failedSubs map[testKey][]testKey
	subOut     map[testKey][]string
	skips      []skip
	failed     bool
	// conformance is the store conformance suite's report so far, and
	// suite each package's part of it until the package ends.
	conformance []string
	suite       map[string][]string
}

func newSummary(out io.Writer) *summary {
	return &summary{out: out, tests: map[testKey][]string{}, pkgOut: map[string][]string{}, runs: map[testKey]int{},
		failedSubs: map[testKey][]testKey{}, subOut: map[testKey][]string{}, suite: map[string][]string{}}
}

// conformanceTest is the store conformance suite's test, and suiteLine a
// line of its own output that its report keeps.
const conformanceTest = "TestConformance"

var suiteLine = regexp.MustCompile(`^--- (PASS|FAIL|SKIP): TestConformance |store conformance suite: driver|` + MissingPrefix)

func (s *summary) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20) // a test may print long lines
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil || e.Action == "" {
			fmt.Fprintf(s.out, "%s\n", line)
			continue
		}
		s.add(e)
	}
	return sc.Err()
}

func (s *summary) add(e event) {
	switch e.Action {
	case "build-output":
		fmt.Fprint(s.out, e.Output)
		return
	case "build-fail":
		s.failed = true
		return
	}
	if e.Test == "" {
		s.packageEvent(e)
		return
	}
	k := testKey{e.Package, e.Test}
	switch e.Action {
	case "run":
		s.runs[k] = len(s.runs)
	case "output":
		s.tests[k] = append(s.tests[k], e.Output)
		if k.test == conformanceTest && suiteLine.MatchString(e.Output) {
			s.suite[k.pkg] = append(s.suite[k.pkg], e.Output)
		}
	case "pass":
		s.forget(k)
	case "fail":
		s.failed = true
		if top, _, sub := strings.Cut(k.test, "/"); sub {
			// Printed under its top-level test, when that one ends.
			t := testKey{k.pkg, top}
			s.failedSubs[t] = append(s.failedSubs[t], k)
			s.subOut[k] = s.tests[k]
			delete(s.tests, k)
			return
		}
		s.printTest(k)
	case "skip":
		s.skips = append(s.skips, skip{k, skipReason(s.tests[k])})
		s.forget(k)
	}
}

func (s *summary) forget(k testKey) {
	delete(s.tests, k)
	if !strings.Contains(k.test, "/") {
		for _, sub := range s.failedSubs[k] {
			delete(s.subOut, sub)
			delete(s.runs, sub)
		}
		delete(s.failedSubs, k)
		delete(s.runs, k)
	}
}

// packageEvent keeps a package's own output until it ends, then prints
// it: "ok" or "FAIL" with the time, as go test does. A failed package
// first prints the tests that never ended (a panic or a timeout).
func (s *summary) packageEvent(e event) {
	switch e.Action {
	case "output":
		if e.Output != "PASS\n" {
			s.pkgOut[e.Package] = append(s.pkgOut[e.Package], e.Output)
		}
		return
	case "fail":
		s.failed = true
		var running []testKey
		for k := range s.tests {
			if k.pkg == e.Package && !strings.Contains(k.test, "/") {
				running = append(running, k)
			}
		}
		slices.SortFunc(running, func(a, b testKey) int { return strings.Compare(a.test, b.test) })
		for _, k := range running {
			s.printTest(k)
		}
	case "pass", "skip":
	default:
		return
	}
	for _, l := range s.pkgOut[e.Package] {
		fmt.Fprint(s.out, l)
		if s.suite[e.Package] != nil && (strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "FAIL")) {
			s.suite[e.Package] = append(s.suite[e.Package], l)
		}
	}
	s.conformance = append(s.conformance, s.suite[e.Package]...)
	delete(s.suite, e.Package)
	delete(s.pkgOut, e.Package)
}

// printTest prints a failed top-level test as plain go test does: its
// result line, its output, then each failed subtest the same way,
// indented by its depth, in the order they started. The framing lines
// of -v (=== RUN and the like) are left out.
func (s *summary) printTest(k testKey) {
	s.printOne(s.tests[k], 0)
	subs := s.failedSubs[k]
	slices.SortStableFunc(subs, func(a, b testKey) int { return s.runs[a] - s.runs[b] })
	for _, sub := range subs {
		s.printOne(s.subOut[sub], strings.Count(sub.test, "/"))
	}
	s.forget(k)
}

func (s *summary) printOne(lines []string, depth int) {
	indent := strings.Repeat("    ", depth)
	var result, rest []string
	for _, l := range lines {
		switch t := strings.TrimSpace(l); {
		case strings.HasPrefix(t, "=== "):
		case strings.HasPrefix(t, "--- "):
			result = append(result, indent+strings.TrimLeft(l, " "))
		default:
			rest = append(rest, indent+l)
		}
	}
	for _, l := range append(result, rest...) {
		fmt.Fprint(s.out, l)
	}
}

// logLine matches a line written by t.Log, t.Skip and the like: the
// caller's file and line, then the message.
var logLine = regexp.MustCompile(`^\s+\S+\.go:\d+: `)

// skipReason is the message of the last t.Skip (or t.Log) of a skipped
// test, with the lines that continue it.
func skipReason(lines []string) string {
	var msg []string
	for _, l := range lines {
		switch t := strings.TrimSpace(l); {
		case logLine.MatchString(l):
			msg = []string{logLine.ReplaceAllString(strings.TrimRight(l, "\n"), "")}
		case msg != nil && t != "" && !strings.HasPrefix(t, "--- ") && !strings.HasPrefix(t, "=== "):
			msg = append(msg, t)
		}
	}
	if msg == nil {
		return "no reason given"
	}
	return strings.Join(msg, " ")
}

// MissingPrefix starts the message of a test skipped for a missing
// dependency (internal/testdep.Prefix).
const MissingPrefix = "MISSING DEPENDENCY: "

// skipReport says how many tests were skipped and why: one block per
// reason, the most frequent first, naming up to three of its tests.
func (s *summary) skipReport() string {
	if len(s.skips) == 0 {
		return "no test was skipped\n"
	}
	byReason := map[string][]testKey{}
	var reasons []string
	missing := 0
	for _, sk := range s.skips {
		if byReason[sk.reason] == nil {
			reasons = append(reasons, sk.reason)
		}
		byReason[sk.reason] = append(byReason[sk.reason], sk.test)
		if strings.HasPrefix(sk.reason, MissingPrefix) {
			missing++
		}
	}
	slices.SortStableFunc(reasons, func(a, b string) int { return len(byReason[b]) - len(byReason[a]) })
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s skipped", len(s.skips), plural(len(s.skips), "test was", "tests were"))
	if missing > 0 {
		fmt.Fprintf(&b, ", %d for a missing dependency", missing)
	}
	b.WriteString(":\n")
	for _, r := range reasons {
		ts := byReason[r]
		fmt.Fprintf(&b, "%5d  %s\n", len(ts), r)
		for i, t := range ts {
			if i == 3 {
				fmt.Fprintf(&b, "         and %d more\n", len(ts)-3)
				break
			}
			fmt.Fprintf(&b, "         %s %s\n", t.pkg, t.test)
		}
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
