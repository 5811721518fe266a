package main

import (
	"strings"
	"testing"
)

// stream is a go test -json run of three packages: one passes with a
// skipped test, one fails a subtest, one panics in a test that then never
// ends; the go command says something that is not JSON, and a fourth
// package does not build.
const stream = `{"Action":"start","Package":"ex/a"}
{"Action":"run","Package":"ex/a","Test":"TestOK"}
{"Action":"output","Package":"ex/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"ex/a","Test":"TestOK","Output":"    a_test.go:9: noise from a passing test\n"}
{"Action":"output","Package":"ex/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"ex/a","Test":"TestOK"}
{"Action":"run","Package":"ex/a","Test":"TestPG"}
{"Action":"output","Package":"ex/a","Test":"TestPG","Output":"=== RUN   TestPG\n"}
{"Action":"output","Package":"ex/a","Test":"TestPG","Output":"    a_test.go:20: connecting\n"}
{"Action":"output","Package":"ex/a","Test":"TestPG","Output":"    pgtest.go:29: MISSING DEPENDENCY: no PostgreSQL server:\n"}
{"Action":"output","Package":"ex/a","Test":"TestPG","Output":"        HOOKLEDGER_TEST_POSTGRES is not set\n"}
{"Action":"output","Package":"ex/a","Test":"TestPG","Output":"--- SKIP: TestPG (0.00s)\n"}
{"Action":"skip","Package":"ex/a","Test":"TestPG"}
{"Action":"run","Package":"ex/a","Test":"TestBare"}
{"Action":"output","Package":"ex/a","Test":"TestBare","Output":"--- SKIP: TestBare (0.00s)\n"}
{"Action":"skip","Package":"ex/a","Test":"TestBare"}
{"Action":"output","Package":"ex/a","Output":"PASS\n"}
{"Action":"output","Package":"ex/a","Output":"ok  \tex/a\t0.01s\n"}
{"Action":"pass","Package":"ex/a"}
go: downloading example.com/x v1.0.0
{"Action":"run","Package":"ex/b","Test":"TestParent"}
{"Action":"output","Package":"ex/b","Test":"TestParent","Output":"=== RUN   TestParent\n"}
{"Action":"run","Package":"ex/b","Test":"TestParent/sub"}
{"Action":"output","Package":"ex/b","Test":"TestParent/sub","Output":"=== RUN   TestParent/sub\n"}
{"Action":"output","Package":"ex/b","Test":"TestParent/sub","Output":"    b_test.go:12: got 2, want 3\n"}
{"Action":"output","Package":"ex/b","Test":"TestParent/sub","Output":"--- FAIL: TestParent/sub (0.00s)\n"}
{"Action":"fail","Package":"ex/b","Test":"TestParent/sub"}
{"Action":"output","Package":"ex/b","Test":"TestParent","Output":"--- FAIL: TestParent (0.00s)\n"}
{"Action":"fail","Package":"ex/b","Test":"TestParent"}
{"Action":"output","Package":"ex/b","Output":"FAIL\n"}
{"Action":"output","Package":"ex/b","Output":"FAIL\tex/b\t0.02s\n"}
{"Action":"fail","Package":"ex/b"}
{"Action":"run","Package":"ex/c","Test":"TestHangs"}
{"Action":"output","Package":"ex/c","Test":"TestHangs","Output":"=== RUN   TestHangs\n"}
{"Action":"output","Package":"ex/c","Test":"TestHangs","Output":"panic: test timed out after 5m0s\n"}
{"Action":"output","Package":"ex/c","Output":"FAIL\tex/c\t300.01s\n"}
{"Action":"fail","Package":"ex/c"}
{"ImportPath":"ex/d","Action":"build-output","Output":"# ex/d\n"}
{"ImportPath":"ex/d","Action":"build-output","Output":"d.go:3:1: syntax error\n"}
{"ImportPath":"ex/d","Action":"build-fail"}
{"Action":"start","Package":"ex/d"}
{"Action":"output","Package":"ex/d","Output":"FAIL\tex/d [build failed]\n"}
{"Action":"fail","Package":"ex/d"}
`

