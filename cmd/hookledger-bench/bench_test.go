package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/bodyview"
	"github.com/hookledger/hookledger/internal/config"
)

func TestChooseTargets(t *testing.T) {
	known := []string{"noop", "sqlite", "postgres"}
	for _, tc := range []struct {
		list, pg string
		want     []string
		err      string
	}{
		{"", "", []string{"noop", "sqlite"}, ""},
		{"", "postgres://x", []string{"noop", "sqlite", "postgres"}, ""},
		{" sqlite , noop", "", []string{"sqlite", "noop"}, ""},
		{"postgres", "", nil, "postgres needs --postgres URL"},
		{"sqlite,mysql", "", nil, `unknown "mysql" (noop, sqlite, postgres)`},
	} {
		defaults := []string{"noop", "sqlite"}
		got, err := chooseTargets(tc.list, defaults, known, tc.pg)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %q", tc.list, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q with %q: %v %v, want %v", tc.list, tc.pg, got, err, tc.want)
		}
		if !slices.Equal(defaults, []string{"noop", "sqlite"}) {
			t.Fatalf("defaults changed to %v", defaults)
		}
	}
}

// Every body the floor acknowledges is in its file, framed, whole.
func TestFloorRingKeepsWhatItAcknowledges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floor.ring")
	ring, err := newFloorRing(path)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ring.append([]byte(fmt.Sprintf("body-%03d-%s", i, strings.Repeat("x", i)))); err != nil {
				t.Errorf("append %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if err := ring.close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for off := 0; off < len(data); {
		size, k := binary.Uvarint(data[off:])
		if k <= 0 || size == 0 {
			break // the zeroed rest of the ring
		}
		off += k
		seen[string(data[off:off+int(size)])] = true
		off += int(size)
	}
	for i := range n {
		if b := fmt.Sprintf("body-%03d-%s", i, strings.Repeat("x", i)); !seen[b] {
			t.Fatalf("acknowledged body %d is not in the ring (%d framed bodies found)", i, len(seen))
		}
	}
}

func TestChooseE2ETargets(t *testing.T) {
	for _, tc := range []struct {
		list, pg string
		want     []string
		err      string
	}{
		{"", "", []string{"sqlite"}, ""},
		{"", "postgres://x", []string{"sqlite", "pg1", "pg2"}, ""},
		{"pg2, sqlite", "postgres://x", []string{"pg2", "sqlite"}, ""},
		{"pg1", "", nil, "pg1 needs --postgres URL"},
		{"sqlite,pg3", "postgres://x", nil, `unknown "pg3" (sqlite, pg1, pg2)`},
		{"pg1,pg1", "postgres://x", nil, `"pg1" given twice`},
	} {
		got, err := chooseE2ETargets(tc.list, tc.pg)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %q", tc.list, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q with %q: %v %v, want %v", tc.list, tc.pg, got, err, tc.want)
		}
	}
}

// Transaction control is told from work by the statement's first word, as
// pg_stat_statements normalizes it.
func TestIsTxControl(t *testing.T) {
	for q, want := range map[string]bool{
		"begin":                              true,
		"BEGIN ISOLATION LEVEL SERIALIZABLE": true,
		"commit":                             true,
		"SAVEPOINT sp1":                      true,
		"release savepoint sp1":              true,
		"  rollback;":                        true,
		"SELECT 1":                           false,
		"INSERT INTO audit VALUES ($1)":      false,
		"":                                   false,
	} {
		if got := isTxControl(q); got != want {
			t.Errorf("isTxControl(%q) = %v, want %v", q, got, want)
		}
	}
}

// The CPU time read from /proc grows as this process works.
func TestReadCPU(t *testing.T) {
	before, err := readCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := before + 50*time.Millisecond
	for i := 0; ; i++ {
		now, err := readCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now >= deadline {
			return
		}
		if i > 50_000_000 {
			t.Fatalf("CPU time stayed at %s after a busy loop (started at %s)", now, before)
		}
	}
}

// Over the rounds every target runs first, and after every other, in turn.
func TestRotated(t *testing.T) {
	for _, tc := range []struct {
		n, r int
		want []int
	}{
		{3, 0, []int{0, 1, 2}},
		{3, 1, []int{1, 2, 0}},
		{3, 2, []int{2, 0, 1}},
		{3, 3, []int{0, 1, 2}},
		{2, 1, []int{1, 0}},
		{1, 5, []int{0}},
	} {
		if got := rotated(tc.n, tc.r); !slices.Equal(got, tc.want) {
			t.Errorf("rotated(%d, %d) = %v, want %v", tc.n, tc.r, got, tc.want)
		}
	}
}

