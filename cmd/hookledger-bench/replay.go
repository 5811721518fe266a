package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hookledger/hookledger/internal/store/storeopen"
)

type replayFlags struct {
	sizes      []int
	perEntity  int
	hookledger string
	module     string
	dir        string
	table      bool
}

// replayRSSGoal is the product's goal for the replay verb's peak RSS,
// whatever the number of events it replays.
const replayRSSGoal = 100 << 10 // KiB

func runReplayBench(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "replay", "replay [--sizes 10000,100000,1000000] [--hookledger BIN] [flags]",
		"The replay verb on large stores. For each size, a fresh SQLite store is loaded with\n"+
			"that many processed events (a 200-byte JSON body each, --per-entity events per\n"+
			"entity, each with its settled work item), straight in SQL. A 'hookledger serve' runs\n"+
			"on it, and 'hookledger replay' of every stored event runs as its own process, as an\n"+
			"operator would run it: it selects the events, enqueues the replay and waits until\n"+
			"the server has settled every work item. Prints, per size, the time to enqueue,\n"+
			"the time to the end, the time per event, and the peak RSS of the replay process\n"+
			"(its rusage) and of the server (VmHWM); then whether the time per event of the\n"+
			"largest size stays within 2x the smallest's (linear) and every replay's peak RSS\n"+
			"under 100 MiB. Exit 1 when a replay does not settle exactly one work item per event.")
	var f replayFlags
	sizes := fs.String("sizes", "10000,100000,1000000", "comma-separated numbers of stored `events`, one run each")
	fs.IntVar(&f.perEntity, "per-entity", 10, "events per entity")
	fs.StringVar(&f.hookledger, "hookledger", "", "prebuilt hookledger `binary` (default: go build ./cmd/hookledger from --module into the temp dir)")
	fs.StringVar(&f.module, "module", ".", "hookledger module `directory` to build from")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir holding the SQLite files (default the system temp dir)")
	table := tableFlag(fs)
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	f.table = *table
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(stderr, "hookledger-bench replay: --sizes: %q is not a positive number\n", s)
			return exitUsage
		}
		f.sizes = append(f.sizes, n)
	}
	if f.perEntity < 1 {
		fmt.Fprintln(stderr, "hookledger-bench replay: --per-entity must be positive")
		return exitUsage
	}
	return benchExit(stderr, "replay")(replayBench(ctx, stdout, stderr, &f))
}

// replayRun is one size's figures.
type replayRun struct {
	events           int
	enqueued, total  time.Duration
	replayKiB        int64 // the replay process's peak RSS
	serveKiB         int64 // the server's peak RSS
	workItems, settl int
}

func (r *replayRun) perEvent() time.Duration { return r.total / time.Duration(r.events) }