func TestSummary(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out)
	if err := s.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	want := `ok  	ex/a	0.01s
go: downloading example.com/x v1.0.0
--- FAIL: TestParent (0.00s)
    --- FAIL: TestParent/sub (0.00s)
        b_test.go:12: got 2, want 3
FAIL
FAIL	ex/b	0.02s
panic: test timed out after 5m0s
FAIL	ex/c	300.01s
# ex/d
d.go:3:1: syntax error
FAIL	ex/d [build failed]
`
	if got := out.String(); got != want {
		t.Errorf("printed:\n%s\nwant:\n%s", got, want)
	}
	if !s.failed {
		t.Error("a run with failures is not reported failed")
	}
	wantSkips := `2 tests were skipped, 1 for a missing dependency:
    1  MISSING DEPENDENCY: no PostgreSQL server: HOOKLEDGER_TEST_POSTGRES is not set
         ex/a TestPG
    1  no reason given
         ex/a TestBare
`
	if got := s.skipReport(); got != wantSkips {
		t.Errorf("skip report:\n%s\nwant:\n%s", got, wantSkips)
	}
}

// A run that passes is not failed, and a report without skips says so.
func TestSummaryOfAPassingRun(t *testing.T) {
	var out strings.Builder
	s := newSummary(&out)
	if err := s.read(strings.NewReader(strings.SplitAfter(stream, `{"Action":"pass","Package":"ex/a","Test":"TestOK"}`+"\n")[0])); err != nil {
		t.Fatal(err)
	}
	if s.failed || s.skipReport() != "no test was skipped\n" || out.String() != "" {
		t.Errorf("failed %v, report %q, printed %q", s.failed, s.skipReport(), out.String())
	}
}

// Many tests skipped for one reason are counted, and three of them named.
func TestSkipReportNamesThreeTestsPerReason(t *testing.T) {
	s := newSummary(&strings.Builder{})
	for _, name := range []string{"T1", "T2", "T3", "T4", "T5"} {
		s.add(event{Action: "output", Package: "p", Test: name, Output: "    x_test.go:1: no chromium\n"})
		s.add(event{Action: "skip", Package: "p", Test: name})
	}
	want := "5 tests were skipped:\n    5  no chromium\n         p T1\n         p T2\n         p T3\n         and 2 more\n"
	if got := s.skipReport(); got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
}

// The conformance report keeps, per package that ran the suite, the
// driver it ran on and the result lines, and nothing of its subtests or
// of other tests.
func TestConformanceReport(t *testing.T) {
	const run = `{"Action":"run","Package":"ex/sqlite","Test":"TestConformance"}
{"Action":"output","Package":"ex/sqlite","Test":"TestConformance","Output":"=== RUN   TestConformance\n"}
{"Action":"output","Package":"ex/sqlite","Test":"TestConformance","Output":"    storetest.go:55: store conformance suite: driver sqlite (file)\n"}
{"Action":"output","Package":"ex/sqlite","Test":"TestConformance/Inbox","Output":"    --- PASS: TestConformance/Inbox (0.01s)\n"}
{"Action":"pass","Package":"ex/sqlite","Test":"TestConformance/Inbox"}
{"Action":"output","Package":"ex/sqlite","Test":"TestConformance","Output":"--- PASS: TestConformance (1.20s)\n"}
{"Action":"pass","Package":"ex/sqlite","Test":"TestConformance"}
{"Action":"output","Package":"ex/sqlite","Test":"TestOther","Output":"--- PASS: TestOther (0.00s)\n"}
{"Action":"pass","Package":"ex/sqlite","Test":"TestOther"}
{"Action":"output","Package":"ex/sqlite","Output":"PASS\n"}
{"Action":"output","Package":"ex/sqlite","Output":"ok  \tex/sqlite\t1.30s\n"}
{"Action":"pass","Package":"ex/sqlite"}
{"Action":"run","Package":"ex/pg","Test":"TestConformance"}
{"Action":"output","Package":"ex/pg","Test":"TestConformance","Output":"    pgtest.go:29: MISSING DEPENDENCY: no PostgreSQL server\n"}
{"Action":"output","Package":"ex/pg","Test":"TestConformance","Output":"--- SKIP: TestConformance (0.00s)\n"}
{"Action":"skip","Package":"ex/pg","Test":"TestConformance"}
{"Action":"output","Package":"ex/pg","Output":"ok  \tex/pg\t0.02s\n"}
{"Action":"pass","Package":"ex/pg"}
{"Action":"output","Package":"ex/other","Output":"ok  \tex/other\t0.02s\n"}
{"Action":"pass","Package":"ex/other"}
`
	s := newSummary(&strings.Builder{})
	if err := s.read(strings.NewReader(run)); err != nil {
		t.Fatal(err)
	}
	want := `    storetest.go:55: store conformance suite: driver sqlite (file)
--- PASS: TestConformance (1.20s)
ok  	ex/sqlite	1.30s
    pgtest.go:29: MISSING DEPENDENCY: no PostgreSQL server
--- SKIP: TestConformance (0.00s)
ok  	ex/pg	0.02s
`
	if got := strings.Join(s.conformance, ""); got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
}
