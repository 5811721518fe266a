package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

const (
	targetNoop     = "noop"
	targetFloor    = "floor"
	targetSQLite   = "sqlite"
	targetPostgres = "postgres"
)

type receiveFlags struct {
	postgres    string
	targets     []string
	clients     []int
	duration    time.Duration
	warmup      time.Duration
	settle      time.Duration
	maxRequests int64
	hookledger  string
	module      string
	sample      int
	cpuProfile  string
	dir         string
	goalRatio   float64 // SQLite over the durable floor
	goalRatioPG float64 // PostgreSQL over the durable floor
	goalP99     time.Duration
	table       bool
	// unrouted gives the source a flow for other event types, so every
	// event is stored unrouted on receipt, with its audit row.
	unrouted bool
}

func runReceive(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "receive", "receive [--postgres URL] [--clients 32,128] [--duration 10s] [flags]",
		"Drives Stripe-signed webhooks (~2 KB invoice events, unique ids) from this process\n"+
			"over keep-alive HTTP/1.1, one connection per client, at servers it starts as child\n"+
			"processes on 127.0.0.1: hookledger serve on SQLite, hookledger serve on PostgreSQL\n"+
			"(with --postgres), a no-op net/http server (the ceiling) and the same no-op server\n"+
			"answering only after appending the body to a file and a shared fdatasync (the\n"+
			"durable floor: no receiver that acknowledges only durable data can beat it on this\n"+
			"disk and these processors). Each cell gets a fresh\n"+
			"server and database. After each hookledger cell, a sample of acknowledged events\n"+
			"is looked up through the admin API, the server is stopped, and every acknowledged\n"+
			"event is looked for in the store itself. For a SQLite cell it also prints the one\n"+
			"writer's share of the measured time, the commits' share of that and the writer time\n"+
			"per request, from the server's own counters. With --unrouted the source has a flow,\n"+
			"but for other event types: every event is stored unrouted on receipt with its audit row,\n"+
			"as for a sender that sends types no flow handles, and the admin API sample must show\n"+
			"them unrouted. Exit 1 if any acknowledged event is missing.")
	var f receiveFlags
	fs.StringVar(&f.postgres, "postgres", "", "PostgreSQL admin `URL`; a database is created and dropped per cell (omit to skip the postgres target)")
	targets := fs.String("targets", "", "comma-separated `targets`: noop, floor, sqlite, postgres (default noop,floor,sqlite plus postgres with --postgres)")
	clients := fs.String("clients", "32,128", "comma-separated concurrent client `counts`")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "measured `time` per cell")
	fs.DurationVar(&f.warmup, "warmup", 2*time.Second, "unmeasured warm-up `time` per cell")
	fs.DurationVar(&f.settle, "settle", 3*time.Second, "before each cell, flush what earlier cells wrote to disk (sync) and wait this `time`,\n"+
		"so that a cell does not pay for the writeback of the one before it")
	fs.Int64Var(&f.maxRequests, "max-requests", 2_000_000, "upper bound on requests sent per cell, warm-up included")
	fs.StringVar(&f.hookledger, "hookledger", "", "prebuilt hookledger `binary` (default: go build ./cmd/hookledger from --module into the temp dir)")
	fs.StringVar(&f.module, "module", ".", "hookledger module `directory` to build from")
	fs.IntVar(&f.sample, "sample", 200, "acknowledged events per cell looked up through the admin API")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "run the hookledger servers in-process under 'hookledger-bench serve' and write one CPU profile per cell into `dir`")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir (default the system temp dir)")
	fs.Float64Var(&f.goalRatio, "goal-ratio", 0.8, "product target: sqlite throughput over the durable floor at the smallest client count")
	fs.Float64Var(&f.goalRatioPG, "goal-ratio-postgres", 0.5, "product target: postgres throughput over the durable floor at the smallest client count")
	fs.DurationVar(&f.goalP99, "goal-p99", 25*time.Millisecond, "product target: sqlite and postgres p99 at the smallest client count")
	tracingRatios := fs.String("tracing", "", "comma-separated sampling `ratios` (e.g. 0.01,1): each hookledger target also runs with tracing on at each,\n"+
		"exporting OTLP/HTTP to a sink on loopback (targets named sqlite@0.01)")
	fs.BoolVar(&f.unrouted, "unrouted", false, "give the source a flow for other event types (customer.*), so every event is stored unrouted with its audit row")
	table := tableFlag(fs)
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	f.table = *table
	var err error
	if f.clients, err = parseCounts(*clients); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench receive: --clients: %v\n", err)
		return exitUsage
	}
	if f.targets, err = chooseTargets(*targets, []string{targetNoop, targetFloor, targetSQLite},
		[]string{targetNoop, targetFloor, targetSQLite, targetPostgres}, f.postgres); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench receive: --targets: %v\n", err)
		return exitUsage
	}
	if f.duration <= 0 || f.warmup < 0 || f.maxRequests <= 0 || f.sample < 0 {
		fmt.Fprintln(stderr, "hookledger-bench receive: --duration and --max-requests must be positive, --warmup and --sample not negative")
		return exitUsage
	}
	if f.targets, err = withTracing(f.targets, *tracingRatios); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench receive: --tracing: %v\n", err)
		return exitUsage
	}
	return benchExit(stderr, "receive")(receiveBench(ctx, stdout, stderr, &f))
}

