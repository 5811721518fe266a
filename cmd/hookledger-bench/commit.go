package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/inbox"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

const (
	modeSingle = "single" // one submission per transaction, straight to the store
	modeGroup  = "group"  // through the group-commit writer

	benchSource = "stripe"
)

type commitFlags struct {
	postgres string
	drivers  []string
	modes    []string
	writers  []int
	duration time.Duration
	warmup   time.Duration
	fsyncDur time.Duration
	dir      string
	table    bool
}

func runCommit(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "commit", "commit [--postgres URL] [--writers 1,32,128] [--duration 5s] [flags]",
		"Measures durable commits per second of one-delivery submissions, written either one\n"+
			"per transaction (store.InboxCommit from each writer; on SQLite, whose store shares\n"+
			"concurrent write transactions, one call at a time) or through the group-commit\n"+
			"inbox.Writer, at each writer count, on a fresh SQLite file and, with --postgres,\n"+
			"on a fresh PostgreSQL database per cell. Raw fsync/s on the same disk, measured\n"+
			"before and after the cells, is printed beside them as the baseline. After each\n"+
			"cell the rows in the store are counted and must equal the commits reported.")
	var f commitFlags
	fs.StringVar(&f.postgres, "postgres", "", "PostgreSQL admin `URL`; a database is created and dropped per cell (omit to measure SQLite only)")
	drivers := fs.String("drivers", "", "comma-separated `drivers` (default sqlite, plus postgres when --postgres is set)")
	modes := fs.String("modes", modeSingle+","+modeGroup, "comma-separated `modes`: single, group")
	writers := fs.String("writers", "1,32,128", "comma-separated concurrent writer `counts`")
	fs.DurationVar(&f.duration, "duration", 5*time.Second, "measured `time` per cell")
	fs.DurationVar(&f.warmup, "warmup", time.Second, "unmeasured warm-up `time` per cell")
	fs.DurationVar(&f.fsyncDur, "fsync-duration", 3*time.Second, "`time` of each raw fsync baseline")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir holding SQLite files and the fsync probe (default the system temp dir)")
	table := tableFlag(fs)
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	f.table = *table
	var err error
	if f.writers, err = parseCounts(*writers); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench commit: --writers: %v\n", err)
		return exitUsage
	}
	f.modes = splitList(*modes)
	for _, m := range f.modes {
		if m != modeSingle && m != modeGroup {
			fmt.Fprintf(stderr, "hookledger-bench commit: --modes: unknown mode %q (single, group)\n", m)
			return exitUsage
		}
	}
	if f.drivers, err = chooseTargets(*drivers, []string{"sqlite"}, []string{"sqlite", "postgres"}, f.postgres); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench commit: --drivers: %v\n", err)
		return exitUsage
	}
	if f.duration <= 0 || f.warmup < 0 || f.fsyncDur <= 0 {
		fmt.Fprintln(stderr, "hookledger-bench commit: --duration and --fsync-duration must be positive, --warmup not negative")
		return exitUsage
	}
	return benchExit(stderr, "commit")(commitBench(ctx, stdout, stderr, &f))
}

