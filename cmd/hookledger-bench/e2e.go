package main

import (
	"bufio"
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
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

const (
	e2eSQLite = "sqlite" // one hookledger serve on a fresh SQLite file
	e2ePG1    = "pg1"    // one hookledger serve on a fresh PostgreSQL database
	e2ePG2    = "pg2"    // two hookledger serve processes on one fresh PostgreSQL database
)

type e2eFlags struct {
	// tracing lists the sampling ratios each target also runs at
	// (targets "sqlite@0.01"; "": tracing off only).
	tracing      string
	postgres     string
	targets      []string
	duration     time.Duration
	rate         float64
	rateShare    float64
	senders      int
	probeFor     time.Duration
	probeClients int
	// doorFor is the measured time of the door probe: the receive
	// benchmark's SQLite cell, no flow behind the door (0: not run).
	doorFor     time.Duration
	drainFor    time.Duration
	sampleEvery time.Duration
	topSQL      int
	pgFloor     time.Duration
	linger      time.Duration
	hookledger  string
	module      string
	dir         string
	cpuProfile  string
	rounds      int
	table       bool
	// walFrames is the window in which a SQLite target's WAL frames are
	// counted by table and index (0: not counted).
	walFrames time.Duration
	// warmup is the first part of sending whose webhooks are accounted
	// for but left out of the latency figures.
	warmup time.Duration
	// prefill is the events planted in each target's store before its
	// servers start (prefillStatements).
	prefill int
}

func runE2E(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "e2e", "e2e [--postgres URL] [--targets sqlite,pg1,pg2] [--duration 60s] [--rate R] [flags]",
		"Webhooks in, effects done: per target, starts hookledger serve as a child process on\n"+
			"127.0.0.1 with a fresh store and a flow that makes one effect per event, with a\n"+
			"destination pointing at a loopback HTTP server in this process, then sends Stripe-signed\n"+
			"webhooks OPEN-LOOP at a steady rate for --duration (each send on its schedule, whatever\n"+
			"the answers take). Targets: sqlite (one process, SQLite file), pg1 (one process,\n"+
			"PostgreSQL), pg2 (two processes on one PostgreSQL database, each on its own port, the\n"+
			"webhooks alternating between them). Every target is sent the SAME rate, decided once:\n"+
			"--rate, or else --rate-share of the ingest rate measured first, in the same run, by a\n"+
			"closed-loop receive probe against a fresh SQLite server. The default share, 0.55, sends\n"+
			"a tenth above the target of half the ingest rate: effects done while sending trail the\n"+
			"schedule by the pipeline's latency. A --rate above what a target sustains measures its\n"+
			"capacity: effects done over the whole run, sending and draining.\n"+
			"Prints side by side effects done/s while sending and over the whole run, latency from\n"+
			"sending the webhook to the destination receiving the call (after a --warmup), the drain\n"+
			"time, each server's RSS (sampled from /proc every --sample), CPU time and the bytes its Go\n"+
			"runtime allocated per webhook (from its /metrics), and on PostgreSQL the transactions\n"+
			"(pg_stat_database), where pg_stat_statements is loaded statements per event, the row\n"+
			"versions each table took per event with its indexes and the buffers read\n"+
			"(pg_stat_user_tables: an insert, or an update that is not HOT, adds an entry to each index),\n"+
			"and where PostgreSQL runs on this machine its backends' CPU time and wake-ups (voluntary\n"+
			"context switches) for the target's database (from /proc). Per target, read from the ledger's\n"+
			"own stamps once it stopped: for each stage (receive, route, process, claim, call) the\n"+
			"p50/p99 time an event waited for it and the time the stage worked on it; and a target that\n"+
			"fell behind is given as its capacity against the ingest probe and, on SQLite, against the\n"+
			"door probe (--door: the receive benchmark's SQLite cell, no flow behind the door; goal 0.5),\n"+
			"with its CPU per effect and the bound the machine's CPUs set (the servers' and this\n"+
			"process's CPU per effect: were the CPUs the only limit, the most effects/s they allow) and,\n"+
			"on SQLite, the writer's time per effect beside the door's per request; one that kept up as\n"+
			"its latency against the goals (p50 10 ms, p99 25 ms), with the share of the machine's CPUs\n"+
			"its rate took (the servers', the database's backends' where measured, and this process's CPU\n"+
			"per webhook, counted from sending until the servers stopped: a run of a few seconds\n"+
			"overstates them).\n"+
			"After sending, waits up to --drain for the backlog; exit 1 unless, in every target, every\n"+
			"acknowledged webhook produced exactly one call at the destination.")
	var f e2eFlags
	fs.StringVar(&f.postgres, "postgres", "", "PostgreSQL admin `URL`; a database is created and dropped per target (omit to measure SQLite only)")
	fs.StringVar(&f.tracing, "tracing", "", "comma-separated sampling `ratios` (e.g. 0.01,1): each target also runs with tracing on at each,\n"+
		"exporting OTLP/HTTP to a sink on loopback (targets named sqlite@0.01)")
	targets := fs.String("targets", "", "comma-separated `targets`: sqlite, pg1, pg2 (default sqlite, plus pg1 and pg2 when --postgres is set)")
	fs.DurationVar(&f.duration, "duration", 60*time.Second, "sending `time` per target")
	fs.Float64Var(&f.rate, "rate", 0, "webhooks per second to send to every target (0: --rate-share of the probed SQLite ingest rate)")
	fs.Float64Var(&f.rateShare, "rate-share", 0.55, "share of the probed ingest rate to send at when --rate is 0")
	fs.IntVar(&f.senders, "senders", 64, "sender connections available to the open-loop schedule")
	fs.DurationVar(&f.probeFor, "probe", 5*time.Second, "measured `time` of the ingest probe (after 1 s warm-up)")
	fs.IntVar(&f.probeClients, "probe-clients", 32, "closed-loop clients of the ingest probe")
	fs.DurationVar(&f.doorFor, "door", 5*time.Second, "measured `time` of the door probe, run at the start of every round when a SQLite target is: the receive\n"+
		"benchmark's SQLite cell (the same source and clients as the ingest probe, no flow behind the door), the baseline of\n"+
		"a saturated SQLite target's capacity in that round (goal 0.5) and of its writer time per effect (0: not run)")
	fs.DurationVar(&f.drainFor, "drain", 5*time.Minute, "upper bound on the `time` waited after sending for the remaining effects")
	fs.DurationVar(&f.sampleEvery, "sample", 5*time.Second, "RSS sampling `interval`")
	fs.DurationVar(&f.pgFloor, "pg-floor", 3*time.Second, "on PostgreSQL, after each target's run, `time` of each of two paced loops on one connection at the send rate,\n"+
		"a round trip (SELECT $1) and a one-row commit, whose backend CPU per call is the webhook's PG CPU baseline (0: none)")
	fs.DurationVar(&f.linger, "linger", 0, "the servers' processing.linger: how long routing waits, with no backlog, for more events to share its\n"+
		"transaction (0: the default, none)")
	fs.IntVar(&f.topSQL, "top-sql", 10, "statements listed per PostgreSQL target by calls per event, with the buffers each call read, when pg_stat_statements is loaded (0: none)")
	fs.StringVar(&f.hookledger, "hookledger", "", "prebuilt hookledger `binary` (default: go build ./cmd/hookledger from --module into the temp dir)")
	fs.StringVar(&f.module, "module", ".", "hookledger module `directory` to build from")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir (default the system temp dir)")
	fs.IntVar(&f.rounds, "rounds", 1, "`times` every target runs, in an order rotating by round; above 1, a summary gives each target's\nmedian and the median of the per-round ratios, so that one noisy cell does not decide a comparison")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "run the hookledger servers in-process under 'hookledger-bench serve' and write one CPU profile per server into `dir`\n(the servers' CPU figures then include the profiler's)")
	fs.DurationVar(&f.warmup, "warmup", time.Second, "the first `time` of sending, whose webhooks are sent on the same schedule and accounted for exactly once,\n"+
		"but left out of the latency figures and the stage breakdown (a server just started runs its first few hundred\n"+
		"milliseconds slower at every stage); their own latency is printed apart (0: none left out)")
	fs.DurationVar(&f.walFrames, "wal-frames", 0, "on SQLite, count for this `window` in the middle of sending the WAL frames the server writes, by table\n"+
		"and index (a read snapshot held meanwhile keeps them in the WAL and slows the server: the run's latency is then\n"+
		"not comparable; 0: not counted)")
	fs.IntVar(&f.prefill, "prefill", 0, "`events` planted in each target's store before its servers start, each taken all the way through\n"+
		"(event, delivery, settled work, entity, effect done after one attempt, audit rows; analyzed on PostgreSQL): the run\n"+
		"then writes into indexes that many entries wide instead of into an empty store (0: none)")
	table := tableFlag(fs)
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	f.table = *table
	if f.prefill < 0 {
		fmt.Fprintln(stderr, "hookledger-bench e2e: --prefill must not be negative")
		return exitUsage
	}
	if f.duration <= 0 || f.rate < 0 || f.rateShare <= 0 || f.senders < 1 || f.probeFor <= 0 || f.probeClients < 1 || f.doorFor < 0 || f.drainFor < 0 || f.sampleEvery <= 0 || f.topSQL < 0 || f.pgFloor < 0 || f.linger < 0 || f.rounds < 1 {
		fmt.Fprintln(stderr, "hookledger-bench e2e: durations, counts, --rounds and --rate-share must be positive, --rate, --door, --drain, --top-sql, --pg-floor and --linger not negative")
		return exitUsage
	}
	if f.warmup < 0 || f.warmup >= f.duration {
		fmt.Fprintln(stderr, "hookledger-bench e2e: --warmup must be at least 0 and shorter than --duration")
		return exitUsage
	}
	if f.walFrames < 0 || f.walFrames > f.duration/2 {
		fmt.Fprintln(stderr, "hookledger-bench e2e: --wal-frames must be between 0 and half of --duration")
		return exitUsage
	}
	var err error
	if f.targets, err = chooseE2ETargets(*targets, f.postgres); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench e2e: --targets: %v\n", err)
		return exitUsage
	}
	if f.targets, err = withTracing(f.targets, f.tracing, e2eSQLite, e2ePG1, e2ePG2); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench e2e: --tracing: %v\n", err)
		return exitUsage
	}
	return benchExit(stderr, "e2e")(e2eBench(ctx, stdout, stderr, &f))
}