func TestMedianRange(t *testing.T) {
	for _, tc := range []struct {
		in          []float64
		med, lo, hi float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{0.9, 0.7, 1.1}, 0.9, 0.7, 1.1},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		in := slices.Clone(tc.in)
		med, lo, hi := medianRange(in)
		if med != tc.med || lo != tc.lo || hi != tc.hi {
			t.Errorf("medianRange(%v) = %v %v %v, want %v %v %v", tc.in, med, lo, hi, tc.med, tc.lo, tc.hi)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("medianRange reordered its input: %v", in)
		}
	}
}

// The summary of several rounds judges each goal on the median of the
// rounds' ratios, not on any one round: here pg2 beats pg1 in one round
// of three and falls short in the other two.
func TestE2ERoundsSummary(t *testing.T) {
	cell := func(target string, done int) *e2eResult {
		// Allocated: done/1000 KB a webhook (6.0 KB for 6,000 done).
		return &e2eResult{target: target, sendFor: 10 * time.Second, doneInWindow: done, exactlyOne: done,
			acked: int64(done), lat: latencies{time.Duration(done) * time.Millisecond},
			mem: goMem{alloc: float64(done) * float64(done) / 1000 * 1024}}
	}
	rounds := [][]*e2eResult{
		{cell("sqlite", 6000), cell("pg1", 5000), cell("pg2", 5500)}, // pg2/pg1 1.10
		{cell("sqlite", 6000), cell("pg1", 5000), cell("pg2", 4500)}, // 0.90
		{cell("sqlite", 8000), cell("pg1", 6000), cell("pg2", 4800)}, // 0.80
	}
	var b strings.Builder
	printE2ERounds(&b, rounds)
	out := b.String()
	for _, want := range []string{
		"== summary of 3 rounds",
		"pg1/sqlite (target >= 0.5), median of 3 rounds' ratios: done/s sending 0.833 (0.750-0.833) (met)",
		"pg2/pg1 (target >= 1.0), median of 3 rounds' ratios: done/s sending 0.900 (0.800-1.100) (NOT met)",
		"ok in 3 of 3 rounds",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	// The per-target medians: pg2 did 550, 450 and 480 effects/s.
	if !regexp.MustCompile(`(?m)^\s+pg2\s+480 \(450-550\)\s`).MatchString(out) {
		t.Errorf("pg2's median and range are not 480 (450-550):\n%s", out)
	}
	// And what they allocated: 5.5, 4.5 and 4.8 KB a webhook.
	if !regexp.MustCompile(`(?m)^\s+pg2\s.*\s4\.8 \(4\.5-5\.5\)\s+ok in 3 of 3 rounds`).MatchString(out) {
		t.Errorf("pg2's allocation is not 4.8 (4.5-5.5) KB a webhook:\n%s", out)
	}
}

func TestIsBackendOf(t *testing.T) {
	for _, tc := range []struct {
		title string
		want  bool
	}{
		{"postgres: postgres hl_bench_1 127.0.0.1(40112) idle\x00\x00", true},
		{"postgres: app hl_bench_1 [local] UPDATE", true},
		{"postgres: postgres hl_bench_12 127.0.0.1(40112) idle", false},
		{"postgres: walwriter", false},
		{"postgres: autovacuum worker hl_bench_1", false},
		{"/usr/lib/postgresql/15/bin/postgres\x00-D\x00hl_bench_1", false},
		{"", false},
	} {
		if got := isBackendOf(tc.title, "hl_bench_1"); got != tc.want {
			t.Errorf("isBackendOf(%q) = %v, want %v", tc.title, got, tc.want)
		}
	}
}

// TestBackendCPU: a backend present at the start counts from its time
// and wake-ups then, one that connects later from zero, and one that left
// keeps what it was last seen with.
func TestBackendCPU(t *testing.T) {
	use := map[int]procUse{10: {5 * time.Second, 900}, 11: {2 * time.Second, 400}}
	b := newBackendCPU("db")
	b.list = func(string) []int {
		var pids []int
		for pid := range use {
			pids = append(pids, pid)
		}
		return pids
	}
	b.read = func(pid int) (procUse, bool) { u, ok := use[pid]; return u, ok }
	add := func(pid int, cpu time.Duration, wakeups int64) {
		u := use[pid]
		use[pid] = procUse{u.cpu + cpu, u.wakeups + wakeups}
	}
	b.sample() // the start
	add(10, 300*time.Millisecond, 30)
	add(12, 700*time.Millisecond, 70) // connected after the start
	b.sample()
	add(11, time.Second, 100)
	b.sample()
	delete(use, 11) // gone: its second stays counted
	add(12, 100*time.Millisecond, 10)
	b.sample()
	sum, n := b.total()
	if want := 300*time.Millisecond + time.Second + 800*time.Millisecond; sum != want || n != 3 {
		t.Fatalf("total %v over %d backends, want %v over 3", sum, n, want)
	}
	if got, want := b.wakeups(), int64(30+100+80); got != want {
		t.Fatalf("wake-ups %d, want %d", got, want)
	}
}

// TestReadWakeups reads a thread's voluntary context switches, which each
// of its sleeps in the kernel adds to.
func TestReadWakeups(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skipf("no /proc here: %v", err)
	}
	// /proc/PID/status counts one thread's switches (PID's own): read
	// those of the thread that sleeps.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := syscall.Gettid()
	before, err := readWakeups(tid)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		// The thread itself sleeps in the kernel: time.Sleep parks the
		// goroutine, and the runtime may not block its thread every time
		// (under -race a sleep was once two switches short of three).
		sleepThread(t, 2*time.Millisecond)
	}
	after, err := readWakeups(tid)
	if err != nil {
		t.Fatal(err)
	}
	if after < before+3 {
		t.Fatalf("wake-ups went from %d to %d over three sleeps, want at least 3 more", before, after)
	}
	if _, err := readWakeups(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

// sleepThread blocks the calling thread in the kernel for d. A signal
// (the Go runtime's preemption, the garbage collector's) cuts a
// nanosleep short with EINTR: the rest of it is slept again, so the
// thread always blocks, and a sleep is never an error.
func sleepThread(t *testing.T, d time.Duration) {
	t.Helper()
	ts := syscall.NsecToTimespec(d.Nanoseconds())
	for {
		var rest syscall.Timespec
		err := syscall.Nanosleep(&ts, &rest)
		if err == nil {
			return
		}
		if !errors.Is(err, syscall.EINTR) {
			t.Fatal(err)
		}
		ts = rest
	}
}

// The webhook's PG CPU is set beside the floor in lone round trips' worth,
// and the floor's figures print in microseconds; without a floor (or
// without the backends' CPU) each is "-". The backends' wake-ups print
// per webhook.
func TestPGCPUInRoundTrips(t *testing.T) {
	var use procUse
	b := newBackendCPU("db")
	b.list = func(string) []int { return []int{7} }
	b.read = func(int) (procUse, bool) { return use, true }
	r := &e2eResult{acked: 200, pgCPU: b, pg: &pgCost{}}
	if got := r.pgWakeupsPerEvent(); got != "-" {
		t.Errorf("wake-ups before any backend was read: %q, want -", got)
	}
	b.sample()
	use = procUse{cpu: 800 * time.Millisecond, wakeups: 1300}
	b.sample()
	if got := r.pgWakeupsPerEvent(); got != "6.5" {
		t.Errorf("wake-ups per webhook: %q, want 6.5", got)
	}
	if got := r.pgCPUInRoundTrips(); got != "-" {
		t.Errorf("without a floor: %q, want -", got)
	}
	r.pg.floor = &pgFloor{rate: 100, calls: 300, roundTrip: 250 * time.Microsecond, commit: 600 * time.Microsecond}
	if got := r.pgCPUInRoundTrips(); got != "16.0" { // 4 ms a webhook over 250 us
		t.Errorf("in round trips: %q, want 16.0", got)
	}
	rt := r.pg.floorFigure(func(f *pgFloor) time.Duration { return f.roundTrip })
	commit := r.pg.floorFigure(func(f *pgFloor) time.Duration { return f.commit })
	if rt != "250" || commit != "600" {
		t.Errorf("floor figures %q and %q, want 250 and 600", rt, commit)
	}
}

// TestPrintTopStatements: each listed statement shows its calls per
// webhook, the buffers one call read and its time, on one line.
func TestPrintTopStatements(t *testing.T) {
	c := &pgCost{events: 200, top: []pgStatement{
		{calls: 300, buffers: 4500, ms: 12, query: "SELECT 1\n  FROM entities"},
		{calls: 0, buffers: 0, query: "COMMIT"},
	}}
	var b strings.Builder
	printTopStatements(&b, "pg2", c)
	got := b.String()
	for _, want := range []string{
		"pg2: statements by calls per event:",
		"1.50          15.0     40.0  SELECT 1 FROM entities",
		"0.00           0.0      0.0  COMMIT",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
}

// A table's row versions are the run's, not the database's since it was
// made: counters before the run are taken off, tables the run did not
// write are left out, and the table with the most versions comes first.
func TestTableDelta(t *testing.T) {
	base := pgCounters{tables: map[string]pgTable{
		"events":      {name: "events", indexes: 9, ins: 10, upd: 10, hot: 2},
		"signals":     {name: "signals", indexes: 2, upd: 5, hot: 5},
		"route_queue": {name: "route_queue", indexes: 1, ins: 50, del: 50, heapBuffers: 30, indexBuffers: 100},
	}}
	end := pgCounters{tables: map[string]pgTable{
		"events":      {name: "events", indexes: 9, ins: 210, upd: 210, hot: 2, heapBuffers: 900, indexBuffers: 4000},
		"signals":     {name: "signals", indexes: 2, upd: 5, hot: 5},
		"route_queue": {name: "route_queue", indexes: 1, ins: 250, del: 250, heapBuffers: 30, indexBuffers: 900},
		"effects":     {name: "effects", indexes: 18, ins: 200, upd: 400, hot: 10, indexBuffers: 9000},
	}}
	got := end.tableDelta(base)
	var names []string
	for _, tb := range got {
		names = append(names, tb.name)
	}
	if want := []string{"effects", "events", "route_queue"}; !slices.Equal(names, want) {
		t.Fatalf("tables %v, want %v", names, want)
	}
	if ev := got[1]; ev.ins != 200 || ev.upd != 200 || ev.hot != 0 || ev.indexBuffers != 4000 || ev.indexes != 9 {
		t.Errorf("events delta %+v", ev)
	}
	c := &pgCost{events: 200, tables: got}
	var b strings.Builder
	printTableVersions(&b, "pg1", c)
	for _, want := range []string{
		"pg1: row versions per event by table",
		"effects                  18      1.00     2.00     0.05     0.00           0.0           45.0",
		"route_queue               1      1.00     0.00     0.00     1.00           0.0            4.0",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, b.String())
		}
	}
}