func replayBench(ctx context.Context, stdout, stderr io.Writer, f *replayFlags) (bool, error) {
	dir, err := os.MkdirTemp(f.dir, "hookledger-bench-replay-")
	if err != nil {
		return false, fmt.Errorf("make temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	bin := f.hookledger
	if bin == "" {
		bin = filepath.Join(dir, "hookledger")
		fmt.Fprintf(stderr, "building hookledger from %s...\n", f.module)
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/hookledger")
		build.Dir = f.module
		if out, err := build.CombinedOutput(); err != nil {
			return false, fmt.Errorf("go build ./cmd/hookledger: %w\n%s", err, out)
		}
	}
	fmt.Fprintf(stdout, "replay of every stored event (SQLite, %d events per entity); peak RSS of the replay process and of the server\n\n", f.perEntity)
	fmt.Fprintf(stdout, "%10s %11s %9s %12s %15s %14s\n", "events", "enqueued s", "total s", "us/event", "replay RSS MiB", "serve RSS MiB")
	ok := true
	var runs []*replayRun
	for _, n := range f.sizes {
		run, err := replayCell(ctx, stderr, f, dir, bin, n)
		if err != nil {
			return false, fmt.Errorf("%d events: %w", n, err)
		}
		fmt.Fprintf(stdout, "%10d %11.1f %9.1f %12.1f %15s %14s\n", n, run.enqueued.Seconds(), run.total.Seconds(),
			float64(run.perEvent().Nanoseconds())/1e3, mib(run.replayKiB), mib(run.serveKiB))
		if run.workItems != n || run.settl != n {
			fmt.Fprintf(stderr, "%d events: the replay enqueued %d work items and settled %d; want one each per event\n", n, run.workItems, run.settl)
			ok = false
		}
		runs = append(runs, run)
	}
	first, last := runs[0], runs[len(runs)-1]
	linear := float64(last.perEvent()) / float64(first.perEvent())
	peak := int64(0)
	for _, r := range runs {
		peak = max(peak, r.replayKiB)
	}
	fmt.Fprintln(stdout)
	fmt.Fprintf(stdout, "time per event at %d over %d events: %.2fx (linear: at most 2x): %s\n", last.events, first.events, linear, verdict(linear <= 2))
	fmt.Fprintf(stdout, "largest replay peak RSS: %s MiB (goal under 100 MiB): %s\n", mib(peak), verdict(peak < replayRSSGoal))
	if f.table {
		var rows []headline
		for _, r := range runs {
			rows = append(rows, headline{
				figure: fmt.Sprintf("replay of %s stored events, to the last work item settled", num(float64(r.events))),
				value: fmt.Sprintf("%.1f s (enqueued in %.1f s), %.1f us/event; replay peak RSS %s MiB, server %s MiB",
					r.total.Seconds(), r.enqueued.Seconds(), float64(r.perEvent().Nanoseconds())/1e3, mib(r.replayKiB), mib(r.serveKiB)),
				goal: "RSS under 100 MiB: " + verdict(r.replayKiB < replayRSSGoal),
			})
		}
		rows = append(rows, headline{
			figure:   fmt.Sprintf("time per event, %s over %s events", num(float64(last.events)), num(float64(first.events))),
			value:    fmt.Sprintf("%.1f us over %.1f us", float64(last.perEvent().Nanoseconds())/1e3, float64(first.perEvent().Nanoseconds())/1e3),
			baseline: fmt.Sprintf("%s events, same run", num(float64(first.events))),
			ratio:    fmt.Sprintf("%.2fx", linear),
			goal:     "linear (at most 2x): " + verdict(linear <= 2),
		})
		printHeadlines(stdout, "replay", rows)
	}
	return ok, nil
}

// replayCell loads n events into a fresh store, serves it and replays
// every event with the verb.
func replayCell(ctx context.Context, stderr io.Writer, f *replayFlags, dir, bin string, n int) (run *replayRun, err error) {
	run = &replayRun{events: n}
	path := filepath.Join(dir, fmt.Sprintf("replay-%d.db", n))
	defer func() {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			_ = os.Remove(path + suffix)
		}
	}()
	url := "sqlite:" + path
	st, err := storeopen.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	if _, err := st.Migrate(ctx); err != nil {
		st.Close()
		return nil, err
	}
	if err := st.Close(); err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "%d events: loading...\n", n)
	start := time.Now()
	if err := loadReplayFixture(ctx, path, n, f.perEntity, time.Now().UTC().Add(-time.Hour)); err != nil {
		return nil, fmt.Errorf("load fixture: %w", err)
	}
	fmt.Fprintf(stderr, "%d events: loaded in %s\n", n, time.Since(start).Round(time.Millisecond))
	cfg := filepath.Join(dir, fmt.Sprintf("replay-%d.yaml", n))
	if err := replayConfig(cfg, url); err != nil {
		return nil, err
	}
	srv, err := startChild(ctx, "hookledger serve", bin, []string{"serve", "--config", cfg, "--log-format", "json"}, filepath.Join(dir, fmt.Sprintf("serve-%d.log", n)))
	if err != nil {
		return nil, err
	}
	hwm := startHWMSampler(srv.cmd.Process.Pid)
	defer func() {
		run.serveKiB = hwm.read()
		hwm.close()
		err = errors.Join(err, srv.stop())
	}()
	return run, replayVerb(ctx, stderr, bin, cfg, run)
}

