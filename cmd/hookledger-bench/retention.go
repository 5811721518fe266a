package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/inbox"
	"github.com/hookledger/hookledger/internal/retention"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

type retentionFlags struct {
	postgres string
	drivers  []string
	events   int
	entities int
	rate     int
	baseline time.Duration
	batch    int
	pause    time.Duration
	dir      string
	table    bool
}

// The fixture's mix, by modulus of the event number: one event in
// modRetEffect caused an effect (done: past retention it is pruned to a
// tombstone, and its event goes with it), one in modRetPending is not
// processed yet (kept). Events 1..n/2 are 45 days
// old, the rest 1 to 29 days: with a 30-day retention the old half goes,
// less what is kept.
const (
	modRetEffect  = 4
	modRetPending = 400
	retBodyBytes  = 600
)

func runRetention(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "retention", "retention [--events 1000000] [--postgres URL] [flags]",
		"The cost of retention on a large store: loads --events events (each with a delivery of\n"+
			"600 bytes, a settled work item and two audit rows; one in 4 with an effect, one in 400\n"+
			"still pending), half of them past a 30-day retention, straight into a fresh store.\n"+
			"Then signed-webhook ingest runs through the group-commit inbox writer at --rate\n"+
			"submissions/s: first alone for --baseline (the same-run baseline), then beside one\n"+
			"pruning pass of the retention service with its default batch and pause. Prints the\n"+
			"pass's duration and rows/s, and ingest p50/p99/max with and without pruning.\n"+
			"Exit 1 when the pass deletes other events than the fixture planted past retention.")
	var f retentionFlags
	fs.StringVar(&f.postgres, "postgres", "", "PostgreSQL admin `URL`; a database is created and dropped (omit to measure SQLite only)")
	drivers := fs.String("drivers", "", "comma-separated `drivers` (default sqlite, plus postgres when --postgres is set)")
	fs.IntVar(&f.events, "events", 1_000_000, "events loaded")
	fs.IntVar(&f.entities, "entities", 100_000, "entities the events are spread over")
	fs.IntVar(&f.rate, "rate", 300, "ingest submissions per second, open loop")
	fs.DurationVar(&f.baseline, "baseline", 15*time.Second, "how long ingest runs alone")
	fs.IntVar(&f.batch, "batch", config.DefaultRetentionBatch, "retention.batch_size")
	fs.DurationVar(&f.pause, "pause", 10*time.Millisecond, "retention.pause between batches")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir holding the SQLite file (default the system temp dir)")
	table := tableFlag(fs)
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	f.table = *table
	var err error
	if f.drivers, err = chooseTargets(*drivers, []string{"sqlite"}, []string{"sqlite", "postgres"}, f.postgres); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench retention: --drivers: %v\n", err)
		return exitUsage
	}
	if f.events < 10_000 || f.entities < 100 || f.entities > f.events/2 || f.rate < 1 || f.baseline <= 0 || f.batch < 1 {
		fmt.Fprintln(stderr, "hookledger-bench retention: --events at least 10000, --entities between 100 and half of --events, --rate, --baseline and --batch positive")
		return exitUsage
	}
	dir, err := os.MkdirTemp(f.dir, "hookledger-bench-retention-")
	if err != nil {
		fmt.Fprintf(stderr, "hookledger-bench retention: %v\n", err)
		return exitFail
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(stdout, "retention: %d events, %d entities, ingest %d/s, batch %d, pause %s\n\n", f.events, f.entities, f.rate, f.batch, f.pause)
	fmt.Fprintf(stdout, "%-9s %-14s %9s %10s %10s %9s %9s %9s\n", "driver", "phase", "time s", "rows", "rows/s", "p50 ms", "p99 ms", "max ms")
	ok := true
	var rows []headline
	for _, driver := range f.drivers {
		cellOK, cellRows, err := retentionCell(ctx, stdout, stderr, &f, dir, driver)
		if err != nil {
			fmt.Fprintf(stderr, "hookledger-bench retention: %s: %v\n", driver, err)
			return exitFail
		}
		ok = ok && cellOK
		rows = append(rows, cellRows...)
	}
	if f.table {
		check := "exactly the rows the fixture planted past retention"
		if !ok {
			check = "other rows than the fixture planted (see above)"
		}
		printHeadlines(stdout, "retention", append(rows, headline{figure: "rows deleted", value: check, goal: verdict(ok)}))
	}
	if !ok {
		return exitFail
	}
	return exitOK
}

