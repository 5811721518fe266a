package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

type publishFlags struct {
	postgres    string
	targets     []string
	clients     int
	messages    int
	duration    time.Duration
	endpoints   int
	maxInFlight int
	paced       time.Duration
	// pacedRate, when set, is the open loop's rate instead of half the
	// capacity.
	pacedRate  float64
	drainFor   time.Duration
	hookledger string
	module     string
	dir        string
	cpuProfile string
	table      bool
	rounds     int
	// pad is the member of every message's data that holds --pad bytes
	// of filler ("" when there is none).
	pad string
}

func runPublish(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "publish", "publish [--postgres URL] [--clients 16] [--messages 500 | --duration 20s] [flags]",
		"Publishing and fan-out: per store, starts hookledger serve as a child process on\n"+
			"127.0.0.1 with a fresh store and --endpoints Standard Webhooks endpoints, every one\n"+
			"subscribed to every type and pointing at a loopback receiver in this process that\n"+
			"answers 204 at once. --clients closed-loop clients POST /api/v1/messages with a unique\n"+
			"Idempotency-Key each (202 only after the commit) for --messages messages, or for\n"+
			"--duration when it is set. Prints messages accepted/s with p50/p99 of the 202, then\n"+
			"the fan-out: deliveries/s from the first publish until the receivers hold every\n"+
			"delivery, with p50/p99 of (first receipt - publish sent). Then, once that fan-out is\n"+
			"done, an open loop publishes at half the publishing capacity (the lesser of the rate\n"+
			"the clients reached and the rate their messages reached every endpoint), for --paced, and\n"+
			"prints p50/p99 of (first receipt - publish sent) there. Baseline, same run, same\n"+
			"clients and count, on a fresh server and store of the same kind: Stripe-signed\n"+
			"webhooks into POST /hooks/stripe (the durable inbound path). Also prints the server's\n"+
			"RSS at the end and its peak (VmHWM) and CPU time, and each figure beside its goal:\n"+
			"publishing at least 0.5 of the baseline, fan-out keeping up (0.9 of the deliveries\n"+
			"the accepted messages ask for per second), p99 at half capacity at most 1 s, and\n"+
			"PostgreSQL publishing at least 0.5 of SQLite's. On SQLite, also the one writer's\n"+
			"time (the server's /metrics) per inbound webhook and per message accepted and\n"+
			"delivered to every endpoint, and the bound their ratio sets on publishing beside\n"+
			"the inbound rate while the writer is busy. On every store, the machine's CPU per\n"+
			"inbound webhook and per message delivered whole (the server's, the database's\n"+
			"backends' where PostgreSQL runs here, and this process's), and the bound it sets on\n"+
			"the same ratio were the processors the only limit. Exit 1 unless every accepted\n"+
			"message is stored once and reached every endpoint.")
	var f publishFlags
	fs.StringVar(&f.postgres, "postgres", "", "PostgreSQL admin `URL`; a database is created and dropped per cell (omit to measure SQLite only)")
	targets := fs.String("targets", "", "comma-separated `targets`: sqlite, postgres (default sqlite, plus postgres with --postgres)")
	fs.IntVar(&f.clients, "clients", 16, "concurrent publishing clients")
	fs.IntVar(&f.messages, "messages", 500, "messages to publish per store (ignored with --duration)")
	fs.DurationVar(&f.duration, "duration", 0, "publish for this `time` instead of a fixed count")
	fs.IntVar(&f.endpoints, "endpoints", 10, "endpoints every message goes to")
	fs.IntVar(&f.maxInFlight, "max-in-flight", 16, "publish.max_in_flight: the ceiling of each endpoint's adaptive deliveries in flight (1 keeps publication order)")
	fs.DurationVar(&f.paced, "paced", 5*time.Second, "publish at half the measured capacity for this `time` to measure publish → endpoint latency (0: skip)")
	fs.Float64Var(&f.pacedRate, "paced-rate", 0, "publish at this `rate` per second in the --paced loop instead of half the measured capacity\n(a light load: what a lone message costs, and how soon it arrives)")
	fs.DurationVar(&f.drainFor, "drain", 5*time.Minute, "upper bound on the `time` waited for every delivery")
	fs.StringVar(&f.hookledger, "hookledger", "", "prebuilt hookledger `binary` (default: go build ./cmd/hookledger from --module into the temp dir)")
	fs.StringVar(&f.module, "module", ".", "hookledger module `directory` to build from")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir (default the system temp dir)")
	fs.IntVar(&f.rounds, "rounds", 1, "`times` every target runs, in an order rotating by round; above 1, each target's figures come from\nits round of median publishing and PostgreSQL beside SQLite is the median of the rounds' ratios, so that one noisy\ncell does not decide a goal")
	padBytes := fs.Int("pad", 0, "`bytes` of filler added to every message's data (about 300 B without), to see what the size of a message costs")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "run the hookledger servers in-process under 'hookledger-bench serve' and write one CPU profile per server into `dir`\n(the servers' CPU figures then include the profiler's)")
	table := tableFlag(fs)
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	f.table = *table
	if f.clients < 1 || f.messages < 1 || f.duration < 0 || f.paced < 0 || !(f.pacedRate >= 0) || math.IsInf(f.pacedRate, 0) || f.endpoints < 1 || f.maxInFlight < 1 || f.maxInFlight > 1024 || f.drainFor <= 0 ||
		*padBytes < 0 || *padBytes > maxPad || f.rounds < 1 {
		fmt.Fprintf(stderr, "hookledger-bench publish: counts, --rounds and --drain must be positive, --max-in-flight at most 1024, --duration and --paced not negative, --paced-rate a finite rate not below 0, --pad from 0 to %d\n", maxPad)
		return exitUsage
	}
	if *padBytes > 0 {
		f.pad = `,"notes":"` + strings.Repeat("x", *padBytes) + `"`
	}
	var err error
	if f.targets, err = chooseTargets(*targets, []string{targetSQLite}, []string{targetSQLite, targetPostgres}, f.postgres); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench publish: --targets: %v\n", err)
		return exitUsage
	}
	return benchExit(stderr, "publish")(publishBench(ctx, stdout, stderr, &f))
}