// chooseE2ETargets parses --targets: by default sqlite, and pg1 and pg2
// beside it when a PostgreSQL server is given.
func chooseE2ETargets(list, postgresURL string) ([]string, error) {
	out := splitList(list)
	if len(out) == 0 {
		out = []string{e2eSQLite}
		if postgresURL != "" {
			out = append(out, e2ePG1, e2ePG2)
		}
	}
	seen := map[string]bool{}
	for _, t := range out {
		switch {
		case t != e2eSQLite && t != e2ePG1 && t != e2ePG2:
			return nil, fmt.Errorf("unknown %q (%s, %s, %s)", t, e2eSQLite, e2ePG1, e2ePG2)
		case t != e2eSQLite && postgresURL == "":
			return nil, fmt.Errorf("%s needs --postgres URL", t)
		case seen[t]:
			return nil, fmt.Errorf("%q given twice", t)
		}
		seen[t] = true
	}
	return out, nil
}

// e2eProcesses is how many serve processes a target runs on its store.
func e2eProcesses(target string) int {
	if target == e2ePG2 {
		return 2
	}
	return 1
}

// sink is the loopback destination: it answers every call 200 at once and
// records, per event, the calls and the time the first one arrived.
type sink struct {
	sent sync.Map // event id -> time.Time the webhook was sent
	// warm is how many webhooks, from sequence number 0, the warm-up sends:
	// their latencies go to warmLat instead of lat. Set before any send.
	warm int64

	mu      sync.Mutex
	calls   map[string]int    // event id -> calls
	keys    map[string]string // event id -> episode key of its first call
	keyDiff int               // calls whose episode key differs from the event's first
	lat     latencies
	warmLat latencies
	done    []time.Time // arrival of each first call, for effects/s
	unknown int         // calls for an event this run never sent
}