// chooseTargets reads a --drivers or --targets list: empty means defaults,
// plus postgres when a PostgreSQL URL is given; every name must be known,
// and postgres needs the URL.
func chooseTargets(list string, defaults, known []string, postgresURL string) ([]string, error) {
	out := splitList(list)
	if len(out) == 0 {
		out = defaults
		if postgresURL != "" {
			out = append(slices.Clone(defaults), "postgres")
		}
	}
	for _, t := range out {
		switch {
		case !slices.Contains(known, t):
			return nil, fmt.Errorf("unknown %q (%s)", t, strings.Join(known, ", "))
		case t == "postgres" && postgresURL == "":
			return nil, errors.New("postgres needs --postgres URL")
		}
	}
	return out, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// commitResult is one cell's figures.
type commitResult struct {
	driver   string
	mode     string
	writers  int
	flushers int // group mode: concurrent transactions the writer runs
	measured int64
	elapsed  time.Duration
	lat      latencies
	failed   int64 // submissions that returned an error (not committed)
	total    int64 // successful commits over the whole cell, warm-up included
	rows     int   // events found in the store afterwards
	rowDels  int   // deliveries found in the store afterwards
	// Group mode, from the writer's own metrics over the whole cell.
	batches    int64
	meanBatch  float64
	meanCommit time.Duration
}

func (r *commitResult) rate() float64 { return rate(r.measured, r.elapsed) }

// rowsOK is the correctness check: every reported commit is a row, and
// there is no row that was not reported.
func (r *commitResult) rowsOK() bool {
	return int64(r.rows) == r.total && int64(r.rowDels) == r.total
}

func commitBench(ctx context.Context, stdout, stderr io.Writer, f *commitFlags) (bool, error) {
	dir, err := os.MkdirTemp(f.dir, "hookledger-bench-commit-")
	if err != nil {
		return false, fmt.Errorf("make temp dir: %w", err)
	}
	defer os.RemoveAll(dir)

	fmt.Fprintf(stderr, "raw fsync baseline in %s (%s)...\n", dir, f.fsyncDur)
	before, err := fsyncRate(ctx, dir, f.fsyncDur)
	if err != nil {
		return false, err
	}

	var results []*commitResult
	for _, driver := range f.drivers {
		for _, n := range f.writers {
			for _, mode := range f.modes {
				if err := ctx.Err(); err != nil {
					return false, fmt.Errorf("interrupted: %w", err)
				}
				label := fmt.Sprintf("%s-%s-%d", driver, mode, n)
				fmt.Fprintf(stderr, "cell %s: warm-up %s, measure %s...\n", label, f.warmup, f.duration)
				res, err := commitCell(ctx, f, dir, driver, mode, n, label)
				if err != nil {
					return false, fmt.Errorf("cell %s: %w", label, err)
				}
				fmt.Fprintf(stderr, "cell %s: %.0f commits/s, p50 %s ms, p99 %s ms, rows %d = commits %d: %v\n",
					label, res.rate(), ms(res.lat.pct(0.50)), ms(res.lat.pct(0.99)), res.rows, res.total, res.rowsOK())
				results = append(results, res)
			}
		}
	}

	fmt.Fprintf(stderr, "raw fsync baseline again (%s)...\n", f.fsyncDur)
	after, err := fsyncRate(ctx, dir, f.fsyncDur)
	if err != nil {
		return false, err
	}
	ok := printCommit(stdout, f, before, after, results)
	if f.table {
		printHeadlines(stdout, "commit", commitHeadlines(before, after, results))
	}
	return ok, nil
}

// commitHeadlines are the group-commit cells beside one row per
// transaction at the same driver and writers, and beside raw fsync/s.
func commitHeadlines(before, after fsyncResult, results []*commitResult) []headline {
	fsyncBase := (before.rate() + after.rate()) / 2
	single := map[string]float64{}
	for _, r := range results {
		if r.mode == modeSingle {
			single[fmt.Sprintf("%s/%d", r.driver, r.writers)] = r.rate()
		}
	}
	var rows []headline
	allOK := true
	for _, r := range results {
		allOK = allOK && r.rowsOK()
		if r.mode != modeGroup {
			continue
		}
		h := headline{
			figure: fmt.Sprintf("%s group commit, %s", driverName(r.driver), plural(r.writers, "writer")),
			value:  fmt.Sprintf("%s commits/s, p99 %s ms", num(r.rate()), ms(r.lat.pct(0.99))),
		}
		var base, ratio []string
		if s, ok := single[fmt.Sprintf("%s/%d", r.driver, r.writers)]; ok && s > 0 {
			base = append(base, fmt.Sprintf("one row per transaction %s/s", num(s)))
			ratio = append(ratio, fmt.Sprintf("%.1fx single", r.rate()/s))
		}
		if fsyncBase > 0 {
			base = append(base, fmt.Sprintf("raw fsync %s/s", num(fsyncBase)))
			ratio = append(ratio, fmt.Sprintf("%.2fx fsync", r.rate()/fsyncBase))
		}
		h.baseline, h.ratio = strings.Join(base, "; "), strings.Join(ratio, ", ")
		rows = append(rows, h)
	}
	check := "rows = commits in every cell"
	if !allOK {
		check = "rows differ from commits in some cell"
	}
	return append(rows, headline{figure: "rows in the store after each cell", value: check,
		goal: "every commit reported is one row: " + verdict(allOK)})
}

// commitCell runs one driver × mode × writers cell on a fresh database.
func commitCell(ctx context.Context, f *commitFlags, dir, driver, mode string, writers int, label string) (res *commitResult, err error) {
	cs, err := newCellStore(ctx, driver, dir, f.postgres, label)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, cs.Drop()) }()
	st, err := storeopen.Open(ctx, cs.URL)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	if _, err := st.Migrate(ctx); err != nil {
		return nil, err
	}

	res = &commitResult{driver: driver, mode: mode, writers: writers}
	var submit func(context.Context, *store.Submission) error
	var w *inbox.Writer
	var reg *prometheus.Registry
	switch mode {
	case modeSingle:
		// SQLite's store runs concurrent write transactions inside one
		// shared commit, which would make this baseline a group commit
		// too. Its one writer takes one transaction at a time anyway, so
		// holding the callers to one call at a time measures what a
		// transaction per row costs there; PostgreSQL's run side by side.
		var one sync.Mutex
		serial := driver == "sqlite"
		submit = func(ctx context.Context, sub *store.Submission) error {
			if serial {
				one.Lock()
				defer one.Unlock()
			}
			out, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{sub}})
			if err != nil {
				return err
			}
			return out[0].Err
		}
	case modeGroup:
		// The same writer settings as hookledger serve uses for this
		// driver, so the figure is the product's.
		d, err := storeopen.For(cs.URL)
		if err != nil {
			return nil, err
		}
		res.flushers = d.Flushers
		reg = prometheus.NewRegistry()
		w = inbox.New(st, inbox.Options{Flushers: res.flushers, Registerer: reg})
		w.Start()
		submit = func(ctx context.Context, sub *store.Submission) error {
			out, err := w.Submit(ctx, sub)
			if err != nil {
				return err
			}
			return out.Err
		}
	}

	// phase moves warm-up → measuring → stopping. A commit counts when it
	// completes while measuring; every success counts towards the rows
	// the store must hold.
	const (
		phaseWarmup int32 = iota
		phaseMeasure
		phaseStop
	)
	var phase atomic.Int32
	var measured, failed, total atomic.Int64
	parts := make([]latencies, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := 0; phase.Load() != phaseStop; seq++ {
				sub := benchSubmission(fmt.Sprintf("evt_%s_%d_%d", label, i, seq))
				start := time.Now()
				err := submit(ctx, sub)
				lat := time.Since(start)
				if err != nil {
					failed.Add(1)
					if ctx.Err() != nil {
						return
					}
					continue
				}
				total.Add(1)
				if phase.Load() == phaseMeasure {
					measured.Add(1)
					parts[i] = append(parts[i], lat)
				}
			}
		}()
	}
	sleepCtx(ctx, f.warmup)
	t0 := time.Now()
	phase.Store(phaseMeasure)
	sleepCtx(ctx, f.duration)
	phase.Store(phaseStop)
	res.elapsed = time.Since(t0)
	wg.Wait()
	if w != nil {
		if err := w.Stop(ctx); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	res.measured, res.failed, res.total = measured.Load(), failed.Load(), total.Load()
	res.lat = mergeLatencies(parts)
	if reg != nil {
		if res.batches, res.meanBatch, res.meanCommit, err = writerStats(reg); err != nil {
			return nil, err
		}
	}

	stored, err := storedEvents(ctx, st, benchSource)
	if err != nil {
		return nil, err
	}
	res.rows = len(stored)
	for _, n := range stored {
		res.rowDels += n
	}
	return res, nil
}