// retentionCell loads the fixture into a fresh store of driver, runs
// ingest alone and beside one pruning pass, and returns whether the pass
// deleted exactly what the fixture planted, with the table rows.
func retentionCell(ctx context.Context, stdout, stderr io.Writer, f *retentionFlags, dir, driver string) (ok bool, rows []headline, err error) {
	cs, err := newCellStore(ctx, driver, dir, f.postgres, "retention")
	if err != nil {
		return false, nil, err
	}
	defer func() { err = errors.Join(err, cs.Drop()) }()
	st, err := storeopen.Open(ctx, cs.URL)
	if err != nil {
		return false, nil, err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	if _, err := st.Migrate(ctx); err != nil {
		return false, nil, err
	}
	now := time.Now().UTC().Truncate(time.Second)
	fmt.Fprintf(stderr, "%s: loading %d events...\n", driver, f.events)
	start := time.Now()
	if err := loadRetentionFixture(ctx, driver, cs.URL, f, now); err != nil {
		return false, nil, fmt.Errorf("load fixture: %w", err)
	}
	fmt.Fprintf(stderr, "%s: loaded in %s\n", driver, time.Since(start).Round(time.Millisecond))

	flushers := 1
	if driver == "postgres" {
		flushers = 4
	}
	w := inbox.New(st, inbox.Options{Flushers: flushers})
	w.Start()
	defer func() { err = errors.Join(err, w.Stop(context.Background())) }()

	// Baseline: ingest alone.
	stop := make(chan struct{})
	var base latencies
	var baseErr error
	done := make(chan struct{})
	go func() { base, baseErr = ingest(ctx, w, f.rate, "base", stop); close(done) }()
	select {
	case <-time.After(f.baseline):
	case <-ctx.Done():
	}
	close(stop)
	<-done
	if baseErr != nil {
		return false, nil, fmt.Errorf("ingest alone: %w", baseErr)
	}
	printRetentionRow(stdout, driver, "ingest alone", f.baseline, 0, base)

	// One pruning pass beside the same ingest.
	svc := retention.New(st, retention.Policy{
		Sources: map[string]time.Duration{"stripe": config.DefaultRetention}, Default: config.DefaultRetention,
		BatchSize: f.batch, Pause: f.pause,
	}, retention.Options{Clock: clock.Real{}})
	stop, done = make(chan struct{}), make(chan struct{})
	var during latencies
	var duringErr error
	go func() { during, duringErr = ingest(ctx, w, f.rate, "prune", stop); close(done) }()
	pass, passErr := svc.Pass(ctx)
	close(stop)
	<-done
	if passErr != nil {
		return false, nil, fmt.Errorf("pruning pass: %w", passErr)
	}
	if duringErr != nil {
		return false, nil, fmt.Errorf("ingest while pruning: %w", duringErr)
	}
	printRetentionRow(stdout, driver, "prune pass", pass.Duration, pass.Deleted(), nil)
	printRetentionRow(stdout, driver, "ingest+prune", pass.Duration, 0, during)
	fmt.Fprintf(stdout, "%-9s deleted: %d events, %d deliveries, %d work, %d audit, %d effects (tombstoned) in %d batches\n",
		driver, pass.Events, pass.Deliveries, pass.Work, pass.Audit, pass.Effects, pass.Batches)

	base, during = mergeLatencies([]latencies{base}), mergeLatencies([]latencies{during})
	name := driverName(driver)
	rows = []headline{{
		figure: fmt.Sprintf("%s: one pruning pass, %s events of which half past retention", name, num(float64(f.events))),
		value:  fmt.Sprintf("%.1f s, %s rows/s (batch %d)", pass.Duration.Seconds(), num(rate(pass.Deleted(), pass.Duration)), f.batch),
	}, {
		figure:   fmt.Sprintf("%s: ingest at %d/s beside the pass", name, f.rate),
		value:    fmt.Sprintf("p99 %s ms", ms(during.pct(0.99))),
		baseline: fmt.Sprintf("ingest alone p99 %s ms", ms(base.pct(0.99))),
		ratio:    ratioOf(float64(during.pct(0.99)), float64(base.pct(0.99))) + "x the p99 alone",
	}}
	want := expectedPruned(f)
	half := int64(f.events / 2)
	if wantAudit := 2 * (half - half/modRetPending); pass.Audit != wantAudit {
		fmt.Fprintf(stderr, "%s: pass deleted %d audit rows, the fixture planted %d past retention\n", driver, pass.Audit, wantAudit)
		return false, rows, nil
	}
	if wantEffects := half / modRetEffect; pass.Effects != wantEffects {
		fmt.Fprintf(stderr, "%s: pass pruned %d effects, the fixture planted %d done effects past retention\n", driver, pass.Effects, wantEffects)
		return false, rows, nil
	}
	if pass.Events != want || pass.Deliveries != want || pass.Work != want {
		fmt.Fprintf(stderr, "%s: pass deleted %d events, %d deliveries, %d work items; the fixture planted %d deletable events\n",
			driver, pass.Events, pass.Deliveries, pass.Work, want)
		return false, rows, nil
	}
	return true, rows, nil
}

// expectedPruned counts the fixture's events past retention that nothing
// needs.
func expectedPruned(f *retentionFlags) int64 {
	var n int64
	for i := 1; i <= f.events/2; i++ {
		if i%modRetPending != 0 {
			n++
		}
	}
	return n
}

func printRetentionRow(w io.Writer, driver, phase string, d time.Duration, rows int64, l latencies) {
	rowsS, rateS, p50, p99, mx := "-", "-", "-", "-", "-"
	if rows > 0 {
		rowsS, rateS = fmt.Sprint(rows), fmt.Sprintf("%.0f", rate(rows, d))
	}
	if len(l) > 0 {
		l = mergeLatencies([]latencies{l})
		p50, p99, mx = ms(l.pct(0.50)), ms(l.pct(0.99)), ms(l[len(l)-1])
		rateS = fmt.Sprintf("%.0f", rate(int64(len(l)), d))
		rowsS = fmt.Sprint(len(l))
	}
	fmt.Fprintf(w, "%-9s %-14s %9.1f %10s %10s %9s %9s %9s\n", driver, phase, d.Seconds(), rowsS, rateS, p50, p99, mx)
}

// ingest submits one event per tick at rate/s through the group-commit
// writer, from as many goroutines as it takes to keep the schedule, and
// returns each submission's latency, until stop closes.
func ingest(ctx context.Context, w *inbox.Writer, perSecond int, tag string, stop <-chan struct{}) (latencies, error) {
	const senders = 16
	interval := time.Duration(float64(time.Second) * senders / float64(perSecond))
	var (
		mu    sync.Mutex
		all   latencies
		first error
		wg    sync.WaitGroup
	)
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(interval)
			defer t.Stop()
			var mine latencies
			for n := 0; ; n++ {
				select {
				case <-stop:
					mu.Lock()
					all = append(all, mine...)
					mu.Unlock()
					return
				case <-ctx.Done():
					return
				case <-t.C:
				}
				id := fmt.Sprintf("evt_%s_%d_%d", tag, s, n)
				at := time.Now()
				res, err := w.Submit(ctx, &store.Submission{Deliveries: []*store.DeliveryInput{{
					RequestID: "req_" + id, Source: "stripe", EventID: id, Type: "invoice.paid", Entity: "in_" + id,
					Account: "", ReceivedAt: at.UTC(), Headers: map[string]string{"Content-Type": "application/json"},
					Body: []byte(`{"id":"` + id + `","type":"invoice.paid"}`)}}})
				if err == nil {
					err = res.Err
				}
				if err != nil {
					mu.Lock()
					first = errors.Join(first, err)
					mu.Unlock()
					continue
				}
				mine = append(mine, time.Since(at))
			}
		}()
	}
	wg.Wait()
	return all, errors.Join(first, ctx.Err())
}