func newSink() *sink {
	return &sink{calls: map[string]int{}, keys: map[string]string{}}
}

func (s *sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	var body struct {
		Event string `json:"event"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Event == "" {
		http.Error(w, "want {\"event\": id}", http.StatusBadRequest)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	s.mu.Lock()
	s.calls[body.Event]++
	if s.calls[body.Event] == 1 {
		s.keys[body.Event] = key
		s.done = append(s.done, now)
		if t, ok := s.sent.Load(body.Event); ok && warmSend(body.Event, s.warm) {
			s.warmLat = append(s.warmLat, now.Sub(t.(time.Time)))
		} else if ok {
			s.lat = append(s.lat, now.Sub(t.(time.Time)))
		} else {
			s.unknown++
		}
	} else if s.keys[body.Event] != key {
		s.keyDiff++
	}
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id": "rec_%s"}`, body.Event)
}

// e2eIDPrefix begins the event id of every webhook e2e sends; its
// sequence number follows.
const e2eIDPrefix = "evt_e2e_"

// e2eEventID is the event id of the webhook with sequence number seq.
func e2eEventID(seq int64) string { return e2eIDPrefix + strconv.FormatInt(seq, 10) }

// warmSend reports whether the webhook of event id was one of the first
// warm sends.
func warmSend(id string, warm int64) bool {
	seq, err := strconv.ParseInt(strings.TrimPrefix(id, e2eIDPrefix), 10, 64)
	return err == nil && seq < warm
}

// startSink serves s on a loopback port the kernel picks and returns its
// base URL and the function that closes it.
func startSink(s *sink) (string, func(), error) { return startSinkHandler(s) }

// startSinkHandler serves h as a loopback destination.
func startSinkHandler(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("destination: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// doneCount is how many distinct events have had their effect called.
func (s *sink) doneCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.done)
}

// rssSample is one reading of a server's /proc/PID/status.
type rssSample struct {
	at       time.Duration // since sending started
	rss, hwm int64         // KiB
}

func readRSS(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read RSS: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			rss = n
		case "VmHWM":
			hwm = n
		}
	}
	return rss, hwm, sc.Err()
}