// writerStats reads the group-commit writer's histograms: how many
// transactions it ran, their mean size and mean duration. They explain the
// throughput: commits/s is roughly batch size × flushers / commit time.
func writerStats(reg *prometheus.Registry) (batches int64, meanBatch float64, meanCommit time.Duration, err error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0, 0, fmt.Errorf("read writer metrics: %w", err)
	}
	for _, mf := range mfs {
		if len(mf.GetMetric()) == 0 || mf.GetMetric()[0].GetHistogram() == nil {
			continue
		}
		h := mf.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() == 0 {
			continue
		}
		mean := h.GetSampleSum() / float64(h.GetSampleCount())
		switch mf.GetName() {
		case "hookledger_inbox_batch_submissions":
			batches, meanBatch = int64(h.GetSampleCount()), mean
		case "hookledger_inbox_commit_seconds":
			meanCommit = time.Duration(mean * float64(time.Second))
		}
	}
	return batches, meanBatch, meanCommit, nil
}

// benchSubmission is one webhook's worth of work: one delivery with a
// realistic body and the evidence headers the receiver keeps.
func benchSubmission(eventID string) *store.Submission {
	now := time.Now()
	entity := "in_" + eventID
	reqID, err := uuid.NewV7()
	if err != nil {
		// NewV7 fails only when the system's random source does; a fixed
		// id is still unique enough per event for a benchmark row.
		reqID = uuid.Nil
	}
	return &store.Submission{Deliveries: []*store.DeliveryInput{{
		RequestID:  reqID.String(),
		Source:     benchSource,
		EventID:    eventID,
		Type:       "invoice.paid",
		Entity:     entity,
		OccurredAt: now.Truncate(time.Second),
		ReceivedAt: now,
		Headers:    map[string]string{"Content-Type": "application/json; charset=utf-8", "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)"},
		Body:       stripeBody(eventID, entity, now),
	}}}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// fsyncResult is the raw durability baseline: how many write+fsync pairs of
// one small block one goroutine completes per second on this disk.
type fsyncResult struct {
	n       int64
	elapsed time.Duration
	lat     latencies
}

func (r fsyncResult) rate() float64 { return rate(r.n, r.elapsed) }

func fsyncRate(ctx context.Context, dir string, d time.Duration) (fsyncResult, error) {
	path := filepath.Join(dir, "fsync-probe")
	file, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600)
	if err != nil {
		return fsyncResult{}, fmt.Errorf("fsync baseline: %w", err)
	}
	defer os.Remove(path)
	defer file.Close()
	// 4 KiB is one page: the smallest write a commit makes to its log.
	block := make([]byte, 4096)
	var res fsyncResult
	start := time.Now()
	for time.Since(start) < d && ctx.Err() == nil {
		block[0]++
		t := time.Now()
		if _, err := file.WriteAt(block, 0); err != nil {
			return fsyncResult{}, fmt.Errorf("fsync baseline: write: %w", err)
		}
		if err := file.Sync(); err != nil {
			return fsyncResult{}, fmt.Errorf("fsync baseline: fsync: %w", err)
		}
		res.lat = append(res.lat, time.Since(t))
		res.n++
	}
	res.elapsed = time.Since(start)
	res.lat = mergeLatencies([]latencies{res.lat})
	return res, ctx.Err()
}

