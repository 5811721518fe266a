package main

import (
	"fmt"
	"io"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// printE2E prints one round's report and says whether every target
// called every acknowledged webhook exactly once.
func printE2E(w io.Writer, f *e2eFlags, run *e2eRunInfo, results []*e2eResult) bool {
	printE2ESetup(w, f, run, results)
	printColumns(w, e2eColumns, results)
	fmt.Fprintln(w, "send/s: acknowledged webhooks per second of sending; late: sends that found every sender busy (>10 ms behind schedule).")
	fmt.Fprintln(w, "done/s sending: effects called at the destination while sending; done/s whole run: all effects over sending + drain,")
	fmt.Fprintln(w, "  the capacity when the send rate is above what the target sustains; drain s: after sending until the last effect.")
	fmt.Fprintln(w, "p50/p99/max: webhook sent -> destination called, for the webhooks sent after the warm-up (--warmup). CPU ms/event: user+system time of the serve process(es)\n  from the start of sending until stopped, per acknowledged webhook (this process and PostgreSQL not included).")
	fmt.Fprintln(w, "alloc KB/event: what the serve process(es)' Go runtime allocated from the start of sending until the backlog drained,\n  per acknowledged webhook (their /metrics): steadier than CPU on a shared machine, so a change that allocates less shows there first.")
	fmt.Fprintln(w, "PG CPU ms/event: the same for the target database's backends, read from /proc when PostgreSQL runs on this\n  machine (- otherwise); PostgreSQL's shared processes (WAL writer, checkpointer, autovacuum) not included.")
	printE2ERatios(w, results)
	printE2ECapacity(w, run, results)
	printE2EStages(w, results)
	for _, r := range results {
		if r.wal != nil {
			r.wal.print(w, r.target, f.walFrames, 25)
		}
	}
	printE2EPostgres(w, results)
	fmt.Fprintln(w)
	allOK := true
	for _, r := range results {
		printE2EDetails(w, f, r)
		allOK = allOK && r.ok()
	}
	if allOK {
		fmt.Fprintln(w, "exactly once: every target, every acknowledged webhook called exactly once under one episode key")
	} else {
		fmt.Fprintln(w, "exactly once: FAILED (see above)")
	}
	return allOK
}

// printE2ESetup says what ran, on what machine, at what send rate, and
// against which door probe (the round's, carried by its results).
func printE2ESetup(w io.Writer, f *e2eFlags, run *e2eRunInfo, results []*e2eResult) {
	fmt.Fprintf(w, "hookledger-bench e2e: hookledger serve, Stripe-signed invoice events (~%d B), one effect per event, each event its own entity,\n",
		len(stripeBody("evt_x", "in_x", time.Now())))
	fmt.Fprintf(w, "loopback destination in the load generator; %d CPUs shared by all (GOMAXPROCS %d); load average %s before, %s after\n",
		runtime.NumCPU(), runtime.GOMAXPROCS(0), run.loadBefore, run.loadAfter)
	fmt.Fprintln(w, "targets: sqlite = 1 process on a SQLite file; pg1 = 1 process on PostgreSQL; pg2 = 2 processes on one PostgreSQL database, webhooks alternating")
	if run.probeRate > 0 {
		fmt.Fprintf(w, "send rate, the same for every target: %.2f x the SQLite ingest probe (closed loop, %d clients, own fresh server: %.0f webhooks/s) = %.0f/s for %s\n",
			f.rateShare, f.probeClients, run.probeRate, run.rate, f.duration)
	} else {
		fmt.Fprintf(w, "send rate, the same for every target (--rate): %.0f/s for %s; no ingest probe\n", run.rate, f.duration)
	}
	if i := slices.IndexFunc(results, func(r *e2eResult) bool { return r.door != nil }); i >= 0 {
		d := results[i].door
		fmt.Fprintf(w, "door probe, the baseline of SQLite's capacity: the receive benchmark's SQLite cell (closed loop, %d clients, own fresh server, no flow behind the door): %.0f durable acks/s, p99 %s ms, %d of %d acknowledged events in the store\n",
			d.clients, d.rate(), ms(d.lat.pct(0.99)), d.stored, d.acked)
	}
	fmt.Fprintln(w)
}

// e2eColumn is one column of a results table: its heading and how a
// result fills its cell. A table's heading and rows are printed from one
// list of columns, so neither can gain a column the other lacks.
type e2eColumn struct {
	head string
	cell func(r *e2eResult) string
}

// printColumns prints a right-aligned table of one row per result.
func printColumns(w io.Writer, cols []e2eColumn, results []*e2eResult) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	for _, c := range cols {
		fmt.Fprint(tw, c.head, "\t")
	}
	fmt.Fprintln(tw)
	for _, r := range results {
		for _, c := range cols {
			fmt.Fprint(tw, c.cell(r), "\t")
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// e2eColumns are the main table's: throughput, latency, memory, CPU and
// the exactly-once verdict of each target.
var e2eColumns = []e2eColumn{
	{"target", func(r *e2eResult) string { return r.target }},
	{"procs", func(r *e2eResult) string { return fmt.Sprintf("%d", r.processes) }},
	{"send/s", func(r *e2eResult) string { return fmt.Sprintf("%.0f", rate(r.acked, r.sendFor)) }},
	{"acked", func(r *e2eResult) string { return fmt.Sprintf("%d", r.acked) }},
	{"late", func(r *e2eResult) string { return fmt.Sprintf("%d", r.late) }},
	{"done/s sending", func(r *e2eResult) string { return fmt.Sprintf("%.0f", r.windowRate()) }},
	{"done/s whole run", func(r *e2eResult) string { return fmt.Sprintf("%.0f", r.wholeRate()) }},
	{"drain s", func(r *e2eResult) string {
		drain := fmt.Sprintf("%.1f", r.drainedIn.Seconds())
		if r.drainBound {
			drain = ">" + drain
		}
		return drain
	}},
	{"p50 ms", func(r *e2eResult) string { return ms(r.lat.pct(0.5)) }},
	{"p99 ms", func(r *e2eResult) string { return ms(r.lat.pct(0.99)) }},
	{"max ms", func(r *e2eResult) string { return ms(r.lat.pct(1)) }},
	{"peak RSS MiB", func(r *e2eResult) string {
		var rss []string
		for i := range r.samples {
			rss = append(rss, mib(peakHWM(r.samples[i])))
		}
		return strings.Join(rss, " + ")
	}},
	{"CPU ms/event", func(r *e2eResult) string {
		var cpuSum time.Duration
		for _, c := range r.cpu {
			cpuSum += c
		}
		return fmt.Sprintf("%.2f", float64(cpuSum)/float64(time.Millisecond)/float64(max(r.acked, 1)))
	}},
	{"alloc KB/event", func(r *e2eResult) string {
		if kb, ok := r.allocPerEvent(); ok {
			return fmt.Sprintf("%.1f", kb)
		}
		return "-"
	}},
	{"PG CPU ms/event", (*e2eResult).pgCPUPerEvent},
	{"exactly once", func(r *e2eResult) string { return fmt.Sprintf("%s %d/%d", r.verdict(), r.exactlyOne, r.acked) }},
}

// allocPerEvent is the KB the servers allocated per acknowledged webhook;
// false when their /metrics could not be read.
func (r *e2eResult) allocPerEvent() (float64, bool) {
	if r.memErr != nil {
		return 0, false
	}
	return r.mem.alloc / 1024 / float64(max(r.acked, 1)), true
}

// verdict is the exactly-once verdict of a target, as the table and the
// details print it.
func (r *e2eResult) verdict() string {
	if !r.ok() {
		return "FAILED"
	}
	return "ok"
}

// printE2ERatios compares the targets against their goals: one PostgreSQL
// process at least half of SQLite, two processes at least one
// (e2eRatios).
func printE2ERatios(w io.Writer, results []*e2eResult) {
	by := map[string]*e2eResult{}
	for _, r := range results {
		by[r.target] = r
	}
	fmt.Fprintln(w)
	line := func(what string, x, y, goal float64) string {
		if y == 0 {
			return what + " -"
		}
		return fmt.Sprintf("%s %.2f (%s)", what, x/y, metOrNot(x/y, goal))
	}
	if by[e2ePG1] != nil && (by[e2eSQLite] != nil || by[e2ePG2] != nil) {
		fmt.Fprintln(w, "ratios: done/s sending compares what each target did at this send rate (a target that keeps up does the send rate);")
		fmt.Fprintln(w, "  done/s whole run, with --rate above what every target sustains, compares capacities.")
	}
	for _, q := range e2eRatios {
		a, b := by[q.num], by[q.den]
		if a == nil || b == nil {
			continue
		}
		fmt.Fprintf(w, "%s (target >= %.1f): %s; %s\n", q.name, q.goal,
			line("done/s sending", a.windowRate(), b.windowRate(), q.goal), line("done/s whole run", a.wholeRate(), b.wholeRate(), q.goal))
	}
}

// pgCounted formats a figure that only pg_stat_statements gives, "-"
// without it.
func pgCounted(c *pgCost, format string, v float64) string {
	if !c.counted {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// e2ePGColumns are the PostgreSQL work table's, per acknowledged webhook.
var e2ePGColumns = []e2eColumn{
	{"target", func(r *e2eResult) string { return r.target }},
	{"events", func(r *e2eResult) string { return fmt.Sprintf("%d", r.pg.events) }},
	{"transactions/event", func(r *e2eResult) string { return fmt.Sprintf("%.2f", r.pg.perEvent(r.pg.commits)) }},
	{"rollbacks", func(r *e2eResult) string { return fmt.Sprintf("%d", r.pg.rollbacks) }},
	{"statements/event", func(r *e2eResult) string { return pgCounted(r.pg, "%.1f", r.pg.perEvent(r.pg.work.calls)) }},
	{"of which BEGIN/COMMIT/SAVEPOINT", func(r *e2eResult) string { return pgCounted(r.pg, "%.1f", r.pg.perEvent(r.pg.txControl)) }},
	{"rows/event", func(r *e2eResult) string { return pgCounted(r.pg, "%.1f", r.pg.perEvent(r.pg.work.rows)) }},
	{"WAL B/event", func(r *e2eResult) string { return pgCounted(r.pg, "%.0f", r.pg.perEvent(r.pg.work.walBytes)) }},
	{"buffers/event", func(r *e2eResult) string { return pgCounted(r.pg, "%.0f", r.pg.perEvent(r.pg.work.buffers)) }},
	{"statement ms/event", func(r *e2eResult) string { return pgCounted(r.pg, "%.2f", r.pg.work.ms/float64(max(r.pg.events, 1))) }},
	{"floor: round trip us", func(r *e2eResult) string {
		return r.pg.floorFigure(func(f *pgFloor) time.Duration { return f.roundTrip })
	}},
	{"floor: commit us", func(r *e2eResult) string { return r.pg.floorFigure(func(f *pgFloor) time.Duration { return f.commit }) }},
	{"PG CPU in floor round trips", (*e2eResult).pgCPUInRoundTrips},
	{"PG wake-ups/event", (*e2eResult).pgWakeupsPerEvent},
	{"idle transactions/s", func(r *e2eResult) string { return fmt.Sprintf("%.0f", r.pg.idleCommits) }},
	{"idle statements/s", func(r *e2eResult) string { return pgCounted(r.pg, "%.0f", r.pg.idleStatements) }},
}

// printE2EPostgres prints the PostgreSQL targets' database work per
// webhook, and each one's most frequent statements.
func printE2EPostgres(w io.Writer, results []*e2eResult) {
	var pgs []*e2eResult
	for _, r := range results {
		if r.pg != nil {
			pgs = append(pgs, r)
		}
	}
	if len(pgs) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "PostgreSQL work per acknowledged webhook, from sending until the servers stopped (the target's database only):")
	printColumns(w, e2ePGColumns, pgs)
	fmt.Fprintln(w, "transactions: pg_stat_database xact_commit (every autocommit statement is one); statements: pg_stat_statements calls")
	if !pgs[0].pg.counted {
		fmt.Fprintln(w, "  (pg_stat_statements is not in the server's shared_preload_libraries: statements not counted; scripts/bench.sh loads it).")
	} else {
		fmt.Fprintln(w, "  (top-level, utility statements included); rows returned or changed, WAL bytes written and shared buffers read")
		fmt.Fprintln(w, "  (hit or read in) by those statements: counts of work that do not move with the machine's load.")
		fmt.Fprintln(w, "  Statement ms: PostgreSQL's planning and execution time of those statements (it moves with the load;")
		fmt.Fprintln(w, "  beside PG CPU ms/event, the rest is commits, the protocol and waking up).")
		fmt.Fprintln(w, "  Idle: the servers' polling before sending, included in the per-event figures.")
	}
	if pgs[0].pg.floor != nil {
		fmt.Fprintln(w, "floor: the backend's CPU per call of a lone round trip (a SELECT of its parameter) and of a one-row commit, each paced at the send rate")
		fmt.Fprintln(w, "  on one connection to the target's database after its servers stopped (--pg-floor); PG CPU in floor round trips:")
		fmt.Fprintln(w, "  the webhook's PG CPU over the round trip's, the lone round trips that would cost as much.")
	}
	fmt.Fprintln(w, "PG wake-ups: the times the target database's backends blocked and were woken (voluntary context switches, from /proc),")
	fmt.Fprintln(w, "  per acknowledged webhook: a round trip, a commit's flush, a lock wait; at a light load, each round trip that wakes")
	fmt.Fprintln(w, "  an idle backend costs it far more than a busy one pays for it (docs/benchmarks-history.md, \"Run AJ\").")
	for _, r := range pgs {
		if len(r.pg.top) > 0 {
			printTopStatements(w, r.target, r.pg)
		}
		if len(r.pg.tables) > 0 {
			printTableVersions(w, r.target, r.pg)
		}
	}
}

// printTableVersions lists the row versions a PostgreSQL target wrote per
// webhook, by table: with the indexes each table has, it shows where the
// executor's time goes (an insert, or an update that is not HOT, adds an
// entry to every index whose predicate the new version meets).
func printTableVersions(w io.Writer, target string, c *pgCost) {
	fmt.Fprintf(w, "\n%s: row versions per event by table (pg_stat_user_tables; buffers: pg_statio_user_tables, hit or read):\n", target)
	fmt.Fprintf(w, "  %-18s  %7s  %8s  %7s  %7s  %7s  %12s  %13s\n", "table", "indexes", "inserted", "updated", "HOT", "deleted", "heap buffers", "index buffers")
	for _, t := range c.tables {
		fmt.Fprintf(w, "  %-18s  %7d  %8.2f  %7.2f  %7.2f  %7.2f  %12.1f  %13.1f\n", t.name, t.indexes, c.perEvent(t.ins), c.perEvent(t.upd),
			c.perEvent(t.hot), c.perEvent(t.del), c.perEvent(t.heapBuffers), c.perEvent(t.indexBuffers))
	}
}

// printE2EDetails prints one target's account in full: sending, failures,
// each process's memory and CPU, the ledger and the exactly-once count.
func printE2EDetails(w io.Writer, f *e2eFlags, r *e2eResult) {
	fmt.Fprintf(w, "%s: sending %s, %d scheduled, %d acknowledged, late %d, non-2xx %d, errors %d; ack p50 %s ms, p99 %s ms\n",
		r.target, r.sendFor.Round(time.Millisecond), r.scheduled, r.acked, r.late, r.non2xx, r.errs, ms(r.ackLat.pct(0.5)), ms(r.ackLat.pct(0.99)))
	if r.firstErr != "" {
		fmt.Fprintf(w, "%s: first failure: %s\n", r.target, r.firstErr)
	}
	if r.warm > 0 {
		fmt.Fprintf(w, "%s: warm-up: the first %s of sending (%d webhooks) is accounted for below but not in the latency figures; its own sent -> called p50 %s ms, p99 %s ms, max %s ms\n",
			r.target, f.warmup, r.warm, ms(r.warmLat.pct(0.5)), ms(r.warmLat.pct(0.99)), ms(r.warmLat.pct(1)))
	}
	for i, s := range r.samples {
		if len(s) == 0 {
			continue
		}
		lo, hi := s[0].rss, s[0].rss
		for _, x := range s[1:] {
			lo, hi = min(lo, x.rss), max(hi, x.rss)
		}
		fmt.Fprintf(w, "%s: process %d: RSS %s MiB at the start of sending, %s-%s MiB through the run, peak %s MiB; CPU %.1f s from sending until stopped\n",
			r.target, i+1, mib(s[0].rss), mib(lo), mib(hi), mib(peakHWM(s)), cpuAt(r.cpu, i).Seconds())
	}
	if r.memErr != nil {
		fmt.Fprintf(w, "%s: no Go allocation figures: %v\n", r.target, r.memErr)
	} else {
		fmt.Fprintf(w, "%s: Go runtime from sending until drained: %.0f MiB allocated, %.0f collections (%.2f per 1,000 webhooks)\n",
			r.target, r.mem.alloc/(1<<20), r.mem.gcs, r.mem.gcs*1000/float64(max(r.acked, 1)))
	}
	fmt.Fprintf(w, "%s: ledger after the servers stopped: %d effects, by state %v\n", r.target, r.ledgerTotal, r.ledger)
	fmt.Fprintf(w, "%s: exactly once: %s: %d acknowledged webhooks: %d called exactly once, %d not called, %d called more than once; %d calls under a second episode key, %d calls for unknown events\n",
		r.target, r.verdict(), r.acked, r.exactlyOne, r.missing, r.duplicated, r.keyDiff, r.unknown)
	if r.drainBound {
		fmt.Fprintf(w, "%s: the drain stopped at --drain %s with effects still missing\n", r.target, f.drainFor)
	}
}

func peakHWM(s []rssSample) int64 {
	var p int64
	for _, x := range s {
		p = max(p, x.hwm)
	}
	return p
}

func cpuAt(c []time.Duration, i int) time.Duration {
	if i < len(c) {
		return c[i]
	}
	return 0
}

var spaces = regexp.MustCompile(`\s+`)

// oneLine folds a statement's whitespace and cuts it to n characters.
func oneLine(q string, n int) string {
	q = strings.TrimSpace(spaces.ReplaceAllString(q, " "))
	if len(q) > n {
		q = q[:n-3] + "..."
	}
	return q
}

// e2eRatios are the comparisons the report makes, each with its goal: one
// PostgreSQL process does at least half of what SQLite does, and two
// processes on one database at least what one does.
var e2eRatios = []e2eRatio{
	{"pg1/sqlite", e2ePG1, e2eSQLite, 0.5},
	{"pg2/pg1", e2ePG2, e2ePG1, 1},
}

// e2eRatio compares target num with target den, against goal.
type e2eRatio struct {
	name, num, den string
	goal           float64
}

// roundRatios is q's ratio in each round where both targets ran and the
// second did something: while sending, and over the whole run.
func roundRatios(rounds [][]*e2eResult, q e2eRatio) (sending, whole []float64) {
	for _, rs := range rounds {
		var a, b *e2eResult
		for _, r := range rs {
			switch r.target {
			case q.num:
				a = r
			case q.den:
				b = r
			}
		}
		if a == nil || b == nil || b.windowRate() == 0 || b.wholeRate() == 0 {
			continue
		}
		sending = append(sending, a.windowRate()/b.windowRate())
		whole = append(whole, a.wholeRate()/b.wholeRate())
	}
	return sending, whole
}

func metOrNot(ratio, goal float64) string {
	if ratio < goal {
		return "NOT met"
	}
	return "met"
}

// printE2ERounds sums up several rounds: per target the median of each
// figure, and per comparison the median of the rounds' ratios, each round's
// cells having run minutes apart under much the same load. Goals are
// judged on the medians, printed to three places so that a median just
// under a goal does not read as the goal.
func printE2ERounds(w io.Writer, rounds [][]*e2eResult) {
	fmt.Fprintf(w, "== summary of %d rounds: median (lowest-highest)\n", len(rounds))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tdone/s sending\tdone/s whole run\tp99 ms\talloc KB/event\texactly once\t")
	for i, first := range rounds[0] {
		var sending, whole, p99, alloc []float64
		ok := 0
		for _, rs := range rounds {
			r := rs[i]
			sending = append(sending, r.windowRate())
			whole = append(whole, r.wholeRate())
			p99 = append(p99, float64(r.lat.pct(0.99))/float64(time.Millisecond))
			if kb, ok := r.allocPerEvent(); ok {
				alloc = append(alloc, kb)
			}
			if r.ok() {
				ok++
			}
		}
		allocs := "-"
		if len(alloc) > 0 {
			allocs = spread(alloc, "%.1f")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\tok in %d of %d rounds\t\n", first.target,
			spread(sending, "%.0f"), spread(whole, "%.0f"), spread(p99, "%.0f"), allocs, ok, len(rounds))
	}
	tw.Flush()
	for _, q := range e2eRatios {
		sending, whole := roundRatios(rounds, q)
		if len(sending) == 0 {
			continue
		}
		medS, _, _ := medianRange(sending)
		medW, _, _ := medianRange(whole)
		fmt.Fprintf(w, "%s (target >= %.1f), median of %d rounds' ratios: done/s sending %s (%s); done/s whole run %s (%s)\n",
			q.name, q.goal, len(sending), spread(sending, "%.3f"), metOrNot(medS, q.goal), spread(whole, "%.3f"), metOrNot(medW, q.goal))
	}
}

// spread formats the median of xs and, when they differ, the lowest and
// highest.
func spread(xs []float64, format string) string {
	med, lo, hi := medianRange(xs)
	s := fmt.Sprintf(format, med)
	if lo != hi {
		s += " (" + fmt.Sprintf(format, lo) + "-" + fmt.Sprintf(format, hi) + ")"
	}
	return s
}

// medianRange is the median of xs (the mean of the middle two when there
// is an even number) with the lowest and the highest.
func medianRange(xs []float64) (med, lo, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// pgCPUInRoundTrips is the webhook's PG CPU in lone round trips' worth
// at the run's rate ("-" without both figures).
func (r *e2eResult) pgCPUInRoundTrips() string {
	ms, ok := r.pgCPUPerAck()
	if !ok || r.pg.floor == nil || r.pg.floor.roundTrip <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", ms*float64(time.Millisecond)/float64(r.pg.floor.roundTrip))
}

// pgWakeupsPerEvent is how many times the database's backends were woken
// per acknowledged webhook, "-" where they were not read.
func (r *e2eResult) pgWakeupsPerEvent() string {
	if r.pgCPU == nil {
		return "-"
	}
	if _, n := r.pgCPU.total(); n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", float64(r.pgCPU.wakeups())/float64(max(r.acked, 1)))
}

// pgCPUPerEvent is the database's backends' CPU per acknowledged webhook,
// in milliseconds, or "-" where it was not measured.
func (r *e2eResult) pgCPUPerEvent() string {
	perAck, ok := r.pgCPUPerAck()
	if !ok {
		return "-"
	}
	return fmt.Sprintf("%.2f", perAck)
}

// pgCPUPerAck is the database's backends' CPU per acknowledged webhook,
// in milliseconds; false where it was not measured.
func (r *e2eResult) pgCPUPerAck() (float64, bool) {
	if r.pgCPU == nil {
		return 0, false
	}
	sum, n := r.pgCPU.total()
	if n == 0 {
		return 0, false
	}
	return float64(sum) / float64(time.Millisecond) / float64(max(r.acked, 1)), true
}

// printTopStatements lists a PostgreSQL target's most frequent statements
// with the buffers each call read: set beside another target's list, a
// statement that reads more per call with two processes than with one
// (claims passing over rows the other process holds) stands out from one
// that only ran slower on a busier machine.
func printTopStatements(w io.Writer, target string, c *pgCost) {
	fmt.Fprintf(w, "\n%s: statements by calls per event:\n", target)
	fmt.Fprintf(w, "  %11s  %12s  %7s  %s\n", "calls/event", "buffers/call", "us/call", "statement")
	for _, st := range c.top {
		perCall, usPerCall := 0.0, 0.0
		if st.calls > 0 {
			perCall = float64(st.buffers) / float64(st.calls)
			usPerCall = st.ms * 1000 / float64(st.calls)
		}
		fmt.Fprintf(w, "  %11.2f  %12.1f  %7.1f  %s\n", c.perEvent(st.calls), perCall, usPerCall, oneLine(st.query, 100))
	}
}

// e2eTargetNames say what each target runs, for the tables.
var e2eTargetNames = map[string]string{
	e2eSQLite: "one process on SQLite",
	e2ePG1:    "one process on PostgreSQL",
	e2ePG2:    "two processes on one PostgreSQL",
}

// capacityHeadlines is goal 2's row for each SQLite target saturated in
// every round: its capacity against the door probe of its round, with
// the writer's time per effect beside the door's per request where both
// were read. Over rounds each figure is the median of the rounds', and
// the ratio the median of the rounds' own ratios (a round's capacity
// over its own door), not one median over another.
func capacityHeadlines(rounds [][]*e2eResult, of string) []headline {
	var rows []headline
	for i := range rounds[0] {
		var whole, doors, ratios, writer, doorWriter []float64
		for _, rs := range rounds {
			r := rs[i]
			door := r.goalDoor()
			if door == nil || !r.saturated() {
				whole = nil
				break
			}
			whole = append(whole, r.wholeRate())
			doors = append(doors, door.rate())
			ratios = append(ratios, r.wholeRate()/door.rate())
			us, ok := r.writerPerEffect()
			perAck, doorOK := door.writerPerRequest()
			if ok && doorOK {
				writer, doorWriter = append(writer, us), append(doorWriter, perAck)
			}
		}
		if len(whole) == 0 {
			continue
		}
		w, _, _ := medianRange(whole)
		d, _, _ := medianRange(doors)
		value := fmt.Sprintf("%s effects/s over the whole run", num(w))
		baseline := fmt.Sprintf("the door alone (receive's SQLite cell), same round: %s durable acks/s", num(d))
		if len(writer) == len(whole) {
			m, _, _ := medianRange(writer)
			md, _, _ := medianRange(doorWriter)
			value += fmt.Sprintf("; writer %.0f us per effect", m)
			baseline += fmt.Sprintf(", writer %.0f us per request", md)
		}
		ratio, _, _ := medianRange(ratios)
		first := rounds[0][i]
		rows = append(rows, headline{
			figure:   fmt.Sprintf("%s: capacity (saturated)%s", targetName(e2eTargetNames, first.target), of),
			value:    value,
			baseline: baseline,
			ratio:    fmt.Sprintf("%.2f", ratio),
			goal:     fmt.Sprintf(">= %.1f: %s", capacityGoal, verdict(ratio >= capacityGoal)),
		})
	}
	return rows
}

// e2eHeadlines are each target's effects done beside the send rate, the
// comparisons between targets with their goals, and the exactly-once
// account. Over several rounds every figure is the median of the rounds
// (a ratio: the median of the rounds' ratios).
func e2eHeadlines(run *e2eRunInfo, rounds [][]*e2eResult) []headline {
	if len(rounds) == 0 {
		return nil
	}
	of := ""
	if len(rounds) > 1 {
		of = fmt.Sprintf(" (median of %d rounds)", len(rounds))
	}
	base := fmt.Sprintf("send rate %s/s", num(run.rate))
	if run.probeRate > 0 {
		base += fmt.Sprintf(" (%.2f of the SQLite ingest probe, %s/s)", run.rate/run.probeRate, num(run.probeRate))
	}
	var rows []headline
	acked, once := int64(0), 0
	for i, first := range rounds[0] {
		var sending, whole, p99 []float64
		for _, rs := range rounds {
			r := rs[i]
			sending = append(sending, r.windowRate())
			whole = append(whole, r.wholeRate())
			p99 = append(p99, float64(r.lat.pct(0.99))/float64(time.Millisecond))
			acked += r.acked
			once += r.exactlyOne
		}
		s, _, _ := medianRange(sending)
		w, _, _ := medianRange(whole)
		p, _, _ := medianRange(p99)
		rows = append(rows, headline{
			figure:   fmt.Sprintf("%s: effects done%s", targetName(e2eTargetNames, first.target), of),
			value:    fmt.Sprintf("%s/s while sending, %s/s over the whole run; webhook to call p99 %s ms", num(s), num(w), ms(time.Duration(p*float64(time.Millisecond)))),
			baseline: base,
			ratio:    ratioOf(s, run.rate) + " of the send rate while sending",
		})
	}
	rows = append(rows, capacityHeadlines(rounds, of)...)
	for _, q := range e2eRatios {
		sending, whole := roundRatios(rounds, q)
		if len(sending) == 0 {
			continue
		}
		s, _, _ := medianRange(sending)
		w, _, _ := medianRange(whole)
		rows = append(rows, headline{
			figure:   fmt.Sprintf("%s over %s%s", e2eTargetNames[q.num], e2eTargetNames[q.den], of),
			value:    fmt.Sprintf("%.2f over the whole run, %.2f while sending", w, s),
			baseline: e2eTargetNames[q.den] + ", same run",
			ratio:    fmt.Sprintf("%.2f", w),
			goal:     fmt.Sprintf(">= %.1f: %s over the whole run, %s while sending", q.goal, verdict(w >= q.goal), verdict(s >= q.goal)),
		})
	}
	return append(rows, headline{
		figure: "acknowledged webhooks called exactly once",
		value:  fmt.Sprintf("%s of %s", num(float64(once)), num(float64(acked))),
		goal:   "all: " + verdict(int64(once) == acked),
	})
}