// readCPU is the user and system time a process has used, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s: USER_HZ on
// Linux).
func readCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	_, rest, ok := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if !ok || len(f) < 13 {
		return 0, fmt.Errorf("read CPU time: unexpected /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("read CPU time: unexpected /proc/%d/stat", pid)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

func mib(kib int64) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }

// e2eResult is one target's figures.
type e2eResult struct {
	target     string
	walPath    string     // the SQLite file whose WAL frames are counted ("": not counted)
	wal        *walFrames // what they were
	processes  int
	targetRate float64
	sendFor    time.Duration

	scheduled, acked, non2xx, errs, late int64
	firstErr                             string
	ackLat                               latencies // of the webhooks sent after the warm-up
	warm                                 int64     // the webhooks the warm-up sent
	warmLat                              latencies // their sent -> called

	doneInWindow int             // effects done while sending
	drainedIn    time.Duration   // after sending, until every acked effect was done (or the bound)
	drainBound   bool            // the drain stopped at --drain with effects still missing
	samples      [][]rssSample   // per server process
	cpuStart     []time.Duration // per server process, when sending started
	cpu          []time.Duration // per server process, from sending started until it stopped
	// selfStart and clientCPU are this process's CPU time (the load
	// generator and the destination) over the same span as cpu.
	selfStart, clientCPU time.Duration
	// door is the door probe of this result's round (nil: none ran).
	door *receiveResult
	// mem is what the servers' Go runtimes allocated and collected from
	// sending started until the backlog drained (summed over processes);
	// memErr, when set, why it is not known.
	mem    goMem
	memErr error

	// The exactly-once account.
	ackedIDs   []string
	ackAt      map[string]int64 // event id -> when the sender saw its 200, unix microseconds
	exactlyOne int
	missing    int
	duplicated int
	keyDiff    int
	unknown    int
	lat        latencies

	ledger      map[store.EffectState]int
	ledgerTotal int

	// stages is where an event's time went, per stage of e2eStages.
	stages []stageStats

	pg    *pgCost     // PostgreSQL targets only
	pgCPU *backendCPU // PostgreSQL targets only: the database's backends, from sending started until the servers stopped
}

// done is every distinct effect called at the destination.
func (r *e2eResult) done() int { return r.exactlyOne + r.duplicated }

func (r *e2eResult) windowRate() float64 { return rate(int64(r.doneInWindow), r.sendFor) }

// wholeRate is effects done over sending and draining: a target that keeps
// up shows about the send rate, one that does not shows its capacity.
func (r *e2eResult) wholeRate() float64 { return rate(int64(r.done()), r.sendFor+r.drainedIn) }

func (r *e2eResult) ok() bool {
	return r.missing == 0 && r.duplicated == 0 && r.keyDiff == 0 && r.unknown == 0 && r.non2xx == 0 && r.errs == 0
}

func e2eBench(ctx context.Context, stdout, stderr io.Writer, f *e2eFlags) (bool, error) {
	dir, err := os.MkdirTemp(f.dir, "hookledger-bench-e2e-")
	if err != nil {
		return false, fmt.Errorf("make temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	env := &receiveEnv{stderr: stderr, hookledger: f.hookledger, dir: dir, profiles: f.cpuProfile, linger: f.linger}
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
	env.secret = "whsec_" + randomHex(24)
	env.token = randomHex(24)
	if f.tracing != "" {
		stop, err := env.startOTLPSink(stderr)
		if err != nil {
			return false, err
		}
		defer stop()
	}
	if env.scheme, err = signature.New(signature.Options{Kind: signature.KindStripe, Secrets: []string{env.secret}}); err != nil {
		return false, fmt.Errorf("stripe signer: %w", err)
	}

	run := &e2eRunInfo{rate: f.rate}
	if f.postgres != "" && slices.ContainsFunc(f.targets, func(t string) bool { return t != e2eSQLite }) {
		if run.statements, err = pgEnableStatements(ctx, f.postgres); err != nil {
			return false, err
		}
		if !run.statements {
			fmt.Fprintln(stderr, "postgres: pg_stat_statements is not in shared_preload_libraries; counting transactions only")
		}
	}
	if f.rate == 0 {
		fmt.Fprintf(stderr, "probe: closed-loop ingest on SQLite, %d clients, 1s warm-up, %s...\n", f.probeClients, f.probeFor)
		// The probe's effects go to a destination of their own, so none
		// of them is mistaken for a sustained run's.
		probeURL, closeProbe, err := startSink(newSink())
		if err != nil {
			return false, err
		}
		run.probeRate, run.probeCPU, err = e2eProbe(ctx, env, f, probeURL)
		closeProbe()
		if err != nil {
			return false, fmt.Errorf("ingest probe: %w", err)
		}
		run.rate = run.probeRate * f.rateShare
		fmt.Fprintf(stderr, "probe: %.0f webhooks/s acknowledged; sending at %.0f/s to every target\n", run.probeRate, run.rate)
	}
	if run.rate < 1 {
		return false, fmt.Errorf("send rate %.2f/s is below 1/s", run.rate)
	}
	wantDoor := f.doorFor > 0 && slices.ContainsFunc(f.targets, func(t string) bool { base, _, _ := strings.Cut(t, "@"); return base == e2eSQLite })
	allOK := true
	var rounds [][]*e2eResult
	for round := range f.rounds {
		run.round = round + 1
		// The door is probed again in every round, just before its
		// cells: a probe of a few seconds moves with the machine as much
		// as the capacity it is the baseline of, so each round's capacity
		// is set against a door of its own moment, and goal 2's ratio is
		// the median of the rounds' ratios rather than of one probe.
		var door *receiveResult
		if wantDoor {
			fmt.Fprintf(stderr, "door%s: closed-loop receive on SQLite, no flow behind it, %d clients, 1s warm-up, %s...\n",
				run.roundLabel(f.rounds), f.probeClients, f.doorFor)
			if door, err = e2eDoor(ctx, env, f); err != nil {
				return false, fmt.Errorf("door probe: %w", err)
			}
			fmt.Fprintf(stderr, "door%s: %.0f webhooks/s acknowledged\n", run.roundLabel(f.rounds), door.rate())
		}
		run.loadBefore = loadAvg()
		results := make([]*e2eResult, len(f.targets))
		order := rotated(len(f.targets), round)
		for _, i := range order {
			target := f.targets[i]
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("interrupted: %w", err)
			}
			res, err := e2eCell(ctx, env, f, run, target)
			if err != nil {
				return false, fmt.Errorf("target %s: %w", target, err)
			}
			res.door = door
			fmt.Fprintf(stderr, "target %s%s: %.0f effects/s while sending, %.0f/s over the whole run, p99 %s ms\n",
				target, run.roundLabel(f.rounds), res.windowRate(), res.wholeRate(), ms(res.lat.pct(0.99)))
			results[i] = res
		}
		run.loadAfter = loadAvg()
		if f.rounds > 1 {
			fmt.Fprintf(stdout, "== round %d of %d (targets run in the order %s)\n", round+1, f.rounds,
				strings.Join(pick(f.targets, order), ", "))
		}
		allOK = printE2E(stdout, f, run, results) && allOK
		if f.rounds > 1 {
			fmt.Fprintln(stdout)
		}
		rounds = append(rounds, results)
	}
	if f.rounds > 1 {
		printE2ERounds(stdout, rounds)
	}
	if f.table {
		printHeadlines(stdout, "e2e", e2eHeadlines(run, rounds))
	}
	return allOK, nil
}

// rotated is the order of n targets in round r (from 0): the list turned
// by r, so that over the rounds each target runs first, and after each
// other, in turn. The machine's load drifts, and a fixed order would hand
// one target the same place in that drift every round.
func rotated(n, r int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = (i + r) % n
	}
	return out
}

func pick(list []string, idx []int) []string {
	out := make([]string, len(idx))
	for i, j := range idx {
		out[i] = list[j]
	}
	return out
}

// e2eRunInfo is what every target of one run shares.
type e2eRunInfo struct {
	probeRate  float64
	probeCPU   ackCPU // what each of the probe's acknowledgements cost
	rate       float64
	statements bool // pg_stat_statements is loaded on the PostgreSQL server

	loadBefore, loadAfter string
	round                 int // from 1
}

// roundLabel tells cells of different rounds apart in progress lines and
// profile names; with one round there is nothing to tell apart.
func (r *e2eRunInfo) roundLabel(rounds int) string {
	if rounds <= 1 {
		return ""
	}
	return fmt.Sprintf("-r%d", r.round)
}

// loadAvg is /proc/loadavg's first three fields: the machine is shared, and
// a figure means little without the load it was taken under.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// e2eConfig writes a config whose one flow makes one effect per invoice
// event (each invoice is its own entity, versioned by its created time),
// called at the loopback destination with the episode key in a header.
func e2eConfig(path, storeURL, token, secret, destURL, processing, tracing string) error {
	cfg := fmt.Sprintf(`listen: 127.0.0.1:0
store: %q
admin:
  token: %q
sources:
  - name: stripe
    kind: stripe
    secrets: [%q]
destinations:
  - name: loopback
    base_url: %q
    allow_private_networks: true          # the measured destination listens on loopback
    timeout: 10s
    idempotency: {header: Idempotency-Key, window: 24h}
flows:
  - name: invoices
    source: stripe
    events: ["invoice.*"]
    entity: event.data.object.id
    version:
      mode: revision
      revision: event.created
    state: '{"status": event.data.object.status, "amount": event.data.object.amount_paid}'
    effects:
      - name: record_payment
        destination: loopback
        request:
          path: '"/payments"'
          body: '{"event": meta.event_id, "invoice": entity, "amount": state.amount}'
`, storeURL, token, secret, destURL) + processing + tracing
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// processingYAML is the processing block of a server's config: empty
// unless --linger sets one.
func (e *receiveEnv) processingYAML() string {
	if e.linger <= 0 {
		return ""
	}
	return fmt.Sprintf("processing:\n  linger: %s\n", e.linger)
}

// startE2EServer starts hookledger serve on storeURL, with a config of its
// own named by label, and waits until it is ready.
func startE2EServer(ctx context.Context, env *receiveEnv, storeURL, destURL, label, traceRatio string) (*child, error) {
	cfgPath := filepath.Join(env.dir, label+".yaml")
	if err := e2eConfig(cfgPath, storeURL, env.token, env.secret, destURL, env.processingYAML(), env.tracingYAML(traceRatio)); err != nil {
		return nil, err
	}
	bin, args := env.hookledger, []string{"serve", "--config", cfgPath, "--log-format", "json"}
	if env.profiles != "" {
		bin, args = env.self, []string{"serve", "--config", cfgPath, "--cpuprofile", filepath.Join(env.profiles, label+".pprof")}
	}
	srv, err := startChild(ctx, "hookledger serve ("+label+")", bin, args, filepath.Join(env.dir, label+".log"))
	if err != nil {
		return nil, err
	}
	if err := waitReady(ctx, "http://"+srv.addr+"/readyz"); err != nil {
		return nil, errors.Join(err, srv.stop())
	}
	return srv, nil
}

// e2eProbe measures the receiver's closed-loop ingest rate with the same
// config (flow and delivery running) on a SQLite server of its own, so the
// backlog it leaves does not weigh on the sustained runs.
func e2eProbe(ctx context.Context, env *receiveEnv, f *e2eFlags, destURL string) (float64, ackCPU, error) {
	srv, err := startE2EServer(ctx, env, "sqlite:"+filepath.Join(env.dir, "probe.db"), destURL, "probe", "")
	if err != nil {
		return 0, ackCPU{}, err
	}
	env.f = &receiveFlags{warmup: time.Second, duration: f.probeFor, maxRequests: 2_000_000}
	res := &receiveResult{target: targetSQLite, clients: f.probeClients, meter: &cpuMeter{pid: srv.cmd.Process.Pid}}
	env.load(ctx, "http://"+srv.addr+"/hooks/stripe", res, "probe", nil)
	if err := srv.stop(); err != nil {
		return 0, ackCPU{}, err
	}
	if res.errs > 0 || res.non2xx > 0 {
		return 0, ackCPU{}, fmt.Errorf("probe: %d errors, %d non-2xx (first: %s)", res.errs, res.non2xx, res.firstErr)
	}
	return res.rate(), ackCPU{server: res.serverCPU, client: res.clientCPU, n: res.sent}, nil
}

// e2eDoor measures the door alone, as the receive benchmark's SQLite
// cell does (its config: the source, no flow, so nothing behind the door
// competes for the writer), with the ingest probe's clients: the
// baseline the goal 2 sets the pipeline's capacity against. Every
// acknowledged event must be in the store afterwards.
func e2eDoor(ctx context.Context, env *receiveEnv, f *e2eFlags) (*receiveResult, error) {
	env.f = &receiveFlags{warmup: time.Second, duration: f.doorFor, maxRequests: 2_000_000}
	res, err := env.cell(ctx, targetSQLite, f.probeClients, "door")
	if err != nil {
		return nil, err
	}
	if res.errs > 0 || res.non2xx > 0 || res.missing > 0 || res.sent == 0 {
		return nil, fmt.Errorf("%d sent, %d errors, %d non-2xx, %d acknowledged events missing from the store (first error: %s)",
			res.sent, res.errs, res.non2xx, res.missing, res.firstErr)
	}
	return res, nil
}

// e2eCell runs one target: a fresh store, its server processes, the
// open-loop schedule, the drain, and the accounts.
func e2eCell(ctx context.Context, env *receiveEnv, f *e2eFlags, run *e2eRunInfo, target string) (res *e2eResult, err error) {
	base, ratio, _ := strings.Cut(target, "@")
	driver := "sqlite"
	if base != e2eSQLite {
		driver = "postgres"
	}
	if driver == "postgres" {
		// Every PostgreSQL target starts from a checkpoint: the one before
		// wrote some 170 MB of WAL, and a target that ran into the
		// checkpoint it set off would pay for it (the first write to each
		// page after a checkpoint logs the whole page).
		if err := pgCheckpoint(ctx, f.postgres); err != nil {
			return nil, err
		}
	}
	// Each round gets a store of its own: a SQLite file named by the
	// target alone would hold the last round's events, and the same event
	// ids sent again would be taken as duplicates.
	cs, err := newCellStore(ctx, driver, env.dir, f.postgres, target+run.roundLabel(f.rounds))
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, cs.Drop()) }()
	dest := newSink()
	dest.warm = int64(math.Ceil(f.warmup.Seconds() * run.rate))
	destURL, closeDest, err := startSink(dest)
	if err != nil {
		return nil, err
	}
	defer closeDest()

	res = &e2eResult{target: target, processes: e2eProcesses(base), targetRate: run.rate}
	if driver == "sqlite" && f.walFrames > 0 {
		res.walPath = strings.TrimPrefix(cs.URL, "sqlite:")
	}
	if f.prefill > 0 {
		if err := prefillCell(ctx, env, driver, cs.URL, f.prefill); err != nil {
			return nil, err
		}
		// The planting wrote its rows' pages and WAL; the run starts
		// from a checkpoint as an empty store's does (above).
		if driver == "postgres" {
			if err := pgCheckpoint(ctx, f.postgres); err != nil {
				return nil, err
			}
		}
	}
	var srvs []*child
	defer func() {
		for _, s := range srvs {
			err = errors.Join(err, s.stop())
		}
	}()
	// One after the other: the first applies the migrations, and the
	// second finds them applied, as a second node joining would.
	for i := range res.processes {
		srv, err := startE2EServer(ctx, env, cs.URL, destURL, fmt.Sprintf("%s%s-%d", target, run.roundLabel(f.rounds), i+1), ratio)
		if err != nil {
			return nil, err
		}
		srvs = append(srvs, srv)
	}

	var stats *pgStats
	if driver == "postgres" {
		if stats, err = newPGStats(ctx, f.postgres, cs.URL, run.statements); err != nil {
			return nil, err
		}
		// Startup (migrations, first claims) is not the events' cost: the
		// count starts once the servers idle, and the idle rate is
		// measured so that a reader can tell polling from work.
		if res.pg, err = stats.idle(ctx, 2*time.Second); err != nil {
			return nil, err
		}
		res.pgCPU = newBackendCPU(stats.db)
	}

	if err := e2eRun(ctx, env, f, dest, srvs, res); err != nil {
		return nil, err
	}
	// The backends' last CPU reading, while they are still there.
	if res.pgCPU != nil {
		res.pgCPU.sample()
	}
	// Stop the servers before the last count: a backend leaving flushes
	// its statistics, and no commit is in flight.
	for _, s := range srvs {
		if err := s.stop(); err != nil {
			return nil, err
		}
		used := s.cmd.ProcessState.UserTime() + s.cmd.ProcessState.SystemTime()
		res.cpu = append(res.cpu, used-cpuAt(res.cpuStart, len(res.cpu)))
	}
	res.clientCPU = selfCPU() - res.selfStart
	srvs = nil
	if stats != nil {
		if err := stats.finish(ctx, res.pg, res.acked, f.topSQL); err != nil {
			return nil, err
		}
		if f.pgFloor > 0 {
			res.pg.floor, err = measurePGFloor(ctx, cs.URL, run.rate, f.pgFloor)
			if errors.Is(err, errNotLocal) {
				fmt.Fprintf(env.stderr, "target %s: no PostgreSQL floor: %v\n", target, err)
			} else if err != nil {
				return nil, err
			}
		}
	}
	if err := e2eLedger(ctx, cs.URL, int64(f.prefill), res); err != nil {
		return nil, err
	}
	// A build from before the claims were stamped (--hookledger) has no
	// breakdown to give; the rest of its figures stand.
	if rows, err := readStamps(ctx, driver, cs.URL); err != nil {
		fmt.Fprintf(env.stderr, "target %s: no stage breakdown: %v\n", target, err)
	} else {
		res.stages = breakdown(runStamps(rows, dest.warm), func(id string) int64 { return res.ackAt[id] })
	}
	return res, nil
}