// closedLoop is what a run of closed-loop clients measured.
type closedLoop struct {
	ok       int64 // answers counted as success
	failed   int64 // other answers and transport errors
	firstErr string
	elapsed  time.Duration
	lat      latencies
}

func (c *closedLoop) rate() float64 { return rate(c.ok, c.elapsed) }

// driveClosedLoop runs clients that each send one request after another
// (one keep-alive connection each) until count requests were issued, or
// until the duration is over when it is positive. do sends request seq and
// reports its latency and whether it succeeded.
func driveClosedLoop(ctx context.Context, clients, count int, duration time.Duration,
	do func(client *http.Client, seq int) (time.Duration, error)) *closedLoop {
	return drive(ctx, clients, count, duration, 0, do)
}

// pacedClients bounds the requests of the open loop in flight at once.
const pacedClients = 64

// drivePaced sends count requests at perSecond, each at its own time from
// the start whatever the answers before it (an open loop: a slow answer
// does not slow the sending), from up to pacedClients connections.
func drivePaced(ctx context.Context, perSecond float64, count int,
	do func(client *http.Client, seq int) (time.Duration, error)) *closedLoop {
	return drive(ctx, pacedClients, count, 0, perSecond, do)
}

// drive is both loops: clients connections take request numbers in turn;
// with perSecond above 0 each request waits for its own time from the
// start (open loop), otherwise it goes as soon as its client is free.
func drive(ctx context.Context, clients, count int, duration time.Duration, perSecond float64,
	do func(client *http.Client, seq int) (time.Duration, error)) *closedLoop {
	res := &closedLoop{}
	var issued, okN, failed atomic.Int64
	var errOnce sync.Once
	parts := make([]latencies, clients)
	var deadline time.Time
	start := time.Now()
	if duration > 0 {
		deadline = start.Add(duration)
	}
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			tr := &http.Transport{MaxIdleConns: 1, MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1,
				DisableCompression: true, IdleConnTimeout: time.Minute}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			for ctx.Err() == nil {
				if !deadline.IsZero() && time.Now().After(deadline) {
					return
				}
				seq := int(issued.Add(1)) - 1
				if deadline.IsZero() && seq >= count {
					return
				}
				if perSecond > 0 {
					sleepCtx(ctx, time.Until(start.Add(time.Duration(float64(seq)/perSecond*float64(time.Second)))))
				}
				lat, err := do(client, seq)
				if err != nil {
					failed.Add(1)
					errOnce.Do(func() { res.firstErr = err.Error() })
					continue
				}
				okN.Add(1)
				parts[i] = append(parts[i], lat)
			}
		})
	}
	wg.Wait()
	res.elapsed = time.Since(start)
	res.ok, res.failed = okN.Load(), failed.Load()
	res.lat = mergeLatencies(parts)
	return res
}

// fanoutSink is the loopback receiver of every endpoint: the endpoint is
// the path, the message the webhook-id. It answers 204 at once and keeps
// the arrival of each first delivery.
type fanoutSink struct {
	mu    sync.Mutex
	first map[string]time.Time // endpoint + " " + webhook-id -> first arrival
	calls int
	last  time.Time
}

func (s *fanoutSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	_, _ = io.Copy(io.Discard, r.Body)
	k := strings.Trim(r.URL.Path, "/") + " " + r.Header.Get("webhook-id")
	s.mu.Lock()
	s.calls++
	if _, ok := s.first[k]; !ok {
		s.first[k] = now
		s.last = now
	}
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *fanoutSink) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.first)
}

// publishEnv is what every cell shares.
type publishEnv struct {
	f          *publishFlags
	dir        string
	hookledger string
	token      string
	recv       *receiveEnv // the signed-webhook sender of the baseline
	// self is this binary, which serves under the profiler (--cpuprofile).
	self string
}

// publishResult is one store's figures.
type publishResult struct {
	target   string
	baseline *closedLoop
	pub      *closedLoop
	// Fan-out of the closed loop's messages.
	deliveries, calls int
	fanoutTook        time.Duration // first publish sent -> last first delivery
	deliveryLat       latencies
	drained           bool
	// The open loop at half the publishing capacity (nil: not run).
	paced     *closedLoop
	pacedRate float64 // asked for, per second
	pacedLat  latencies
	// Server.
	rssKiB, hwmKiB int64
	cpu            time.Duration
	// Accounts.
	stored, missing, unreached int
	// SQLite's one writer (zero elsewhere): over the baseline's loop, and
	// over the closed loop's publishing until its fan-out was done.
	inboundWriter, publishWriter writerSpan
	// The machine's CPU over the same two loops.
	inboundCPU, publishCPU cpuSpan
	// pacedFixed: the open loop ran at --paced-rate, not at half the
	// capacity, so its latency is no goal's figure.
	pacedFixed bool
	// pacedCPU is the same over the open loop and its fan-out.
	pacedCPU cpuSpan
}