// receiveResult is one target × clients cell.
type receiveResult struct {
	target  string
	clients int
	sent    int64 // requests answered while measuring
	elapsed time.Duration
	lat     latencies
	non2xx  int64 // answers other than 2xx, whole cell
	// CPU time used while measuring: the server process (with its
	// database's backends on PostgreSQL) and this load generator.
	// meter reads them (nil: not measured).
	serverCPU, clientCPU time.Duration
	meter                *cpuMeter
	errs                 int64 // transport errors, whole cell
	firstErr             string

	// The durability account (hookledger targets only).
	acked         int
	stored        int
	missing       int
	sampleAsked   int
	sampleFound   int
	stopErr       error
	profile       string
	storeAccounts bool

	// The SQLite writer's time while measuring, from the server's own
	// counters (SQLite cells only: PostgreSQL has no one writer);
	// writerErr when they could not be read.
	writerBusy, writerCommit float64 // seconds
	writerErr                error
}

func (r *receiveResult) rate() float64 { return rate(r.sent, r.elapsed) }

// receiveEnv is what every cell shares.
type receiveEnv struct {
	f          *receiveFlags
	dir        string
	hookledger string
	self       string
	profiles   string        // e2e: the directory of the servers' CPU profiles, if any
	linger     time.Duration // e2e: the servers' processing.linger (0: none)
	secret     string
	token      string
	scheme     signature.Scheme
	stderr     io.Writer
	otlp       string // the OTLP sink's URL, for targets with tracing on
}