// e2eRun sends the open-loop schedule to srvs, alternating between them,
// waits (bounded) for the backlog, and accounts for every acknowledged
// webhook at the destination. The servers are left running.
func e2eRun(ctx context.Context, env *receiveEnv, f *e2eFlags, dest *sink, srvs []*child, res *e2eResult) error {
	urls := make([]string, len(srvs))
	pids := make([]int, len(srvs))
	for i, s := range srvs {
		urls[i] = "http://" + s.addr + "/hooks/stripe"
		pids[i] = s.cmd.Process.Pid
	}
	fmt.Fprintf(env.stderr, "target %s: %.0f webhooks/s for %s, open loop over %d sender connections; server pids %v\n",
		res.target, res.targetRate, f.duration, f.senders, pids)

	senders := startE2ESenders(ctx, env, f.senders, urls, dest, res)
	t0, stopSampler := startE2ESampler(pids, f.sampleEvery, res)
	memStart, memErr := readGoMems(ctx, srvs, env.token)
	walDone := make(chan error, 1)
	if res.walPath != "" {
		go func() { walDone <- countWALFrames(ctx, res, t0.Add((f.duration-f.walFrames)/2), f.walFrames) }()
	} else {
		walDone <- nil
	}
	seq := e2eSchedule(ctx, senders.jobs, t0, t0.Add(f.duration), res.targetRate)
	senders.wg.Wait()
	if err := <-walDone; err != nil {
		fmt.Fprintf(env.stderr, "target %s: no WAL frame count: %v\n", res.target, err)
	}
	res.sendFor = time.Since(t0)
	res.scheduled, res.acked, res.non2xx, res.errs, res.late = seq, senders.acked.Load(), senders.non2xx.Load(), senders.errs.Load(), senders.late.Load()
	res.doneInWindow = dest.doneCount()
	senders.collect(res)
	if err := ctx.Err(); err != nil {
		stopSampler(false)
		return fmt.Errorf("interrupted: %w", err)
	}

	e2eDrain(ctx, env, f.drainFor, dest, res)
	stopSampler(true)
	if memErr == nil {
		var memEnd goMem
		if memEnd, memErr = readGoMems(ctx, srvs, env.token); memErr == nil {
			res.mem = memEnd.since(memStart)
		}
	}
	res.memErr = memErr
	e2eAccount(dest, res)
	return nil
}