// writerSpan is the writer's time over one loop (writer read, or why
// not), and how long the loop ran.
type writerSpan struct {
	m    goMem
	err  error
	took time.Duration
}

// measureWriter reads the writer's counters of the server at addr before
// and after do, on SQLite only (PostgreSQL has no one writer to read).
func measureWriter(ctx context.Context, driver, addr, token string, do func()) writerSpan {
	if driver != targetSQLite {
		do()
		return writerSpan{}
	}
	before, err := readGoMem(ctx, http.DefaultClient, addr, token)
	began := time.Now()
	do()
	ws := writerSpan{took: time.Since(began), err: err}
	if err == nil {
		var after goMem
		after, ws.err = readGoMem(ctx, http.DefaultClient, addr, token)
		ws.m = after.since(before)
	}
	return ws
}

func publishBench(ctx context.Context, stdout, stderr io.Writer, f *publishFlags) (bool, error) {
	dir, err := os.MkdirTemp(f.dir, "hookledger-bench-publish-")
	if err != nil {
		return false, fmt.Errorf("make temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	env := &publishEnv{f: f, dir: dir, hookledger: f.hookledger, token: randomHex(24)}
	if f.cpuProfile != "" {
		if err := os.MkdirAll(f.cpuProfile, 0o750); err != nil {
			return false, fmt.Errorf("--cpuprofile: %w", err)
		}
		if env.self, err = os.Executable(); err != nil {
			return false, fmt.Errorf("--cpuprofile: find own binary: %w", err)
		}
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
	env.recv = &receiveEnv{secret: "whsec_" + randomHex(24), stderr: stderr}
	if env.recv.scheme, err = signature.New(signature.Options{Kind: signature.KindStripe, Secrets: []string{env.recv.secret}}); err != nil {
		return false, fmt.Errorf("stripe signer: %w", err)
	}

	var rounds [][]*publishResult
	ok := true
	for round := range f.rounds {
		order := pick(f.targets, rotated(len(f.targets), round))
		results := make([]*publishResult, len(f.targets))
		for _, target := range order {
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("interrupted: %w", err)
			}
			res, err := env.cell(ctx, stderr, target)
			if err != nil {
				return false, fmt.Errorf("%s: %w", target, err)
			}
			// Reported in the targets' own order, whatever order they ran in.
			results[slices.Index(f.targets, target)] = res
		}
		if f.rounds > 1 {
			fmt.Fprintf(stdout, "== round %d of %d (targets run in the order %s)\n", round+1, f.rounds, strings.Join(order, ", "))
		}
		ok = printPublish(stdout, f, results) && ok
		rounds = append(rounds, results)
	}
	sum := summarizePublish(rounds)
	if f.rounds > 1 {
		printPublishRounds(stdout, f, rounds, sum)
	}
	if f.table {
		printHeadlines(stdout, "publish", publishHeadlines(f, sum))
	}
	return ok, nil
}

// publishSummary is what the table says of a run of one or more rounds.
type publishSummary struct {
	rounds int
	// results holds, per target, its round of median publishing rate
	// (the lower middle one of an even number): every figure of a row
	// then comes from one measured round.
	results []*publishResult
	// ratios are the rounds' PostgreSQL-over-SQLite ratios (none when
	// the run did not measure both), and pgOverSQLite their median.
	ratios       []float64
	pgOverSQLite float64
	// The account of every round's messages.
	accepted int64
	lost     int
	drained  bool
}

// summarizePublish summarizes the rounds, each holding one result per
// target in the same order.
func summarizePublish(rounds [][]*publishResult) publishSummary {
	sum := publishSummary{rounds: len(rounds), drained: true}
	if len(rounds) == 0 {
		return sum
	}
	for _, results := range rounds {
		if v, ok := pgOverSQLite(results); ok {
			sum.ratios = append(sum.ratios, v)
		}
		for _, r := range results {
			sum.accepted += r.accepted()
			sum.lost += r.missing + r.unreached
			sum.drained = sum.drained && r.drained
		}
	}
	sum.pgOverSQLite, _, _ = medianRange(sum.ratios)
	for t := range rounds[0] {
		byRate := make([]*publishResult, len(rounds))
		for i, results := range rounds {
			byRate[i] = results[t]
		}
		slices.SortStableFunc(byRate, func(a, b *publishResult) int { return cmp.Compare(a.pub.rate(), b.pub.rate()) })
		sum.results = append(sum.results, byRate[(len(byRate)-1)/2])
	}
	return sum
}

// printPublishRounds prints, per target, each round's publishing rate,
// its ratio to the inbound path and its fan-out keeping up, with their
// medians, and the rounds' PostgreSQL-over-SQLite ratios.
func printPublishRounds(w io.Writer, f *publishFlags, rounds [][]*publishResult, sum publishSummary) {
	fmt.Fprintf(w, "\n== %d rounds: per round, then the median\n", len(rounds))
	for t, target := range f.targets {
		var pubs, vs, keeps []float64
		for _, results := range rounds {
			r := results[t]
			pubs, keeps = append(pubs, r.pub.rate()), append(keeps, r.keepUp(f.endpoints))
			if r.baseline.rate() > 0 {
				vs = append(vs, r.pub.rate()/r.baseline.rate())
			}
		}
		fmt.Fprintf(w, "%s: publishes/s %s; over inbound %s; fan-out keeps up %s\n", target,
			series(pubs, num), series(vs, twoPlaces), series(keeps, twoPlaces))
	}
	if len(sum.ratios) > 0 {
		fmt.Fprintf(w, "PostgreSQL publishing over SQLite's: %s\n", series(sum.ratios, twoPlaces))
	}
	fmt.Fprintln(w, "the table: each target's figures from its round of median publishing; PostgreSQL over SQLite, the median of the rounds' ratios")
}

// series is xs, each as format writes it, and their median.
func series(xs []float64, format func(float64) string) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = format(x)
	}
	med, _, _ := medianRange(xs)
	return fmt.Sprintf("%s (median %s)", strings.Join(parts, ", "), format(med))
}