func printCommit(w io.Writer, f *commitFlags, before, after fsyncResult, results []*commitResult) bool {
	fmt.Fprintf(w, "hookledger-bench commit: %s per cell after %s warm-up; GOMAXPROCS %d; one-delivery submissions of ~%d B bodies\n",
		f.duration, f.warmup, runtime.GOMAXPROCS(0), len(stripeBody("evt_x", "in_x", time.Now())))
	fmt.Fprintf(w, "baseline raw fsync (4 KiB write+fsync, 1 goroutine): before %.0f/s (p50 %s ms, p99 %s ms), after %.0f/s (p50 %s ms, p99 %s ms)\n\n",
		before.rate(), ms(before.lat.pct(0.5)), ms(before.lat.pct(0.99)),
		after.rate(), ms(after.lat.pct(0.5)), ms(after.lat.pct(0.99)))
	single := map[string]float64{}
	for _, r := range results {
		if r.mode == modeSingle {
			single[fmt.Sprintf("%s/%d", r.driver, r.writers)] = r.rate()
		}
	}
	fsyncBase := (before.rate() + after.rate()) / 2
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "driver\tmode\twriters\tcommits/s\tp50 ms\tp99 ms\tvs single\tvs fsync\tbatch\ttx ms\tfailed\trows = commits\t")
	allOK := true
	for _, r := range results {
		mode := r.mode
		if r.mode == modeGroup {
			mode = fmt.Sprintf("group(%d)", r.flushers)
		}
		speedup := "-"
		if s, ok := single[fmt.Sprintf("%s/%d", r.driver, r.writers)]; ok && r.mode == modeGroup && s > 0 {
			speedup = fmt.Sprintf("%.1fx", r.rate()/s)
		}
		batch, txms := "-", "-"
		if r.batches > 0 {
			batch, txms = fmt.Sprintf("%.1f", r.meanBatch), ms(r.meanCommit)
		}
		check := fmt.Sprintf("%d = %d ok", r.rows, r.total)
		if !r.rowsOK() {
			check = fmt.Sprintf("%d (%d deliveries) != %d MISMATCH", r.rows, r.rowDels, r.total)
			allOK = false
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\t%s\t%s\t%.2fx\t%s\t%s\t%d\t%s\t\n",
			r.driver, mode, r.writers, r.rate(), ms(r.lat.pct(0.50)), ms(r.lat.pct(0.99)), speedup,
			r.rate()/fsyncBase, batch, txms, r.failed, check)
	}
	tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commits/s: one-delivery submissions durably committed per second; latency is per submission.")
	fmt.Fprintln(w, "vs single: group commit over one-row-per-transaction at the same driver and writers.")
	fmt.Fprintln(w, "vs fsync: over the mean raw fsync/s baseline. group(N): N transactions in flight, as hookledger serve runs it.")
	fmt.Fprintln(w, "batch, tx ms: mean submissions per group commit and mean commit time, from the writer's metrics.")
	if allOK {
		fmt.Fprintln(w, "row check: every cell's store holds exactly the commits it reported")
	} else {
		fmt.Fprintln(w, "row check: FAILED, see MISMATCH rows")
	}
	return allOK
}