// readGoMems sums readGoMem over the servers.
func readGoMems(ctx context.Context, srvs []*child, token string) (goMem, error) {
	var sum goMem
	for _, s := range srvs {
		m, err := readGoMem(ctx, http.DefaultClient, s.addr, token)
		if err != nil {
			return goMem{}, fmt.Errorf("%s: %w", s.name, err)
		}
		sum.alloc += m.alloc
		sum.gcs += m.gcs
		sum.writerBusy += m.writerBusy
		sum.writerCommit += m.writerCommit
	}
	return sum, nil
}

// e2eJob is one send the schedule hands to a sender: its sequence number
// and when it was due.
type e2eJob struct {
	seq int64
	due time.Time
}

// e2eSenders is the open loop's pool of sender connections and what they
// counted.
type e2eSenders struct {
	jobs                      chan e2eJob
	wg                        sync.WaitGroup
	acked, non2xx, errs, late atomic.Int64
	errOnce                   sync.Once
	ackedParts                [][]string
	latParts                  []latencies
	ackParts                  [][]int64
}

// startE2ESenders starts n senders. Open loop: a scheduler hands each send
// to a free sender at its time. A send that finds every sender busy waits
// and is counted late, so a slow server shows up as lateness, not as a
// lower rate that looks healthy.
func startE2ESenders(ctx context.Context, env *receiveEnv, n int, urls []string, dest *sink, res *e2eResult) *e2eSenders {
	s := &e2eSenders{
		jobs:       make(chan e2eJob, n),
		ackedParts: make([][]string, n),
		latParts:   make([]latencies, n),
		ackParts:   make([][]int64, n),
	}
	for i := range n {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.send(ctx, env, i, urls, dest, res)
		}()
	}
	return s
}