func receiveBench(ctx context.Context, stdout, stderr io.Writer, f *receiveFlags) (bool, error) {
	dir, err := os.MkdirTemp(f.dir, "hookledger-bench-receive-")
	if err != nil {
		return false, fmt.Errorf("make temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	env := &receiveEnv{f: f, dir: dir, stderr: stderr, hookledger: f.hookledger}
	if env.self, err = os.Executable(); err != nil {
		return false, fmt.Errorf("find own binary for the noop server: %w", err)
	}
	if env.hookledger == "" {
		env.hookledger = filepath.Join(dir, "hookledger")
		fmt.Fprintf(stderr, "building hookledger from %s...\n", f.module)
		build := exec.CommandContext(ctx, "go", "build", "-o", env.hookledger, "./cmd/hookledger")
		build.Dir = f.module
		if out, err := build.CombinedOutput(); err != nil {
			return false, fmt.Errorf("go build ./cmd/hookledger: %w\n%s", err, out)
		}
	}
	if f.cpuProfile != "" {
		if err := os.MkdirAll(f.cpuProfile, 0o750); err != nil {
			return false, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	env.secret = "whsec_" + randomHex(24)
	env.token = randomHex(24)
	if slices.ContainsFunc(f.targets, func(t string) bool { return strings.Contains(t, "@") }) {
		stop, err := env.startOTLPSink(stderr)
		if err != nil {
			return false, err
		}
		defer stop()
	}
	if env.scheme, err = signature.New(signature.Options{Kind: signature.KindStripe, Secrets: []string{env.secret}}); err != nil {
		return false, fmt.Errorf("stripe signer: %w", err)
	}

	var results []*receiveResult
	for _, n := range f.clients {
		for _, target := range f.targets {
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("interrupted: %w", err)
			}
			label := fmt.Sprintf("%s-%d", target, n)
			settle(ctx, f.settle)
			fmt.Fprintf(stderr, "cell %s: warm-up %s, measure %s...\n", label, f.warmup, f.duration)
			res, err := env.cell(ctx, target, n, label)
			if err != nil {
				return false, fmt.Errorf("cell %s: %w", label, err)
			}
			fmt.Fprintf(stderr, "cell %s: %.0f req/s, p50 %s ms, p99 %s ms, p99.9 %s ms, non-2xx %d, errors %d\n",
				label, res.rate(), ms(res.lat.pct(0.5)), ms(res.lat.pct(0.99)), ms(res.lat.pct(0.999)), res.non2xx, res.errs)
			if res.storeAccounts {
				fmt.Fprintf(stderr, "cell %s: acknowledged %d, stored %d, missing %d; admin API sample %d/%d\n",
					label, res.acked, res.stored, res.missing, res.sampleFound, res.sampleAsked)
			}
			results = append(results, res)
		}
	}
	ok := printReceive(stdout, f, results)
	if f.table {
		printHeadlines(stdout, "receive", receiveHeadlines(f, results))
	}
	return ok, nil
}

// settle flushes the page cache's dirty pages and waits d: the cell
// before wrote hundreds of megabytes (a database per cell, the floor's
// file), whose writeback otherwise lands in the next cell's measurement
// and made whichever target ran later look 5–10 ms slower at p99.
func settle(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	syscall.Sync()
	sleepCtx(ctx, d)
}

func randomHex(n int) string {
	b := make([]byte, n)
	// crypto/rand.Read never returns an error on supported platforms.
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cell starts a fresh server for target, loads it, and for hookledger
// accounts for every acknowledged event.
func (e *receiveEnv) cell(ctx context.Context, target string, clients int, label string) (res *receiveResult, err error) {
	res = &receiveResult{target: target, clients: clients}
	var cs *cellStore
	var srv *child
	defer func() {
		// Whatever happened, the child is stopped by its PID and the
		// database dropped.
		if srv != nil {
			if serr := srv.stop(); serr != nil && res.stopErr == nil {
				err = errors.Join(err, serr)
			}
		}
		if cs != nil {
			err = errors.Join(err, cs.Drop())
		}
	}()

	logPath := filepath.Join(e.dir, label+".log")
	switch target {
	case targetNoop:
		srv, err = startChild(ctx, "noop server", e.self, []string{"noop", "--listen", "127.0.0.1:0"}, logPath)
	case targetFloor:
		ring := filepath.Join(e.dir, label+".ring")
		defer os.Remove(ring)
		srv, err = startChild(ctx, "durable floor server", e.self, []string{"noop", "--listen", "127.0.0.1:0", "--durable", ring}, logPath)
	default:
		driver, ratio, _ := strings.Cut(target, "@")
		if cs, err = newCellStore(ctx, driver, e.dir, e.f.postgres, label); err != nil {
			return nil, err
		}
		cfgPath := filepath.Join(e.dir, label+".yaml")
		if err = e.writeConfig(cfgPath, cs.URL, ratio); err != nil {
			return nil, err
		}
		if e.f.cpuProfile != "" {
			res.profile = filepath.Join(e.f.cpuProfile, label+".pprof")
			srv, err = startChild(ctx, "hookledger-bench serve", e.self, []string{"serve", "--config", cfgPath, "--cpuprofile", res.profile}, logPath)
		} else {
			srv, err = startChild(ctx, "hookledger serve", e.hookledger, []string{"serve", "--config", cfgPath, "--log-format", "json"}, logPath)
		}
	}
	if err != nil {
		return nil, err
	}
	base := "http://" + srv.addr
	if target != targetNoop && target != targetFloor {
		if err := waitReady(ctx, base+"/readyz"); err != nil {
			return nil, err
		}
	}

	res.meter = newCPUMeter(srv.cmd.Process.Pid, cs)
	var writer func() (goMem, error)
	if cs != nil && cs.driver == targetSQLite {
		writer = func() (goMem, error) { return readGoMem(ctx, http.DefaultClient, srv.addr, e.token) }
	}
	acked := e.load(ctx, base+"/hooks/stripe", res, label, writer)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	if target == targetNoop || target == targetFloor {
		return res, nil
	}

	res.storeAccounts = true
	res.acked = len(acked)
	if res.sampleAsked, res.sampleFound, err = e.sampleAdmin(ctx, base, acked); err != nil {
		return nil, err
	}
	// Stop the server before reading the store, so the count sees what a
	// clean shutdown leaves behind, with no commit still in flight.
	res.stopErr = srv.stop()
	if res.stopErr != nil {
		return nil, res.stopErr
	}
	st, err := storeopen.Open(ctx, cs.URL)
	if err != nil {
		return nil, err
	}
	stored, err := storedEvents(ctx, st, benchSource)
	if cerr := st.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close store: %w", cerr)
	}
	if err != nil {
		return nil, err
	}
	for _, id := range acked {
		if stored[id] > 0 {
			res.stored++
		} else {
			res.missing++
		}
	}
	return res, nil
}

// writeConfig writes a hookledger.yaml for one cell: loopback on a port the
// kernel picks, one stripe source, the admin API on.
func (e *receiveEnv) writeConfig(path, storeURL, traceRatio string) error {
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: %q
admin:
  token: %q
sources:
  - name: stripe
    kind: stripe
    secrets: [%q]
`, storeURL, e.token, e.secret)
	if e.f.unrouted {
		cfg += unroutedFlowYAML
	}
	if traceRatio != "" {
		cfg += fmt.Sprintf("tracing:\n  endpoint: %s\n  sample_ratio: %s\n", e.otlp, traceRatio)
	}
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// unroutedFlowYAML is receive --unrouted's flow: it subscribes to none of
// the benchmark's events (invoice.paid), so the door stores each unrouted
// on receipt. Its destination is never called.
const unroutedFlowYAML = `destinations:
  - name: unused
    base_url: "http://127.0.0.1:9"
    allow_private_networks: true
flows:
  - name: customers
    source: stripe
    events: ["customer.*"]
    entity: event.data.object.id
    version:
      mode: revision
      revision: event.created
    state: '{"id": event.data.object.id}'
    effects:
      - name: note
        destination: unused
        request:
          path: '"/customers"'
          body: '{"customer": entity}'
`

func waitReady(ctx context.Context, u string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return fmt.Errorf("readiness: %w", err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("readiness: %s not ready after 30s (last error %v)", u, err)
		}
		sleepCtx(ctx, 50*time.Millisecond)
		if ctx.Err() != nil {
			return fmt.Errorf("readiness: %w", ctx.Err())
		}
	}
}

// load runs the clients through warm-up and measurement and returns the
// event ids that were acknowledged with a 2xx. writer, when not nil,
// reads the server's writer counters at the start and the end of the
// measured time.
func (e *receiveEnv) load(ctx context.Context, u string, res *receiveResult, label string, writer func() (goMem, error)) []string {
	const (
		phaseWarmup int32 = iota
		phaseMeasure
		phaseStop
	)
	var phase atomic.Int32
	var issued, measured, non2xx, errs atomic.Int64
	var errOnce sync.Once
	parts := make([]latencies, res.clients)
	ackedParts := make([][]string, res.clients)
	var wg sync.WaitGroup
	for i := range res.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One transport per client holding one keep-alive connection:
			// each client is one sender connection, as a webhook sender's
			// worker would be.
			tr := &http.Transport{
				MaxIdleConns:        1,
				MaxIdleConnsPerHost: 1,
				MaxConnsPerHost:     1,
				DisableCompression:  true,
				IdleConnTimeout:     time.Minute,
			}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			for seq := 0; phase.Load() != phaseStop && ctx.Err() == nil; seq++ {
				if issued.Add(1) > e.f.maxRequests {
					return
				}
				id := fmt.Sprintf("evt_%s_%d_%d", label, i, seq)
				status, lat, err := e.post(ctx, client, u, id)
				if err != nil {
					errs.Add(1)
					errOnce.Do(func() { res.firstErr = err.Error() })
					continue
				}
				if status/100 != 2 {
					non2xx.Add(1)
					errOnce.Do(func() { res.firstErr = fmt.Sprintf("HTTP %d", status) })
					continue
				}
				ackedParts[i] = append(ackedParts[i], id)
				if phase.Load() == phaseMeasure {
					measured.Add(1)
					parts[i] = append(parts[i], lat)
				}
			}
		}()
	}
	sleepCtx(ctx, e.f.warmup)
	var w0 goMem
	if writer != nil {
		w0, res.writerErr = writer()
	}
	res.meter.start()
	t0 := time.Now()
	phase.Store(phaseMeasure)
	sleepCtx(ctx, e.f.duration)
	phase.Store(phaseStop)
	res.elapsed = time.Since(t0)
	res.serverCPU, res.clientCPU = res.meter.stop()
	if writer != nil && res.writerErr == nil {
		w1, err := writer()
		res.writerBusy, res.writerCommit, res.writerErr = w1.writerBusy-w0.writerBusy, w1.writerCommit-w0.writerCommit, err
	}
	wg.Wait()
	res.sent, res.non2xx, res.errs = measured.Load(), non2xx.Load(), errs.Load()
	res.lat = mergeLatencies(parts)
	var acked []string
	for _, p := range ackedParts {
		acked = append(acked, p...)
	}
	return acked
}

// post sends one signed event and reads the whole answer, so the
// connection is reused. The latency runs from just before the request is
// written to the end of the answer: the acknowledgement as a sender sees it.
func (e *receiveEnv) post(ctx context.Context, client *http.Client, u, eventID string) (int, time.Duration, error) {
	now := time.Now()
	body := stripeBody(eventID, "in_"+eventID, now)
	sig, err := e.scheme.Sign(&signature.Request{Method: http.MethodPost, URL: u, Body: body}, now, eventID)
	if err != nil {
		return 0, 0, fmt.Errorf("sign: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, 0, fmt.Errorf("new request: %w", err)
	}
	req.Header = sig
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("User-Agent", "Stripe/1.0 (+https://stripe.com/docs/webhooks)")
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	lat := time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("read answer: %w", err)
	}
	return resp.StatusCode, lat, nil
}

// sampleAdmin looks up evenly spaced acknowledged events through
// GET /api/v1/events, the way an operator would.
func (e *receiveEnv) sampleAdmin(ctx context.Context, base string, acked []string) (asked, found int, err error) {
	n := min(e.f.sample, len(acked))
	for k := range n {
		id := acked[k*len(acked)/n]
		q := url.Values{"source": {benchSource}, "event_id": {id}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/v1/events?"+q.Encode(), nil)
		if err != nil {
			return asked, found, fmt.Errorf("admin API: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+e.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return asked, found, fmt.Errorf("admin API: %w", err)
		}
		var out struct {
			Events []struct {
				Source      string `json:"source"`
				EventID     string `json:"event_id"`
				Deliveries  int    `json:"deliveries"`
				Disposition string `json:"disposition"`
			} `json:"events"`
		}
		derr := json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || derr != nil {
			return asked, found, fmt.Errorf("admin API: GET events for %s: HTTP %d (%v)", id, resp.StatusCode, derr)
		}
		asked++
		if len(out.Events) == 1 && out.Events[0].EventID == id && out.Events[0].Source == benchSource && out.Events[0].Deliveries >= 1 {
			found++
			if e.f.unrouted && out.Events[0].Disposition != "unrouted" {
				return asked, found, fmt.Errorf("admin API: event %s is %s, want unrouted (--unrouted)", id, out.Events[0].Disposition)
			}
		}
	}
	return asked, found, nil
}

func printReceive(w io.Writer, f *receiveFlags, results []*receiveResult) bool {
	fmt.Fprintf(w, "hookledger-bench receive: %s per cell after %s warm-up; load generator and server share %d CPUs (GOMAXPROCS %d each)\n",
		f.duration, f.warmup, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "Stripe-signed invoice.paid events of ~%d B, keep-alive HTTP/1.1, one connection per client, 127.0.0.1\n",
		len(stripeBody("evt_x", "in_x", time.Now())))
	if f.unrouted {
		fmt.Fprintln(w, "--unrouted: the source's one flow takes customer.* only, so every event is stored unrouted on receipt with its audit row")
	}
	fmt.Fprintln(w)
	noop, floor := baselines(results)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tclients\treq/s\tp50 ms\tp99 ms\tp99.9 ms\tvs noop\tvs floor\tserver CPU us/req\tclient CPU us/req\tnon-2xx\terrors\tdurability account\t")
	allOK := true
	for _, r := range results {
		vs := "-"
		if b, ok := noop[r.clients]; ok && b.rate() > 0 && r.target != targetNoop {
			vs = fmt.Sprintf("%.2f", r.rate()/b.rate())
		}
		vsFloor := "-"
		if b, ok := floor[r.clients]; ok && b.rate() > 0 && r.target != targetNoop && r.target != targetFloor {
			vsFloor = fmt.Sprintf("%.2f", r.rate()/b.rate())
		}
		account := "-"
		if r.storeAccounts {
			account = fmt.Sprintf("acknowledged %d, stored %d, missing %d; API %d/%d", r.acked, r.stored, r.missing, r.sampleFound, r.sampleAsked)
			if r.missing > 0 || r.sampleFound != r.sampleAsked {
				allOK = false
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%d\t%d\t%s\t\n", r.target, r.clients, r.rate(),
			ms(r.lat.pct(0.50)), ms(r.lat.pct(0.99)), ms(r.lat.pct(0.999)), vs, vsFloor,
			perRequest(r.serverCPU, r.sent), perRequest(r.clientCPU, r.sent), r.non2xx, r.errs, account)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range results {
		if r.firstErr != "" {
			fmt.Fprintf(w, "%s-%d: first failure: %s\n", r.target, r.clients, r.firstErr)
		}
		if r.profile != "" {
			fmt.Fprintf(w, "%s-%d: CPU profile %s\n", r.target, r.clients, r.profile)
		}
		if line := receiveWriterLine(r); line != "" {
			fmt.Fprintf(w, "%s-%d: %s\n", r.target, r.clients, line)
		}
	}
	fmt.Fprintln(w, "latency: from writing the request to reading the whole answer, measured by the client.")
	fmt.Fprintln(w, "vs noop: throughput over the no-op net/http server at the same client count.")
	fmt.Fprintln(w, "vs floor: throughput over the durable floor (no-op handler + body appended to a preallocated file + group fdatasync).")
	fmt.Fprintln(w, "server CPU: the server process's user+system time while measuring (with its database's backends on PostgreSQL), per answered request;")
	fmt.Fprintln(w, "client CPU: the same for this load generator (a CPU profile, if taken, is in the server's figure).")
	fmt.Fprintln(w, "durability account: acknowledged (2xx) events, found in the store after the server stopped; API = admin API sample found/asked.")

	for _, g := range receiveGoals(f, results) {
		fmt.Fprintln(w, g.line())
		if g.cpuLine != "" {
			fmt.Fprintln(w, "  "+g.cpuLine)
		}
	}
	if allOK {
		fmt.Fprintln(w, "durability: every acknowledged event is stored")
	} else {
		fmt.Fprintln(w, "durability: FAILED, acknowledged events are missing from the store")
	}
	return allOK
}

// baselines are the noop and floor cells by client count.
func baselines(results []*receiveResult) (noop, floor map[int]*receiveResult) {
	noop, floor = map[int]*receiveResult{}, map[int]*receiveResult{}
	for _, r := range results {
		switch r.target {
		case targetNoop:
			noop[r.clients] = r
		case targetFloor:
			floor[r.clients] = r
		}
	}
	return noop, floor
}

// receiveGoal is a product target of the receive benchmark: a hookledger
// target's throughput over the durable floor of the same run, and its p99,
// at the smallest client count.
type receiveGoal struct {
	target  string
	clients int
	ratio   float64 // wanted
	p99     time.Duration
	r       *receiveResult
	floor   *receiveResult // nil: the floor did not run
	cpuLine string
}

func (g *receiveGoal) got() float64 {
	if g.floor == nil || g.floor.rate() <= 0 {
		return 0
	}
	return g.r.rate() / g.floor.rate()
}

func (g *receiveGoal) ratioMet() bool { return g.floor != nil && g.got() >= g.ratio }
func (g *receiveGoal) p99Met() bool   { return g.r.lat.pct(0.99) <= g.p99 }

func (g *receiveGoal) line() string {
	state := "MET"
	if !g.ratioMet() || !g.p99Met() {
		state = "NOT MET"
	}
	got := "the floor did not run"
	if g.floor != nil {
		got = fmt.Sprintf("%.2f of the floor (%.0f of %.0f req/s)", g.got(), g.r.rate(), g.floor.rate())
	}
	return fmt.Sprintf("goal (%s at %d clients: >= %.2f of the durable floor, p99 <= %s): %s, p99 %s ms: %s",
		g.target, g.clients, g.ratio, g.p99, got, ms(g.r.lat.pct(0.99)), state)
}

// receiveGoals are the goals of the targets that ran, each with what the
// processors alone would allow: were the machine's CPUs the only limit,
// each request of a target would cost its server's and the client's CPU
// time, and the ratio to the floor could be at most the floor's cost per
// request over the target's.
func receiveGoals(f *receiveFlags, results []*receiveResult) []*receiveGoal {
	_, floor := baselines(results)
	n := f.clients[0]
	var goals []*receiveGoal
	for _, r := range results {
		if r.clients != n || (r.target != targetSQLite && r.target != targetPostgres) {
			continue
		}
		g := &receiveGoal{target: r.target, clients: n, ratio: f.goalRatio, p99: f.goalP99, r: r, floor: floor[n]}
		if r.target == targetPostgres {
			g.ratio = f.goalRatioPG
		}
		if fl := g.floor; fl != nil && r.sent > 0 && fl.sent > 0 {
			fs, fc := perRequest(fl.serverCPU, fl.sent), perRequest(fl.clientCPU, fl.sent)
			hs, hc := perRequest(r.serverCPU, r.sent), perRequest(r.clientCPU, r.sent)
			if hs+hc > 0 {
				g.cpuLine = fmt.Sprintf("CPU per request: floor %.0f us server + %.0f us client, %s %.0f us server + %.0f us client; "+
					"were the %d CPUs the only limit, %s could reach (%.0f+%.0f)/(%.0f+%.0f) = %.2f of the floor",
					fs, fc, r.target, hs, hc, runtime.NumCPU(), r.target, fs, fc, hs, hc, (fs+fc)/(hs+hc))
			}
		}
		goals = append(goals, g)
	}
	return goals
}

// receiveHeadlines are the durable floor and each hookledger target beside
// the no-op server (and the floor) at the same client count, with the
// product's targets for SQLite and PostgreSQL at the smallest count, and
// the durability account of every hookledger cell.
func receiveHeadlines(f *receiveFlags, results []*receiveResult) []headline {
	noop, floor := baselines(results)
	goals := map[*receiveResult]*receiveGoal{}
	for _, g := range receiveGoals(f, results) {
		goals[g.r] = g
	}
	names := map[string]string{targetFloor: "durable floor", targetSQLite: "SQLite", targetPostgres: "PostgreSQL"}
	var rows []headline
	acked, missing, accounted := 0, 0, 0
	for _, r := range results {
		if r.target == targetNoop {
			continue
		}
		h := headline{
			figure: fmt.Sprintf("%s, %d clients", targetName(names, r.target), r.clients),
			value: fmt.Sprintf("%s req/s, p99 %s ms; server CPU %.0f us/request", num(r.rate()), ms(r.lat.pct(0.99)),
				perRequest(r.serverCPU, r.sent)),
		}
		var base, ratio []string
		if b := noop[r.clients]; b != nil && b.rate() > 0 {
			base = append(base, fmt.Sprintf("no-op server %s req/s", num(b.rate())))
			ratio = append(ratio, ratioOf(r.rate(), b.rate())+" of no-op")
		}
		if b := floor[r.clients]; b != nil && b.rate() > 0 && r.target != targetFloor {
			base = append(base, fmt.Sprintf("durable floor %s req/s", num(b.rate())))
			ratio = append(ratio, ratioOf(r.rate(), b.rate())+" of floor")
		}
		h.baseline, h.ratio = strings.Join(base, "; "), strings.Join(ratio, ", ")
		if g := goals[r]; g != nil {
			h.goal = fmt.Sprintf("p99 <= %s: %s", g.p99, verdict(g.p99Met()))
			if g.floor != nil {
				h.goal = fmt.Sprintf(">= %.2f of floor: %s; %s", g.ratio, verdict(g.ratioMet()), h.goal)
			}
		}
		rows = append(rows, h)
		if r.storeAccounts {
			accounted++
			acked += r.acked
			missing += r.missing
		}
	}
	if accounted > 0 {
		rows = append(rows, headline{
			figure: "acknowledged events missing from the store",
			value:  fmt.Sprintf("%s of %s acknowledged, over %d cells", num(float64(missing)), num(float64(acked)), accounted),
			goal:   "none: " + verdict(missing == 0),
		})
	}
	return rows
}

// receiveWriterLine is a SQLite cell's writer time while measuring: its
// share of the measured time, the commits' share of that, and the writer
// time per answered request (which, beside e2e's per event at capacity,
// bounds the pipeline's capacity over the door's rate where both wait
// for the one writer). "" for the cells that read none (PostgreSQL, the
// baselines) and, with the reason, when the counters could not be read.
func receiveWriterLine(r *receiveResult) string {
	if r.writerErr != nil {
		return "SQLite writer time not read: " + r.writerErr.Error()
	}
	perRequest, ok := r.writerPerRequest()
	if !ok || r.elapsed <= 0 {
		return ""
	}
	return fmt.Sprintf("SQLite writer: busy %.2f of the measured time, %.2f of that committing; %.0f us of writer time per request (%.0f committing)",
		r.writerBusy/r.elapsed.Seconds(), r.writerCommit/r.writerBusy,
		perRequest, r.writerCommit*1e6/float64(r.sent))
}

// writerPerRequest is the SQLite writer's time per request sent while
// measuring, in microseconds; false where none was read or nothing sent.
func (r *receiveResult) writerPerRequest() (float64, bool) {
	if r.writerBusy <= 0 || r.sent == 0 {
		return 0, false
	}
	return r.writerBusy * 1e6 / float64(r.sent), true
}