// The bigbody bodies are what their names say: the baseline and the
// largest body the console indents are indented, and the largest body
// the receiver accepts is exactly its default limit, valid JSON, shown
// cut.
func TestBigbodyBodies(t *testing.T) {
	now := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	cases := bigbodyCases()
	for i, wantPretty := range []bool{true, true, false} {
		b := cases[i].body("evt_1", now)
		v := bodyview.Render(b)
		if !json.Valid(b) || v.Pretty != wantPretty {
			t.Errorf("%s: valid JSON %v, pretty-printed %v; want valid and %v", cases[i].name, json.Valid(b), v.Pretty, wantPretty)
		}
	}
	if b := cases[1].body("evt_1", now); len(b) < bodyview.PrettyMaxBytes*9/10 {
		t.Errorf("largest pretty-printed body: %d bytes, want near %d", len(b), bodyview.PrettyMaxBytes)
	}
	if b := cases[2].body("evt_1", now); len(b) != config.DefaultMaxBodyBytes || !bodyview.Render(b).Cut() ||
		!bytes.Contains(b, []byte(strings.Repeat("[", 9990))) {
		t.Errorf("largest accepted body: %d bytes, want %d, cut, nested 9,990 deep", len(b), config.DefaultMaxBodyBytes)
	}
}