// retentionSQL returns the loading statements with the dialect's pieces
// (see fixtureSQL in signals.go).
func retentionSQL(series func(n int) string, ts func(string) string, boolean func(string) string, overriding, body string, f *retentionFlags, now time.Time) []string {
	half := f.events / 2
	oldStart := now.Add(-45 * 24 * time.Hour).UnixMicro()
	newStart := now.Add(-29 * 24 * time.Hour).UnixMicro()
	step := (28 * 24 * time.Hour).Microseconds() / int64(half+1)
	// Old events spread over one day 45 days ago; the rest over the last
	// 29 days.
	at := fmt.Sprintf("(CASE WHEN i <= %d THEN %d + i * 1000 ELSE %d + (i - %d) * %d END)", half, oldStart, newStart, half, step)
	return []string{
		fmt.Sprintf(`INSERT INTO events (pk, source, event_id, type, entity, account, occurred_at, received_at, deliveries, disposition, routed)
			%s SELECT i, 'stripe', 'evt_' || i, 'invoice.paid', 'in_' || (i %% %d), '', %s, %s, 1,
			CASE WHEN i %% %d = 0 THEN 'accepted' WHEN i %% 50 = 3 THEN 'duplicate' ELSE 'applied' END, %s FROM %s`,
			overriding, f.entities, ts(at), ts(at), modRetPending, boolean("1 = 1"), series(f.events)),
		fmt.Sprintf(`INSERT INTO deliveries (event_pk, request_id, batch_index, source, event_id, type, entity, account, occurred_at, received_at, headers, body)
			SELECT i, 'req_' || i, 0, 'stripe', 'evt_' || i, 'invoice.paid', 'in_' || (i %% %d), '', %s, %s,
			'{"Content-Type":"application/json"}', %s FROM %s`,
			f.entities, ts(at), ts(at), body, series(f.events)),
		fmt.Sprintf(`INSERT INTO work (flow, entity, event_pk, order_key, created_at, done_at, disposition)
			SELECT 'billing', 'in_' || (i %% %d), i, 'k' || i, %s,
			CASE WHEN i %% %d = 0 THEN NULL ELSE %s END,
			CASE WHEN i %% %d = 0 THEN '' ELSE 'applied' END FROM %s`,
			f.entities, ts(at), modRetPending, ts(at), modRetPending, series(f.events)),
		// Each entity's projection was applied from its newest event,
		// which is recent.
		fmt.Sprintf(`INSERT INTO entities (flow, entity, version, version_sort, state, applied_event_pk, updated_at)
			SELECT 'billing', 'in_' || ((%d - i) %% %d), 'r1', 'r1', 'null', %d - i, %s FROM %s`,
			f.events, f.entities, f.events, ts(fmt.Sprint(now.UnixMicro())), series(f.entities)),
		fmt.Sprintf(`INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state, request,
			source_event_pk, causation_id, hop, created_at, updated_at)
			SELECT 'billing:in_' || i || ':notify', 'billing', 'in_' || (i %% %d), 'r1', 'r1', 'notify', 'crm', 'done', '{}',
			i, '', 0, %s, %s FROM %s WHERE i %% %d = 0`,
			f.entities, ts(at), ts(at), series(f.events), modRetEffect),
		fmt.Sprintf(`INSERT INTO audit (at, actor, action, source, event_id, entity, detail)
			SELECT %s, 'flow', 'work_settled', 'stripe', 'evt_' || ((i + 1) / 2), 'in_' || (i %% %d), 'flow billing'
			FROM %s`,
			ts(strings.ReplaceAll(at, "i", "((i + 1) / 2)")), f.entities, series(2*f.events)),
	}
}