func twoPlaces(x float64) string { return fmt.Sprintf("%.2f", x) }

// config writes a hookledger.yaml: a stripe source for the baseline, the
// admin API, and the endpoints at the loopback receiver.
func (e *publishEnv) config(path, storeURL, sinkURL string) error {
	var b strings.Builder
	fmt.Fprintf(&b, `listen: 127.0.0.1:0
store: %q
admin:
  token: %q
sources:
  - name: stripe
    kind: stripe
    secrets: [%q]
publish:
  max_in_flight: %d
endpoints:
`, storeURL, e.token, e.recv.secret, e.f.maxInFlight)
	for i := range e.f.endpoints {
		fmt.Fprintf(&b, "  - {id: e%d, url: %q, allow_private_networks: true}   # the receiver listens on loopback\n", i, fmt.Sprintf("%s/e%d", sinkURL, i))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// server starts hookledger serve on a fresh store of driver and waits
// until it is ready; stop stops it and drops the store.
func (e *publishEnv) server(ctx context.Context, driver, label, sinkURL string) (srv *child, cs *cellStore, err error) {
	if cs, err = newCellStore(ctx, driver, e.dir, e.f.postgres, label); err != nil {
		return nil, nil, err
	}
	cfgPath := filepath.Join(e.dir, label+".yaml")
	if err = e.config(cfgPath, cs.URL, sinkURL); err != nil {
		return nil, nil, errors.Join(err, cs.Drop())
	}
	bin, args := e.hookledger, []string{"serve", "--config", cfgPath, "--log-format", "json"}
	if e.f.cpuProfile != "" {
		bin, args = e.self, []string{"serve", "--config", cfgPath, "--cpuprofile", filepath.Join(e.f.cpuProfile, label+".pprof")}
	}
	srv, err = startChild(ctx, "hookledger serve ("+label+")", bin, args, filepath.Join(e.dir, label+".log"))
	if err != nil {
		return nil, nil, errors.Join(err, cs.Drop())
	}
	if err := waitReady(ctx, "http://"+srv.addr+"/readyz"); err != nil {
		return nil, nil, errors.Join(err, srv.stop(), cs.Drop())
	}
	return srv, cs, nil
}

func (e *publishEnv) cell(ctx context.Context, stderr io.Writer, target string) (res *publishResult, err error) {
	res = &publishResult{target: target}
	sink := &fanoutSink{first: map[string]time.Time{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("receiver: %w", err)
	}
	hs := &http.Server{Handler: sink, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	defer hs.Close()
	sinkURL := "http://" + ln.Addr().String()

	run := randomHex(4)
	if res.baseline, res.inboundWriter, res.inboundCPU, err = e.baseline(ctx, stderr, target, sinkURL, run); err != nil {
		return nil, err
	}

	fmt.Fprintf(stderr, "%s: publishing to %d endpoints...\n", target, e.f.endpoints)
	srv, cs, err := e.server(ctx, target, target+"-publish", sinkURL)
	if err != nil {
		return nil, err
	}
	defer func() {
		if srv != nil {
			err = errors.Join(err, srv.stop())
		}
		err = errors.Join(err, cs.Drop())
	}()
	base := "http://" + srv.addr
	var sentMu sync.Mutex
	sent := map[string]time.Time{}  // message id -> publish request sent
	paced := map[string]time.Time{} // the same, for the open loop's
	publish := func(into map[string]time.Time, prefix string) func(c *http.Client, seq int) (time.Duration, error) {
		return func(c *http.Client, seq int) (time.Duration, error) {
			at := time.Now()
			id, err := e.publishOne(ctx, c, base, fmt.Sprintf("%s-%s-%d", prefix, run, seq), seq)
			lat := time.Since(at)
			if err != nil {
				return 0, err
			}
			sentMu.Lock()
			into[id] = at
			sentMu.Unlock()
			return lat, nil
		}
	}
	began := time.Now()
	meter := newCPUMeter(srv.cmd.Process.Pid, cs)
	meter.start()
	res.publishWriter = measureWriter(ctx, target, srv.addr, e.token, func() {
		res.pub = driveClosedLoop(ctx, e.f.clients, e.f.messages, e.f.duration, publish(sent, "bench"))
		if ctx.Err() == nil {
			res.drained = e.drain(ctx, sink, len(sent))
		}
	})
	res.publishCPU = meter.span()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("interrupted: %w", err)
	}
	// Publishing's capacity is the lesser of the rate messages were
	// accepted and the rate they were delivered whole (every endpoint
	// reached): paced above what the fan-out sustains, a backlog grows
	// for as long as the loop runs and its latency measures the loop's
	// length, not the server.
	capacity := res.pub.rate()
	if took := time.Since(began).Seconds(); took > 0 {
		capacity = min(capacity, float64(len(sent))/took)
	}
	if res.drained && e.f.paced > 0 && capacity > 0 {
		// Half the capacity just measured, once the fan-out of the closed
		// loop is done: the latency a message sees when the server is not
		// saturated.
		res.pacedRate = capacity / 2
		if e.f.pacedRate > 0 {
			res.pacedRate, res.pacedFixed = e.f.pacedRate, true
		}
		fmt.Fprintf(stderr, "%s: publishing at %.0f/s for %s...\n", target, res.pacedRate, e.f.paced)
		count := max(1, int(res.pacedRate*e.f.paced.Seconds()))
		meter := newCPUMeter(srv.cmd.Process.Pid, cs)
		meter.start()
		res.paced = drivePaced(ctx, res.pacedRate, count, publish(paced, "paced"))
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("interrupted: %w", err)
		}
		res.drained = e.drain(ctx, sink, len(sent)+len(paced))
		res.pacedCPU = meter.span()
	}
	pid := srv.cmd.Process.Pid
	if res.rssKiB, res.hwmKiB, err = readRSS(pid); err != nil {
		return nil, err
	}
	if res.cpu, err = readCPU(pid); err != nil {
		return nil, err
	}
	err = srv.stop()
	srv = nil
	if err != nil {
		return nil, err
	}

	e.tally(sink, sent, paced, began, res)
	if err := countStored(ctx, cs.URL, sent, res); err != nil {
		return nil, err
	}
	return res, nil
}

// baseline measures the inbound path, same clients and count, on its own
// server and store so that neither run weighs on the other.
func (e *publishEnv) baseline(ctx context.Context, stderr io.Writer, target, sinkURL, run string) (*closedLoop, writerSpan, cpuSpan, error) {
	fmt.Fprintf(stderr, "%s: baseline, signed webhooks into /hooks/stripe...\n", target)
	srv, cs, err := e.server(ctx, target, target+"-inbound", sinkURL)
	if err != nil {
		return nil, writerSpan{}, cpuSpan{}, err
	}
	hooks := "http://" + srv.addr + "/hooks/stripe"
	var loop *closedLoop
	meter := newCPUMeter(srv.cmd.Process.Pid, cs)
	meter.start()
	ws := measureWriter(ctx, target, srv.addr, e.token, func() {
		loop = driveClosedLoop(ctx, e.f.clients, e.f.messages, e.f.duration, func(c *http.Client, seq int) (time.Duration, error) {
			status, lat, err := e.recv.post(ctx, c, hooks, fmt.Sprintf("evt_%s_%d", run, seq))
			if err == nil && status/100 != 2 {
				err = fmt.Errorf("HTTP %d", status)
			}
			return lat, err
		})
	})
	cpu := meter.span()
	if err := errors.Join(srv.stop(), cs.Drop()); err != nil {
		return nil, writerSpan{}, cpuSpan{}, err
	}
	return loop, ws, cpu, nil
}

// tally reads from the receiver each message's first arrival at each
// endpoint: the latencies from its publish request (sent by the closed
// loop at or after began, or by the paced one), and the messages that did
// not reach every endpoint. It adds paced's messages to sent.
func (e *publishEnv) tally(sink *fanoutSink, sent, paced map[string]time.Time, began time.Time, res *publishResult) {
	sink.mu.Lock()
	res.calls = sink.calls
	reached := map[string]int{}
	for k, at := range sink.first {
		_, id, _ := strings.Cut(k, " ")
		if t, ok := sent[id]; ok {
			res.deliveryLat = append(res.deliveryLat, at.Sub(t))
			res.deliveries++
			res.fanoutTook = max(res.fanoutTook, at.Sub(began))
		} else if t, ok := paced[id]; ok {
			res.pacedLat = append(res.pacedLat, at.Sub(t))
		}
		reached[id]++
	}
	sink.mu.Unlock()
	slices.Sort(res.deliveryLat)
	slices.Sort(res.pacedLat)
	for id := range paced {
		sent[id] = paced[id] // accounted for below like the others
	}
	for id := range sent {
		if reached[id] != e.f.endpoints {
			res.unreached++
		}
	}
}

// countStored is the account: every accepted message (sent) is in the
// store at storeURL, once.
func countStored(ctx context.Context, storeURL string, sent map[string]time.Time, res *publishResult) error {
	st, err := storeopen.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	stored, err := storedEvents(ctx, st, "publish")
	if cerr := st.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("close store: %w", cerr)
	}
	if err != nil {
		return err
	}
	for id := range sent {
		if stored[id] == 1 {
			res.stored++
		} else {
			res.missing++
		}
	}
	return nil
}

// drain waits until the receiver holds every endpoint's copy of the
// messages accepted so far, or --drain has passed; it reports which.
func (e *publishEnv) drain(ctx context.Context, sink *fanoutSink, messages int) bool {
	want := messages * e.f.endpoints
	drainBy := time.Now().Add(e.f.drainFor)
	for sink.distinct() < want && time.Now().Before(drainBy) && ctx.Err() == nil {
		sleepCtx(ctx, 5*time.Millisecond) // polling the receiver; arrival times come from the receiver
	}
	return sink.distinct() >= want
}

// maxPad bounds --pad below the server's default body limit (1 MiB),
// with room for the rest of the message.
const maxPad = 1<<20 - 4096

// publishOne posts one message (~300 B of data, and --pad bytes of
// filler) with its own key and returns the id of the 202.
func (e *publishEnv) publishOne(ctx context.Context, c *http.Client, base, key string, seq int) (string, error) {
	body := fmt.Sprintf(`{"type":"invoice.paid","data":{"invoice":"in_%d","customer":"cus_%d","amount_paid":%d,"currency":"eur",`+
		`"status":"paid","lines":[{"description":"Subscription, monthly","amount":%d,"quantity":1}],"metadata":{"order":"ORD-%d","key":%q}%s}}`,
		seq, seq%997, 1000+seq, 1000+seq, seq, key, e.f.pad)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/api/v1/messages", bytes.NewReader([]byte(body)))
	if err != nil {
		return "", fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+e.token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return "", err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return "", fmt.Errorf("read answer: %w", err)
	}
	if resp.StatusCode != http.StatusAccepted {
		return "", fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
	}
	var out struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(b, &out); err != nil || out.ID == "" {
		return "", fmt.Errorf("202 without an id: %s", b)
	}
	return out.ID, nil
}

// The goals of publishing (the performance issue's goal 4).
const (
	goalPublishVsInbound = 0.5         // publish acceptance over the inbound path's rate
	goalFanoutKeepsUp    = 0.9         // deliveries/s over what the accepted messages ask for
	goalPacedP99         = time.Second // publish -> endpoint at half the capacity
	goalPGOverSQLite     = 0.5         // PostgreSQL publishing over SQLite's
)

// keepUp is the fan-out's deliveries per second over the deliveries per
// second the accepted messages asked for (their rate times the endpoints).
func (r *publishResult) keepUp(endpoints int) float64 {
	want := r.pub.rate() * float64(endpoints)
	if want == 0 {
		return 0
	}
	return rate(int64(r.deliveries), r.fanoutTook) / want
}

// accepted counts the messages of both loops answered 202.
func (r *publishResult) accepted() int64 {
	n := r.pub.ok
	if r.paced != nil {
		n += r.paced.ok
	}
	return n
}

// pgOverSQLite is PostgreSQL's publish rate over SQLite's, when the run
// measured both.
func pgOverSQLite(results []*publishResult) (float64, bool) {
	var sq, pg *publishResult
	for _, r := range results {
		switch r.target {
		case targetSQLite:
			sq = r
		case targetPostgres:
			pg = r
		}
	}
	if sq == nil || pg == nil || sq.pub.rate() == 0 {
		return 0, false
	}
	return pg.pub.rate() / sq.pub.rate(), true
}

// pacedP99 is the p99 of publish -> endpoint at half capacity, and
// whether it was measured.
func (r *publishResult) pacedP99() (time.Duration, bool) {
	if r.paced == nil || len(r.pacedLat) == 0 || r.pacedFixed {
		return 0, false
	}
	return r.pacedLat.pct(0.99), true
}

func printPublish(w io.Writer, f *publishFlags, results []*publishResult) bool {
	what := fmt.Sprintf("%d messages", f.messages)
	if f.duration > 0 {
		what = fmt.Sprintf("%s of publishing", f.duration)
	}
	fmt.Fprintf(w, "hookledger-bench publish: %s per store, %d closed-loop clients, %d endpoints per message (max_in_flight %d each, adaptive); load generator, receiver and server share %d CPUs (GOMAXPROCS %d)\n",
		what, f.clients, f.endpoints, f.maxInFlight, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintln(w, "keep-alive HTTP/1.1, one connection per client, 127.0.0.1; the receiver answers 204 at once")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tpath\trequests\t/s\tp50 ms\tp99 ms\tfailed\tvs inbound\t")
	for _, r := range results {
		for _, row := range []struct {
			name string
			c    *closedLoop
		}{{"inbound POST /hooks/stripe (baseline)", r.baseline}, {"POST /api/v1/messages", r.pub}} {
			vs := "-"
			if row.c == r.pub && r.baseline.rate() > 0 {
				vs = fmt.Sprintf("%.2f", r.pub.rate()/r.baseline.rate())
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%s\t%s\t%d\t%s\t\n", r.target, row.name, row.c.ok, row.c.rate(),
				ms(row.c.lat.pct(0.50)), ms(row.c.lat.pct(0.99)), row.c.failed, vs)
		}
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\tdeliveries\tcalls\tdone in s\tdeliveries/s\tkeeps up\tp50 ms\tp99 ms\tserver RSS MiB\tpeak MiB\tCPU s\taccount\t")
	allOK := true
	for _, r := range results {
		account := fmt.Sprintf("accepted %d, stored once %d, missing %d, not at every endpoint %d", r.accepted(), r.stored, r.missing, r.unreached)
		if r.missing > 0 || r.unreached > 0 || !r.drained {
			allOK = false
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%.1f\t%s\t\n", r.target, r.deliveries, r.calls, r.fanoutTook.Seconds(),
			rate(int64(r.deliveries), r.fanoutTook), r.keepUp(f.endpoints), ms(r.deliveryLat.pct(0.50)), ms(r.deliveryLat.pct(0.99)),
			mib(r.rssKiB), mib(r.hwmKiB), r.cpu.Seconds(), account)
	}
	tw.Flush()
	if f.paced > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "store\tpaced at /s\tmessages\tfailed\t202 p99 ms\tto endpoint p50 ms\tp99 ms\tserver+database CPU ms/message\t")
		for _, r := range results {
			if r.paced == nil {
				fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t\n", r.target)
				continue
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%d\t%d\t%s\t%s\t%s\t%s\t\n", r.target, r.pacedRate, r.paced.ok, r.paced.failed, ms(r.paced.lat.pct(0.99)),
				ms(r.pacedLat.pct(0.50)), ms(r.pacedLat.pct(0.99)), pacedCPU(r))
		}
		tw.Flush()
	}
	fmt.Fprintln(w)
	for _, r := range results {
		for _, line := range []string{publishWriterLine(r, f.endpoints), publishCPULine(r, f.endpoints, runtime.NumCPU())} {
			if line != "" {
				fmt.Fprintf(w, "%s: %s\n", r.target, line)
			}
		}
	}
	for _, r := range results {
		for _, c := range []*closedLoop{r.baseline, r.pub, r.paced} {
			if c != nil && c.firstErr != "" {
				fmt.Fprintf(w, "%s: first failure: %s\n", r.target, c.firstErr)
			}
		}
	}
	fmt.Fprintln(w, "latency of a request: from writing it to reading the whole answer (the 202 comes after the commit).")
	fmt.Fprintln(w, "deliveries: distinct (endpoint, message) pairs of the closed loop's messages received; calls: every call, repeats and the paced messages' included.")
	fmt.Fprintln(w, "done in: from the first publish sent to the last first delivery; delivery latency: first receipt minus the publish request's send time.")
	fmt.Fprintln(w, "keeps up: deliveries/s over the deliveries/s the accepted messages asked for (messages/s x endpoints).")
	fmt.Fprintln(w, "paced: an open loop at half the publishing capacity (the lesser of the closed loop's rate and the rate its messages reached every endpoint), after its fan-out is done (or at --paced-rate); to endpoint = first receipt minus send time;\n  CPU = the server's and the database's backends' over the open loop and its fan-out, per message.")
	fmt.Fprintln(w, "server RSS at the end of the fan-out, peak = VmHWM; CPU = the server's user+system time over its whole life.")
	fmt.Fprintln(w, "CPU line: the server's, the database's backends' (where PostgreSQL runs on this machine) and this process's CPU over each closed loop,\n  the publish loop until every endpoint was reached; its bound assumes the processors are the only limit.")
	fmt.Fprintln(w)
	for _, g := range publishGoals(f, results) {
		fmt.Fprintf(w, "goal: %s: %s (goal %s): %s\n", g.figure, g.ratio, g.baseline, g.goal)
	}
	if allOK {
		fmt.Fprintln(w, "account: every accepted message is stored once and reached every endpoint")
	} else {
		fmt.Fprintln(w, "account: FAILED, see the account column")
	}
	return allOK
}

// publishWriterLine is, on SQLite, the one writer's time per webhook of
// the baseline and per message of the closed loop (accepted, then
// delivered to every endpoint), and what that sets: where the writer is
// busy all the time, publishing whole cannot go faster beside the inbound
// rate than the inverse of their ratio, and the goals ask for 0.5 of the
// inbound rate accepted and 0.9 of it delivered. "" where no writer was
// read (PostgreSQL); the reason when a read failed.
func publishWriterLine(r *publishResult, endpoints int) string {
	for _, ws := range []writerSpan{r.inboundWriter, r.publishWriter} {
		if ws.err != nil {
			return "SQLite writer time not read: " + ws.err.Error()
		}
	}
	in, pub := r.inboundWriter, r.publishWriter
	if in.m.writerBusy <= 0 || pub.m.writerBusy <= 0 || r.baseline == nil || r.baseline.ok == 0 || r.pub == nil || r.pub.ok == 0 ||
		in.took <= 0 || pub.took <= 0 {
		return ""
	}
	perHook := in.m.writerBusy * 1e6 / float64(r.baseline.ok)
	perMsg := pub.m.writerBusy * 1e6 / float64(r.pub.ok)
	return fmt.Sprintf("SQLite writer: %.0f us per inbound webhook (busy %.2f of its loop); %.0f us per message accepted and delivered to its %d endpoints "+
		"(busy %.2f of the loop and its fan-out), %.1f webhooks' worth: with the writer busy throughout, publishing whole reaches at most %.2f of the inbound rate "+
		"(the goals ask for %.2f: 0.5 accepted, 0.9 of that delivered)",
		perHook, in.m.writerBusy/in.took.Seconds(), perMsg, endpoints, pub.m.writerBusy/pub.took.Seconds(), perMsg/perHook, perHook/perMsg,
		goalPublishVsInbound*goalFanoutKeepsUp)
}

// publishGoals are the goal checks of the run: figure, the measured value
// (ratio), the goal (baseline) and the verdict (goal).
func publishGoals(f *publishFlags, results []*publishResult) []headline {
	var out []headline
	for _, r := range results {
		name := driverName(r.target)
		if r.baseline.rate() > 0 {
			v := r.pub.rate() / r.baseline.rate()
			out = append(out, headline{figure: name + ": publishing over inbound", ratio: fmt.Sprintf("%.2f", v),
				baseline: fmt.Sprintf(">= %.1f", goalPublishVsInbound), goal: verdict(v >= goalPublishVsInbound)})
		}
		k := r.keepUp(f.endpoints)
		out = append(out, headline{figure: name + ": fan-out keeps up", ratio: fmt.Sprintf("%.2f", k),
			baseline: fmt.Sprintf(">= %.1f", goalFanoutKeepsUp), goal: verdict(k >= goalFanoutKeepsUp)})
		if p99, ok := r.pacedP99(); ok {
			out = append(out, headline{figure: name + ": publish -> endpoint p99 at half capacity", ratio: fmt.Sprintf("%.2f s", p99.Seconds()),
				baseline: fmt.Sprintf("<= %.0f s", goalPacedP99.Seconds()), goal: verdict(p99 <= goalPacedP99)})
		}
	}
	if v, ok := pgOverSQLite(results); ok {
		out = append(out, headline{figure: "PostgreSQL publishing over SQLite's", ratio: fmt.Sprintf("%.2f", v),
			baseline: fmt.Sprintf(">= %.1f", goalPGOverSQLite), goal: verdict(v >= goalPGOverSQLite)})
	}
	return out
}

// publishHeadlines are, per store, the publish requests beside signed
// webhooks into the inbound path of the same store kind, the fan-out
// deliveries, publish -> endpoint at half capacity, PostgreSQL's
// publishing beside SQLite's, and the account of every accepted message.
func publishHeadlines(f *publishFlags, sum publishSummary) []headline {
	var rows []headline
	of := ""
	if sum.rounds > 1 {
		of = fmt.Sprintf(" (round of median publishing, of %d)", sum.rounds)
	}
	for _, r := range sum.results {
		name := driverName(r.target)
		rows = append(rows, headline{
			figure:   name + ": POST /api/v1/messages with an Idempotency-Key" + of,
			value:    fmt.Sprintf("%s requests/s, p99 %s ms", num(r.pub.rate()), ms(r.pub.lat.pct(0.99))),
			baseline: fmt.Sprintf("signed webhooks into POST /hooks/stripe %s/s", num(r.baseline.rate())),
			ratio:    ratioOf(r.pub.rate(), r.baseline.rate()) + " of inbound",
			goal:     fmt.Sprintf(">= %.1f: %s", goalPublishVsInbound, verdict(r.baseline.rate() > 0 && r.pub.rate()/r.baseline.rate() >= goalPublishVsInbound)),
		}, headline{
			figure: fmt.Sprintf("%s: fan-out to %d endpoints (max_in_flight %d, adaptive)%s", name, f.endpoints, f.maxInFlight, of),
			value: fmt.Sprintf("%s deliveries/s, p99 %.1f s after the publish", num(rate(int64(r.deliveries), r.fanoutTook)),
				r.deliveryLat.pct(0.99).Seconds()),
			baseline: fmt.Sprintf("accepted messages x %d endpoints %s/s", f.endpoints, num(r.pub.rate()*float64(f.endpoints))),
			ratio:    fmt.Sprintf("%.2f", r.keepUp(f.endpoints)),
			goal:     fmt.Sprintf("keeps up, >= %.1f: %s", goalFanoutKeepsUp, verdict(r.keepUp(f.endpoints) >= goalFanoutKeepsUp)),
		})
		if p99, ok := r.pacedP99(); ok {
			rows = append(rows, headline{
				figure: fmt.Sprintf("%s: publish -> endpoint at half capacity (%s/s)%s", name, num(r.pacedRate), of),
				value:  fmt.Sprintf("p50 %s ms, p99 %s ms", ms(r.pacedLat.pct(0.50)), ms(p99)),
				goal:   fmt.Sprintf("p99 <= %.0f s: %s", goalPacedP99.Seconds(), verdict(p99 <= goalPacedP99)),
			})
		}
	}
	if len(sum.ratios) > 0 {
		figure := "PostgreSQL publishing beside SQLite's"
		if sum.rounds > 1 {
			figure += fmt.Sprintf(" (median of %d rounds)", sum.rounds)
		}
		rows = append(rows, headline{
			figure: figure,
			value:  fmt.Sprintf("%.2f of SQLite's requests/s", sum.pgOverSQLite),
			goal:   fmt.Sprintf(">= %.1f: %s", goalPGOverSQLite, verdict(sum.pgOverSQLite >= goalPGOverSQLite)),
		})
	}
	return append(rows, headline{
		figure: "accepted messages stored once and delivered to every endpoint",
		value:  fmt.Sprintf("%s accepted, %d missing or not at every endpoint", num(float64(sum.accepted)), sum.lost),
		goal:   "all: " + verdict(sum.lost == 0 && sum.drained),
	})
}