// replayVerb runs 'hookledger replay' to its end and fills run with its
// times, its peak RSS and its outcome.
func replayVerb(ctx context.Context, stderr io.Writer, bin, cfg string, run *replayRun) error {
	cmd := exec.CommandContext(ctx, bin, "replay", "--config", cfg, "--format", "json", "--actor", "bench")
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	pipe, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start hookledger replay: %w", err)
	}
	// The verb says it waits once the replay is enqueued.
	var lines []string
	sc := bufio.NewScanner(pipe)
	for sc.Scan() {
		if run.enqueued == 0 && strings.HasPrefix(sc.Text(), "waiting for 'hookledger serve'") {
			run.enqueued = time.Since(start)
		}
		lines = append(lines[max(0, len(lines)-20):], sc.Text())
	}
	werr := cmd.Wait()
	run.total = time.Since(start)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.replayKiB = ru.Maxrss // KiB on Linux
	}
	if werr != nil {
		return fmt.Errorf("hookledger replay: %w\n%s", werr, strings.Join(lines, "\n"))
	}
	var out struct {
		Replay struct {
			WorkItems int  `json:"work_items"`
			Settled   int  `json:"settled"`
			Done      bool `json:"done"`
		} `json:"replay"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return fmt.Errorf("hookledger replay: read its JSON: %w (%q)", err, stdout.String())
	}
	run.workItems, run.settl = out.Replay.WorkItems, out.Replay.Settled
	fmt.Fprintf(stderr, "%d events: replay done in %s (enqueued in %s)\n", run.events, run.total.Round(time.Millisecond), run.enqueued.Round(time.Millisecond))
	return nil
}

func replayConfig(path, storeURL string) error {
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: %q
admin:
  token: %q
sources:
  - name: stripe
    kind: stripe
    secrets: [%q]
flows:
  - name: invoices
    source: stripe
    events: ["invoice.*"]
    entity: event.data.object.id
    version:
      mode: revision
      revision: event.created
    state: '{"amount": event.data.object.amount_paid}'
`, storeURL, randomHex(24), "whsec_"+randomHex(24))
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// loadReplayFixture plants n processed Stripe invoice events, perEntity
// per invoice, each with its delivery and its settled first work item,
// in big statements (a million rows take seconds, not the minutes the
// inbox would).
func loadReplayFixture(ctx context.Context, path string, n, perEntity int, start time.Time) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	series := sqliteSeries(n)
	entities := (n + perEntity - 1) / perEntity
	at := fmt.Sprintf("(%d + i * 1000)", start.UnixMicro())
	entity := fmt.Sprintf("'in_' || (i %% %d)", entities)
	body := `'{"id":"evt_' || i || '","type":"invoice.paid","created":' || (1700000000 + i) ||
		',"data":{"object":{"id":' || '"in_' || (i % ` + strconv.Itoa(entities) + `) || '","object":"invoice","amount_paid":' || (i % 10000) ||
		',"currency":"eur","customer":"cus_' || (i % 977) || '","status":"paid"}}}'`
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO events (pk, source, event_id, type, entity, account, occurred_at, received_at, deliveries, disposition, routed)
			SELECT i, 'stripe', 'evt_' || i, 'invoice.paid', %s, '', %s, %s, 1, 'applied', 1 FROM %s`, entity, at, at, series),
		fmt.Sprintf(`INSERT INTO deliveries (event_pk, request_id, batch_index, source, event_id, type, entity, account, occurred_at, received_at, headers, body)
			SELECT i, 'req_' || i, 0, 'stripe', 'evt_' || i, 'invoice.paid', %s, '', %s, %s, '{"Content-Type":"application/json"}', CAST(%s AS BLOB) FROM %s`,
			entity, at, at, body, series),
		fmt.Sprintf(`INSERT INTO work (flow, entity, event_pk, order_key, created_at, done_at, disposition)
			SELECT 'invoices', %s, i, printf('%%020d', i), %s, %s, 'applied' FROM %s`, entity, at, at, series),
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%.60s...: %w", strings.TrimSpace(q), err)
		}
	}
	return nil
}