// --tracing adds a target per ratio after each hookledger target, and
// refuses what is not a ratio.
func TestWithTracing(t *testing.T) {
	got, err := withTracing([]string{targetNoop, targetFloor, targetSQLite, targetPostgres}, "0.01, 1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{targetNoop, targetFloor, targetSQLite, "sqlite@0.01", "sqlite@1", targetPostgres, "postgres@0.01", "postgres@1"}
	if !slices.Equal(got, want) {
		t.Fatalf("targets %q, want %q", got, want)
	}
	got, err = withTracing([]string{e2eSQLite, e2ePG1}, "1", e2eSQLite, e2ePG1, e2ePG2)
	if err != nil || !slices.Equal(got, []string{e2eSQLite, "sqlite@1", e2ePG1, "pg1@1"}) {
		t.Fatalf("e2e targets %q (%v)", got, err)
	}
	if n := targetName(e2eTargetNames, "pg1@1"); n != "one process on PostgreSQL, tracing at 1" {
		t.Fatalf("target name %q", n)
	}
	for _, bad := range []string{"0", "2", "x", "-1"} {
		if _, err := withTracing([]string{targetSQLite}, bad); err == nil {
			t.Errorf("--tracing %q accepted", bad)
		}
	}
}

// Each stage's wait and work come from the right pair of stamps, and a
// stamp the ledger lacks (0) leaves the stage's measure out instead of
// counting a span from the epoch.
func TestE2EBreakdown(t *testing.T) {
	rows := []stampRow{
		{eventID: "a", received: 1000, routed: 5000, claimed: 8000, applied: 9000, created: 9000, leased: 12000, called: 13000, callUS: 700, settled: 14000},
		{eventID: "b", received: 1000, routed: 2000},
	}
	acks := map[string]int64{"a": 3000, "b": 0}
	got := breakdown(rows, func(id string) int64 { return acks[id] })
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	want := []struct {
		name       string
		wait, work []time.Duration
	}{
		{"receive", []time.Duration{us(2000)}, nil},
		{"route", []time.Duration{us(2000)}, nil},
		{"process", []time.Duration{us(3000)}, []time.Duration{us(1000)}},
		{"claim", []time.Duration{us(3000)}, nil},
		{"call", []time.Duration{us(1000)}, []time.Duration{us(700)}},
	}
	for i, w := range want {
		if e2eStages[i].name != w.name {
			t.Fatalf("stage %d is %q, want %q", i, e2eStages[i].name, w.name)
		}
		if !slices.Equal(got[i].wait, latencies(w.wait)) || !slices.Equal(got[i].work, latencies(w.work)) {
			t.Errorf("%s: wait %v work %v, want %v and %v", w.name, got[i].wait, got[i].work, w.wait, w.work)
		}
	}
}

// A saturated SQLite target is reported by its capacity against the
// door probe (the goal) and the ingest probe, with its CPU and writer
// time per effect; a saturated PostgreSQL target against the ingest probe
// alone (the door probe is SQLite's); one that kept up by its latency
// against the latency goals.
func TestPrintE2ECapacity(t *testing.T) {
	lat := func(ds ...time.Duration) latencies { return mergeLatencies([]latencies{ds}) }
	slow := &e2eResult{target: "sqlite", sendFor: 10 * time.Second, drainedIn: 10 * time.Second, scheduled: 10000, acked: 10000,
		exactlyOne: 6000, cpu: []time.Duration{6 * time.Second}, mem: goMem{writerBusy: 19, writerCommit: 5}}
	slowPG := &e2eResult{target: "pg1", sendFor: 10 * time.Second, drainedIn: 10 * time.Second, scheduled: 10000, acked: 10000,
		exactlyOne: 8000, cpu: []time.Duration{6 * time.Second}}
	fast := &e2eResult{target: "pg2", sendFor: 10 * time.Second, drainedIn: 100 * time.Millisecond, scheduled: 1000, acked: 1000,
		exactlyOne: 1000, cpu: []time.Duration{time.Second}, lat: lat(5*time.Millisecond, 30*time.Millisecond)}
	door := &receiveResult{sent: 20000, elapsed: 5 * time.Second, writerBusy: 4.9}
	bare := *slow // the same result in a run without a door probe
	slow.door, slowPG.door, fast.door = door, door, door
	var b bytes.Buffer
	printE2ECapacity(&b, &e2eRunInfo{probeRate: 1000}, []*e2eResult{slow, slowPG, fast})
	out := b.String()
	for _, want := range []string{
		"sqlite capacity (saturated): 300 effects/s over the whole run = 0.07 x the door's 4000 durable acks/s alone (goal >= 0.5: NOT met); " +
			"0.30 x the ingest probe's 1000 acks/s (its pipeline behind it); CPU 1.00 ms per effect",
		"SQLite writer: 3167 us per effect done, the door's 245 us per request alone (busy 0.98 of its probe): where both are bound by the writer, " +
			"capacity over the door's rate is about 0.08 (goal >= 0.5 needs at most 490 us per effect)",
		"pg1 capacity (saturated): 400 effects/s over the whole run = 0.40 x the ingest probe's 1000 acks/s (its pipeline behind it); CPU 0.75 ms per effect",
		"pg2 kept up with 100/s: p50 5.00 ms (goal <= 10.0 at half the capacity: met), p99 30.0 ms (goal <= 25.0: NOT met); CPU 1.00 ms per effect",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printE2ECapacity(&b, &e2eRunInfo{}, []*e2eResult{&bare})
	if !strings.Contains(b.String(), "= no door or ingest probe in this run: no ratio;") || strings.Contains(b.String(), "door's") {
		t.Errorf("without probes, a ratio or a writer bound:\n%s", b.String())
	}
}

// The CPU bound of a saturated target: the CPUs over what the servers and
// this process spent per effect, that bound over the door probe, the cost
// per effect the capacity goal needs, and each probe's own cost per ack.
func TestE2ECPUBound(t *testing.T) {
	r := &e2eResult{target: "sqlite", sendFor: 10 * time.Second, drainedIn: 10 * time.Second, exactlyOne: 6000,
		cpu: []time.Duration{4 * time.Second, 2 * time.Second}, clientCPU: 3 * time.Second}
	door := &receiveResult{sent: 20000, elapsed: 5 * time.Second, serverCPU: 2 * time.Second, clientCPU: 2 * time.Second}
	run := &e2eRunInfo{probeRate: 1000, probeCPU: ackCPU{server: 2 * time.Second, client: time.Second, n: 10000}}
	bare := *r // the same result in a run without a door probe
	r.door = door
	got := cpuBound(2, run, r)
	want := "CPU bound: serve 1.00 + load generator and destination 0.50 = 1.50 ms per effect; " +
		"were the 2 CPUs the only limit, at most 1333 effects/s (measured 300, 0.23 of that); " +
		"that is 0.33 of the door's 4000 acks/s alone (goal >= 0.5 needs at most 1.00 ms per effect); " +
		"an acknowledgement at the door cost 0.10 + 0.10 = 0.20 ms, an effect 7.5 times that; " +
		"an acknowledgement of the ingest probe cost 0.20 + 0.10 = 0.30 ms (the pipeline behind it included), an effect 5.0 times that"
	if got != want {
		t.Errorf("cpuBound:\n got %q\nwant %q", got, want)
	}
	if got := cpuBound(2, &e2eRunInfo{}, &bare); !strings.HasSuffix(got, "(measured 300, 0.23 of that)") {
		t.Errorf("without a probe the line ends at the bound: %q", got)
	}
	pg := *r
	pg.target = "pg1"
	if got := cpuBound(2, &e2eRunInfo{}, &pg); strings.Contains(got, "door") {
		t.Errorf("a PostgreSQL target is set against SQLite's door: %q", got)
	}
	if got := cpuBound(2, run, &e2eResult{}); got != "" {
		t.Errorf("nothing done, yet a bound: %q", got)
	}
}

// The processors a target that kept up took: each part's CPU per
// acknowledged webhook, the database's backends only where measured, and
// their sum times the rate sent, in CPUs.
func TestE2ECPUShare(t *testing.T) {
	backends := newBackendCPU("db")
	cpu := map[int]time.Duration{7: time.Second}
	backends.list = func(string) []int { return []int{7} }
	backends.read = func(pid int) (procUse, bool) { c, ok := cpu[pid]; return procUse{cpu: c}, ok }
	backends.sample() // the start
	cpu[7] += 10 * time.Second
	backends.sample()
	pg := &e2eResult{target: "pg1", acked: 6000, sendFor: 10 * time.Second,
		cpu: []time.Duration{5 * time.Second, 1 * time.Second}, clientCPU: 3 * time.Second, pgCPU: backends}
	want := "CPUs, from sending until stopped: serve 1.00 + PostgreSQL 1.67 + load generator and destination 0.50 = 3.17 ms per webhook, 1.90 of the 2 CPUs at 600/s"
	if got := cpuShare(2, pg); got != want {
		t.Errorf("cpuShare:\n got %q\nwant %q", got, want)
	}
	sqlite := *pg
	sqlite.target, sqlite.pgCPU = "sqlite", nil
	want = "CPUs, from sending until stopped: serve 1.00 + load generator and destination 0.50 = 1.50 ms per webhook, 0.90 of the 2 CPUs at 600/s"
	if got := cpuShare(2, &sqlite); got != want {
		t.Errorf("cpuShare without the database's backends:\n got %q\nwant %q", got, want)
	}
	if got := cpuShare(2, &e2eResult{sendFor: time.Second}); got != "" {
		t.Errorf("nothing acknowledged, yet a share: %q", got)
	}
}

// Goal 2's row of the table: a SQLite target saturated in every round,
// its median capacity over the door probe, with the writer's time per
// effect beside the door's per request; none for a target that kept up
// in some round, nor without a door probe.
func TestCapacityHeadlines(t *testing.T) {
	door := &receiveResult{sent: 20000, elapsed: 5 * time.Second, writerBusy: 4.9}
	sat := func(done int, busy float64) *e2eResult {
		return &e2eResult{target: "sqlite", sendFor: 10 * time.Second, drainedIn: 10 * time.Second, scheduled: 30000, acked: 30000,
			exactlyOne: done, mem: goMem{writerBusy: busy}, door: door}
	}
	rounds := [][]*e2eResult{{sat(30000, 19.5)}, {sat(28000, 19.6)}, {sat(32000, 19.2)}}
	rows := capacityHeadlines(rounds, " (median of 3 rounds)")
	if len(rows) != 1 {
		t.Fatalf("%d rows, want 1: %+v", len(rows), rows)
	}
	want := headline{figure: "one process on SQLite: capacity (saturated) (median of 3 rounds)",
		value:    "1,500 effects/s over the whole run; writer 650 us per effect",
		baseline: "the door alone (receive's SQLite cell), same round: 4,000 durable acks/s, writer 245 us per request",
		ratio:    "0.38", goal: ">= 0.5: not met"}
	if rows[0] != want {
		t.Errorf("row:\n got %+v\nwant %+v", rows[0], want)
	}

	// A door probed in each round: every round's capacity is set against
	// its own door, and the ratio is the median of those ratios (0.50,
	// 0.35, 0.36), neither the median capacity over the median door
	// (1,400 / 3,600 = 0.39) nor over one round's door.
	doors := []*receiveResult{
		{sent: 15000, elapsed: 5 * time.Second, writerBusy: 4.9}, // 3,000/s
		{sent: 20000, elapsed: 5 * time.Second, writerBusy: 4.9}, // 4,000/s
		{sent: 18000, elapsed: 5 * time.Second, writerBusy: 4.9}, // 3,600/s
	}
	perRound := [][]*e2eResult{{sat(30000, 19.5)}, {sat(28000, 19.6)}, {sat(26000, 19.2)}}
	for i, rs := range perRound {
		rs[0].door = doors[i]
	}
	rows = capacityHeadlines(perRound, " (median of 3 rounds)")
	if len(rows) != 1 {
		t.Fatalf("%d rows with a door per round, want 1: %+v", len(rows), rows)
	}
	want = headline{figure: "one process on SQLite: capacity (saturated) (median of 3 rounds)",
		value:    "1,400 effects/s over the whole run; writer 700 us per effect",
		baseline: "the door alone (receive's SQLite cell), same round: 3,600 durable acks/s, writer 272 us per request",
		ratio:    "0.36", goal: ">= 0.5: not met"}
	if rows[0] != want {
		t.Errorf("row with a door per round:\n got %+v\nwant %+v", rows[0], want)
	}
	kept := sat(30000, 10)
	kept.drainedIn = 0
	if rows := capacityHeadlines([][]*e2eResult{{sat(30000, 19)}, {kept}}, ""); len(rows) != 0 {
		t.Errorf("a target that kept up in a round has a capacity row: %+v", rows)
	}
	for _, rs := range rounds {
		rs[0].door = nil // a run without a door probe
	}
	if rows := capacityHeadlines(rounds, ""); len(rows) != 0 {
		t.Errorf("no door probe, yet a capacity row: %+v", rows)
	}
}

// The writer's share of the run is its busy time over sending and
// draining; a store that exports no writer time (PostgreSQL) gets no line.
func TestE2EWriterLine(t *testing.T) {
	r := &e2eResult{sendFor: 15 * time.Second, drainedIn: 5 * time.Second, mem: goMem{writerBusy: 19, writerCommit: 4.75}}
	want := "SQLite writer: busy 0.95 of the run (19.0 of 20.0 s, sending and draining), 0.25 of that committing (WAL writes, fsync, checkpoints)"
	if got := writerLine(r); got != want {
		t.Errorf("writerLine:\n got %q\nwant %q", got, want)
	}
	if got := writerLine(&e2eResult{sendFor: time.Second}); got != "" {
		t.Errorf("no writer time, yet a line: %q", got)
	}
}

func TestReceiveWriterLine(t *testing.T) {
	r := &receiveResult{sent: 40000, elapsed: 10 * time.Second, writerBusy: 9.8, writerCommit: 6.86}
	want := "SQLite writer: busy 0.98 of the measured time, 0.70 of that committing; 245 us of writer time per request (172 committing)"
	if got := receiveWriterLine(r); got != want {
		t.Errorf("receiveWriterLine:\n got %q\nwant %q", got, want)
	}
	if got := receiveWriterLine(&receiveResult{sent: 10, elapsed: time.Second}); got != "" {
		t.Errorf("no writer time (PostgreSQL), yet a line: %q", got)
	}
	r.writerErr = errors.New("GET /metrics answered 401 Unauthorized")
	if got := receiveWriterLine(r); !strings.Contains(got, "not read") || !strings.Contains(got, "401") {
		t.Errorf("a failed read is not said: %q", got)
	}
}

// The destination sorts each first call by its webhook's sequence number:
// the warm-up's into their own latencies, the rest into the figures; a
// second call and an unknown event into neither.
func TestSinkLeavesTheWarmupOutOfTheLatencies(t *testing.T) {
	s := newSink()
	s.warm = 2
	sent := time.Now().Add(-5 * time.Millisecond)
	for seq := range int64(5) {
		s.sent.Store(e2eEventID(seq), sent)
	}
	call := func(id string) {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"event": "`+id+`"}`)))
		if rec.Code != http.StatusOK {
			t.Fatalf("call for %s: %d", id, rec.Code)
		}
	}
	for seq := range int64(5) {
		call(e2eEventID(seq))
	}
	call(e2eEventID(4))
	call("evt_other")
	if len(s.warmLat) != 2 || len(s.lat) != 3 || s.unknown != 1 || s.calls[e2eEventID(4)] != 2 {
		t.Fatalf("warm-up latencies %d, latencies %d, unknown %d, calls of the fifth %d; want 2, 3, 1, 2",
			len(s.warmLat), len(s.lat), s.unknown, s.calls[e2eEventID(4)])
	}
	if !warmSend("evt_e2e_1", 2) || warmSend("evt_e2e_2", 2) || warmSend("evt_other", 2) {
		t.Error("warmSend: the first two sequence numbers are the warm-up's, nothing else")
	}
}

// receive --unrouted serves a config hookledger accepts, whose one flow
// takes the benchmark's source but none of its events (invoice.paid):
// every event is stored unrouted on receipt. (The run itself checks the
// admin API's sample for the disposition.)
func TestReceiveUnroutedConfig(t *testing.T) {
	for _, unrouted := range []bool{false, true} {
		e := &receiveEnv{f: &receiveFlags{unrouted: unrouted}, token: "t0ken-t0ken-t0ken-t0ken-t0ken-t0ken", secret: "whsec_" + strings.Repeat("ab", 24)}
		path := filepath.Join(t.TempDir(), "hookledger.yaml")
		if err := e.writeConfig(path, "sqlite:"+filepath.Join(t.TempDir(), "h.db"), ""); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path, func(string) (string, bool) { return "", false })
		if err != nil {
			t.Fatalf("unrouted %v: %v", unrouted, err)
		}
		switch {
		case !unrouted && len(cfg.Flows) != 0:
			t.Errorf("without --unrouted: flows %+v, want none", cfg.Flows)
		case unrouted && (len(cfg.Flows) != 1 || cfg.Flows[0].Source != "stripe" || !slices.Equal(cfg.Flows[0].Events, []string{"customer.*"})):
			t.Errorf("with --unrouted: flows %+v, want one on stripe for customer.* only", cfg.Flows)
		}
	}
}