// send is sender i: it posts every job it takes until the schedule closes
// the jobs.
func (s *e2eSenders) send(ctx context.Context, env *receiveEnv, i int, urls []string, dest *sink, res *e2eResult) {
	// One connection per server: a send goes to the server its
	// sequence number picks.
	tr := &http.Transport{MaxIdleConns: len(urls), MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true, IdleConnTimeout: time.Minute}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	for j := range s.jobs {
		if time.Since(j.due) > 10*time.Millisecond {
			s.late.Add(1)
		}
		id := e2eEventID(j.seq)
		dest.sent.Store(id, time.Now())
		status, lat, err := env.post(ctx, client, urls[j.seq%int64(len(urls))], id)
		switch {
		case err != nil:
			s.errs.Add(1)
			s.errOnce.Do(func() { res.firstErr = err.Error() })
		case status/100 != 2:
			s.non2xx.Add(1)
			s.errOnce.Do(func() { res.firstErr = fmt.Sprintf("HTTP %d", status) })
		default:
			s.acked.Add(1)
			s.ackedParts[i] = append(s.ackedParts[i], id)
			if j.seq >= dest.warm {
				s.latParts[i] = append(s.latParts[i], lat)
			}
			s.ackParts[i] = append(s.ackParts[i], time.Now().UnixMicro())
		}
	}
}