func loadRetentionFixture(ctx context.Context, driver, url string, f *retentionFlags, now time.Time) error {
	switch driver {
	case "sqlite":
		db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(url, "sqlite:")+"?_pragma=busy_timeout(10000)")
		if err != nil {
			return err
		}
		defer db.Close()
		for _, q := range retentionSQL(sqliteSeries, func(e string) string { return e }, func(e string) string { return "(" + e + ")" },
			"", fmt.Sprintf("zeroblob(%d)", retBodyBytes), f, now) {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%.60s...: %w", strings.TrimSpace(q), err)
			}
		}
		return nil
	case "postgres":
		conn, err := pgx.Connect(ctx, singleConnURL(url))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		ts := func(e string) string { return "to_timestamp((" + e + ")::float8 / 1e6)" }
		for _, q := range retentionSQL(postgresSeries, ts, func(e string) string { return "(" + e + ")" },
			"OVERRIDING SYSTEM VALUE", fmt.Sprintf("convert_to(repeat('x', %d), 'UTF8')", retBodyBytes), f, now) {
			if _, err := conn.Exec(ctx, q); err != nil {
				return fmt.Errorf("%.60s...: %w", strings.TrimSpace(q), err)
			}
		}
		// PostgreSQL's pk sequence must move past the planted rows, and
		// the planner needs statistics for tables this size.
		if _, err := conn.Exec(ctx, `SELECT setval(pg_get_serial_sequence('events', 'pk'), (SELECT max(pk) FROM events))`); err != nil {
			return fmt.Errorf("move the events sequence: %w", err)
		}
		if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
			return fmt.Errorf("analyze: %w", err)
		}
		return nil
	}
	return fmt.Errorf("unknown driver %q", driver)
}