// collect writes into res, once every sender ended, which webhooks were
// acknowledged, when, and how long each took.
func (s *e2eSenders) collect(res *e2eResult) {
	res.ackLat = mergeLatencies(s.latParts)
	res.ackAt = map[string]int64{}
	for i, p := range s.ackedParts {
		res.ackedIDs = append(res.ackedIDs, p...)
		for j, id := range p {
			res.ackAt[id] = s.ackParts[i][j]
		}
	}
}

// startE2ESampler reads each server's CPU time so far (startup and idle
// polling are not the events' cost), then samples the servers' memory (and
// the database's CPU) every interval from t0, which it returns. stop ends
// the sampling; with final it takes one last sample.
func startE2ESampler(pids []int, every time.Duration, res *e2eResult) (t0 time.Time, stop func(final bool)) {
	res.samples = make([][]rssSample, len(pids))
	for _, pid := range pids {
		c, _ := readCPU(pid)
		res.cpuStart = append(res.cpuStart, c)
	}
	res.selfStart = selfCPU()
	t0 = time.Now()
	sample := func() {
		for i, pid := range pids {
			if rss, hwm, err := readRSS(pid); err == nil {
				res.samples[i] = append(res.samples[i], rssSample{at: time.Since(t0), rss: rss, hwm: hwm})
			}
		}
		if res.pgCPU != nil {
			res.pgCPU.sample()
		}
	}
	samplerStop := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(every)
		defer t.Stop()
		sample()
		for {
			select {
			case <-samplerStop:
				return
			case <-t.C:
				sample()
			}
		}
	}()
	return t0, func(final bool) {
		close(samplerStop)
		<-samplerDone
		if final {
			sample()
		}
	}
}

// e2eSchedule hands jobs their sends at rate per second from t0 until end
// (or ctx ends), closes jobs and returns how many it scheduled.
func e2eSchedule(ctx context.Context, jobs chan<- e2eJob, t0, end time.Time, rate float64) int64 {
	interval := time.Duration(float64(time.Second) / rate)
	var seq int64
	for due := t0; due.Before(end) && ctx.Err() == nil; due = t0.Add(time.Duration(seq) * interval) {
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		jobs <- e2eJob{seq: seq, due: due}
		seq++
	}
	close(jobs)
	return seq
}

// e2eDrain waits, bounded by drainFor, for the backlog: the exactly-once
// check needs every acknowledged webhook's effect to have had its chance.
func e2eDrain(ctx context.Context, env *receiveEnv, drainFor time.Duration, dest *sink, res *e2eResult) {
	fmt.Fprintf(env.stderr, "target %s: sent %d, acknowledged %d, effects done %d; waiting up to %s for the rest...\n",
		res.target, res.scheduled, res.acked, res.doneInWindow, drainFor)
	drainStart := time.Now()
	for dest.doneCount() < int(res.acked) && time.Since(drainStart) < drainFor && ctx.Err() == nil {
		sleepCtx(ctx, 50*time.Millisecond)
	}
	res.drainedIn = time.Since(drainStart)
	res.drainBound = dest.doneCount() < int(res.acked)
	// A moment more, so a second call for an effect just done (there
	// should be none) is seen before counting; not part of the drain time.
	sleepCtx(ctx, time.Second)
}

// e2eAccount counts, for every acknowledged webhook, the calls its effect
// had at the destination: the exactly-once account.
func e2eAccount(dest *sink, res *e2eResult) {
	dest.mu.Lock()
	defer dest.mu.Unlock()
	for _, id := range res.ackedIDs {
		switch n := dest.calls[id]; {
		case n == 1:
			res.exactlyOne++
		case n == 0:
			res.missing++
		default:
			res.duplicated++
		}
	}
	res.keyDiff, res.unknown = dest.keyDiff, dest.unknown
	res.lat = mergeLatencies([]latencies{dest.lat})
	res.warmLat = mergeLatencies([]latencies{dest.warmLat})
	res.warm = dest.warm
}

// e2eLedger counts the effect ledger by state after the server stopped,
// the effects with ids above plantedIDs: a prefilled history's are 1..n.
func e2eLedger(ctx context.Context, storeURL string, plantedIDs int64, res *e2eResult) error {
	st, err := storeopen.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	res.ledger = map[store.EffectState]int{}
	after := plantedIDs
	for {
		page, err := st.EffectList(ctx, &store.EffectListParams{AfterID: after, Limit: 1000})
		if err != nil {
			return fmt.Errorf("list effects: %w", err)
		}
		for _, e := range page {
			res.ledgerTotal++
			res.ledger[e.State]++
			after = e.ID
		}
		if len(page) < 1000 {
			return nil
		}
	}
}
