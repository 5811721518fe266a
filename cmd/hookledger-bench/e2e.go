package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
	"github.com/hookledger/hookledger/internal/verify"
)

type e2eFlags struct {
	duration     time.Duration
	rate         float64
	rateShare    float64
	senders      int
	probeFor     time.Duration
	probeClients int
	drainFor     time.Duration
	sampleEvery  time.Duration
	hookledger   string
	module       string
	dir          string
}

func runE2E(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "e2e", "e2e [--duration 60s] [--rate R] [flags]",
		"Webhooks in, effects done: starts hookledger serve (SQLite) as a child process on\n"+
			"127.0.0.1 with a flow that makes one effect per event and a destination pointing at a\n"+
			"loopback HTTP server in this process, then sends Stripe-signed webhooks OPEN-LOOP at a\n"+
			"steady rate for --duration (each send on its schedule, whatever the answers take).\n"+
			"Without --rate, the rate is --rate-share of the ingest rate measured first, in the same\n"+
			"run, by a closed-loop receive probe against its own fresh server. The default share,\n"+
			"0.55, sends a tenth above the target of half the ingest rate: effects done while\n"+
			"sending trail the schedule by the pipeline's latency, so a run sending at exactly the\n"+
			"target rate could not reach it even when keeping up. Prints effects done/s,\n"+
			"latency from sending the webhook to the destination receiving the call, the ingest\n"+
			"rate, and the server's RSS sampled from /proc every --sample. After sending, waits up\n"+
			"to --drain for the backlog; exit 1 unless every acknowledged webhook produced exactly\n"+
			"one call at the destination.")
	var f e2eFlags
	fs.DurationVar(&f.duration, "duration", 60*time.Second, "sending `time`")
	fs.Float64Var(&f.rate, "rate", 0, "webhooks per second to send (0: --rate-share of the probed ingest rate)")
	fs.Float64Var(&f.rateShare, "rate-share", 0.55, "share of the probed ingest rate to send at when --rate is 0")
	fs.IntVar(&f.senders, "senders", 64, "sender connections available to the open-loop schedule")
	fs.DurationVar(&f.probeFor, "probe", 5*time.Second, "measured `time` of the ingest probe (after 1 s warm-up)")
	fs.IntVar(&f.probeClients, "probe-clients", 32, "closed-loop clients of the ingest probe")
	fs.DurationVar(&f.drainFor, "drain", 5*time.Minute, "upper bound on the `time` waited after sending for the remaining effects")
	fs.DurationVar(&f.sampleEvery, "sample", 5*time.Second, "RSS sampling `interval`")
	fs.StringVar(&f.hookledger, "hookledger", "", "prebuilt hookledger `binary` (default: go build ./cmd/hookledger from --module into the temp dir)")
	fs.StringVar(&f.module, "module", ".", "hookledger module `directory` to build from")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir (default the system temp dir)")
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	if f.duration <= 0 || f.rate < 0 || f.rateShare <= 0 || f.senders < 1 || f.probeFor <= 0 || f.probeClients < 1 || f.drainFor < 0 || f.sampleEvery <= 0 {
		fmt.Fprintln(stderr, "hookledger-bench e2e: durations, counts and --rate-share must be positive, --rate and --drain not negative")
		return exitUsage
	}
	ok, err := e2eBench(ctx, stdout, stderr, &f)
	if err != nil {
		fmt.Fprintf(stderr, "hookledger-bench e2e: %v\n", err)
		return exitFail
	}
	if !ok {
		return exitFail
	}
	return exitOK
}

// sink is the loopback destination: it answers every call 200 at once and
// records, per event, the calls and the time the first one arrived.
type sink struct {
	sent sync.Map // event id -> time.Time the webhook was sent

	mu      sync.Mutex
	calls   map[string]int    // event id -> calls
	keys    map[string]string // event id -> episode key of its first call
	keyDiff int               // calls whose episode key differs from the event's first
	lat     latencies
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
		if t, ok := s.sent.Load(body.Event); ok {
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

// startSink serves s on a loopback port the kernel picks and returns its
// base URL and the function that closes it.
func startSink(s *sink) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("destination: %w", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// doneCount is how many distinct events have had their effect called.
func (s *sink) doneCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.done)
}

// rssSample is one reading of the server's /proc/PID/status.
type rssSample struct {
	at       time.Duration // since sending started
	rss, hwm int64         // KiB
	done     int           // effects done at the destination by then
	acked    int64
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

func mib(kib int64) string { return fmt.Sprintf("%.1f", float64(kib)/1024) }

type e2eResult struct {
	probeRate  float64
	targetRate float64
	sendFor    time.Duration

	scheduled, acked, non2xx, errs, late int64
	firstErr                             string
	ackLat                               latencies

	doneInWindow int           // effects done while sending
	drainedIn    time.Duration // after sending, until every acked effect was done (or the bound)
	samples      []rssSample

	// The exactly-once account.
	ackedIDs   []string
	exactlyOne int
	missing    int
	duplicated int
	keyDiff    int
	unknown    int
	lat        latencies

	ledger      map[store.EffectState]int
	ledgerTotal int
}

func e2eBench(ctx context.Context, stdout, stderr io.Writer, f *e2eFlags) (bool, error) {
	dir, err := os.MkdirTemp(f.dir, "hookledger-bench-e2e-")
	if err != nil {
		return false, fmt.Errorf("make temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	env := &receiveEnv{stderr: stderr, hookledger: f.hookledger, dir: dir}
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
	if env.scheme, err = verify.New(verify.Options{Kind: verify.KindStripe, Secrets: []string{env.secret}}); err != nil {
		return false, fmt.Errorf("stripe signer: %w", err)
	}

	res := &e2eResult{targetRate: f.rate}
	if f.rate == 0 {
		fmt.Fprintf(stderr, "probe: closed-loop ingest, %d clients, 1s warm-up, %s...\n", f.probeClients, f.probeFor)
		// The probe's effects go to a destination of their own, so none
		// of them is mistaken for the sustained run's.
		probeURL, closeProbe, err := startSink(newSink())
		if err != nil {
			return false, err
		}
		res.probeRate, err = e2eProbe(ctx, env, f, probeURL)
		closeProbe()
		if err != nil {
			return false, fmt.Errorf("ingest probe: %w", err)
		}
		res.targetRate = res.probeRate * f.rateShare
		fmt.Fprintf(stderr, "probe: %.0f webhooks/s acknowledged; sending at %.0f/s\n", res.probeRate, res.targetRate)
	}
	if res.targetRate < 1 {
		return false, fmt.Errorf("send rate %.2f/s is below 1/s", res.targetRate)
	}
	dest := newSink()
	destURL, closeDest, err := startSink(dest)
	if err != nil {
		return false, err
	}
	defer closeDest()
	if err := e2eRun(ctx, env, f, dest, destURL, res); err != nil {
		return false, err
	}
	return printE2E(stdout, f, res), nil
}

// e2eConfig writes a config whose one flow makes one effect per invoice
// event (each invoice is its own entity, versioned by its created time),
// called at the loopback destination with the episode key in a header.
func e2eConfig(path, storeURL, token, secret, destURL string) error {
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
`, storeURL, token, secret, destURL)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	return nil
}

// startE2EServer starts hookledger serve on a fresh SQLite file.
func startE2EServer(ctx context.Context, env *receiveEnv, destURL, label string) (*child, string, error) {
	storeURL := "sqlite:" + filepath.Join(env.dir, label+".db")
	cfgPath := filepath.Join(env.dir, label+".yaml")
	if err := e2eConfig(cfgPath, storeURL, env.token, env.secret, destURL); err != nil {
		return nil, "", err
	}
	srv, err := startChild(ctx, "hookledger serve", env.hookledger, []string{"serve", "--config", cfgPath, "--log-format", "json"},
		filepath.Join(env.dir, label+".log"))
	if err != nil {
		return nil, "", err
	}
	if err := waitReady(ctx, "http://"+srv.addr+"/readyz"); err != nil {
		return nil, "", errors.Join(err, srv.stop())
	}
	return srv, storeURL, nil
}

// e2eProbe measures the receiver's closed-loop ingest rate with the same
// config (flow and delivery running) on a server of its own, so the backlog
// it leaves does not weigh on the sustained run.
func e2eProbe(ctx context.Context, env *receiveEnv, f *e2eFlags, destURL string) (float64, error) {
	srv, _, err := startE2EServer(ctx, env, destURL, "probe")
	if err != nil {
		return 0, err
	}
	env.f = &receiveFlags{warmup: time.Second, duration: f.probeFor, maxRequests: 2_000_000}
	res := &receiveResult{target: targetSQLite, clients: f.probeClients}
	env.load(ctx, "http://"+srv.addr+"/hooks/stripe", res, "probe")
	if err := srv.stop(); err != nil {
		return 0, err
	}
	if res.errs > 0 || res.non2xx > 0 {
		return 0, fmt.Errorf("probe: %d errors, %d non-2xx (first: %s)", res.errs, res.non2xx, res.firstErr)
	}
	return res.rate(), nil
}

func e2eRun(ctx context.Context, env *receiveEnv, f *e2eFlags, dest *sink, destURL string, res *e2eResult) (err error) {
	srv, storeURL, err := startE2EServer(ctx, env, destURL, "e2e")
	if err != nil {
		return err
	}
	defer func() {
		if srv != nil {
			err = errors.Join(err, srv.stop())
		}
	}()
	pid := srv.cmd.Process.Pid
	u := "http://" + srv.addr + "/hooks/stripe"
	fmt.Fprintf(env.stderr, "sustained: %.0f webhooks/s for %s, open loop over %d sender connections; server pid %d\n",
		res.targetRate, f.duration, f.senders, pid)

	// Open loop: a scheduler hands each send to a free sender at its
	// time. A send that finds every sender busy waits and is counted
	// late, so a slow server shows up as lateness, not as a lower rate
	// that looks healthy.
	type job struct {
		seq int64
		due time.Time
	}
	jobs := make(chan job, f.senders)
	var acked, non2xx, errs, late atomic.Int64
	var errOnce sync.Once
	ackedParts := make([][]string, f.senders)
	latParts := make([]latencies, f.senders)
	var wg sync.WaitGroup
	for i := range f.senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tr := &http.Transport{MaxIdleConns: 1, MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1, DisableCompression: true, IdleConnTimeout: time.Minute}
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
			for j := range jobs {
				if time.Since(j.due) > 10*time.Millisecond {
					late.Add(1)
				}
				id := fmt.Sprintf("evt_e2e_%d", j.seq)
				dest.sent.Store(id, time.Now())
				status, lat, err := env.post(ctx, client, u, id)
				switch {
				case err != nil:
					errs.Add(1)
					errOnce.Do(func() { res.firstErr = err.Error() })
				case status/100 != 2:
					non2xx.Add(1)
					errOnce.Do(func() { res.firstErr = fmt.Sprintf("HTTP %d", status) })
				default:
					acked.Add(1)
					ackedParts[i] = append(ackedParts[i], id)
					latParts[i] = append(latParts[i], lat)
				}
			}
		}()
	}

	samplerStop := make(chan struct{})
	samplerDone := make(chan struct{})
	t0 := time.Now()
	sample := func() {
		rss, hwm, err := readRSS(pid)
		if err != nil {
			return
		}
		res.samples = append(res.samples, rssSample{at: time.Since(t0), rss: rss, hwm: hwm, done: dest.doneCount(), acked: acked.Load()})
	}
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(f.sampleEvery)
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

	interval := time.Duration(float64(time.Second) / res.targetRate)
	end := t0.Add(f.duration)
	var seq int64
	for due := t0; due.Before(end) && ctx.Err() == nil; due = t0.Add(time.Duration(seq) * interval) {
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		jobs <- job{seq: seq, due: due}
		seq++
	}
	close(jobs)
	wg.Wait()
	res.sendFor = time.Since(t0)
	res.scheduled, res.acked, res.non2xx, res.errs, res.late = seq, acked.Load(), non2xx.Load(), errs.Load(), late.Load()
	res.doneInWindow = dest.doneCount()
	res.ackLat = mergeLatencies(latParts)
	for _, p := range ackedParts {
		res.ackedIDs = append(res.ackedIDs, p...)
	}
	if err := ctx.Err(); err != nil {
		close(samplerStop)
		<-samplerDone
		return fmt.Errorf("interrupted: %w", err)
	}

	// Wait, bounded, for the backlog: the exactly-once check needs every
	// acknowledged webhook's effect to have had its chance.
	fmt.Fprintf(env.stderr, "sustained: sent %d, acknowledged %d, effects done %d; waiting up to %s for the rest...\n",
		res.scheduled, res.acked, res.doneInWindow, f.drainFor)
	drainStart := time.Now()
	for dest.doneCount() < int(res.acked) && time.Since(drainStart) < f.drainFor && ctx.Err() == nil {
		sleepCtx(ctx, 200*time.Millisecond)
	}
	// A moment more, so a second call for an effect just done (there
	// should be none) is seen before counting.
	sleepCtx(ctx, time.Second)
	res.drainedIn = time.Since(drainStart)
	close(samplerStop)
	<-samplerDone
	sample()

	stopErr := srv.stop()
	srv = nil
	if stopErr != nil {
		return stopErr
	}
	dest.mu.Lock()
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
	dest.mu.Unlock()
	return e2eLedger(ctx, storeURL, res)
}

// e2eLedger counts the effect ledger by state after the server stopped.
func e2eLedger(ctx context.Context, storeURL string, res *e2eResult) error {
	st, err := storeopen.Open(ctx, storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	res.ledger = map[store.EffectState]int{}
	var after int64
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

func printE2E(w io.Writer, f *e2eFlags, r *e2eResult) bool {
	fmt.Fprintf(w, "hookledger-bench e2e: hookledger serve on SQLite, Stripe-signed invoice events (~%d B), one effect per event,\n",
		len(stripeBody("evt_x", "in_x", time.Now())))
	fmt.Fprintf(w, "loopback destination in the load generator; %d CPUs shared by both (GOMAXPROCS %d)\n\n", runtime.NumCPU(), runtime.GOMAXPROCS(0))
	if r.probeRate > 0 {
		fmt.Fprintf(w, "ingest probe (closed loop, %d clients, own fresh server): %.0f webhooks/s; send rate = %.2f x that = %.0f/s\n",
			f.probeClients, r.probeRate, f.rateShare, r.targetRate)
	} else {
		fmt.Fprintf(w, "send rate (--rate): %.0f/s; no ingest probe\n", r.targetRate)
	}
	sendRate := rate(r.acked, r.sendFor)
	fmt.Fprintf(w, "sending: %s open loop, %d scheduled, %d acknowledged (%.0f/s ingest), late %d, non-2xx %d, errors %d; ack p50 %s ms, p99 %s ms\n",
		r.sendFor.Round(time.Millisecond), r.scheduled, r.acked, sendRate, r.late, r.non2xx, r.errs, ms(r.ackLat.pct(0.5)), ms(r.ackLat.pct(0.99)))
	if r.firstErr != "" {
		fmt.Fprintf(w, "first failure: %s\n", r.firstErr)
	}
	windowRate := rate(int64(r.doneInWindow), r.sendFor)
	total := r.exactlyOne + r.duplicated
	fmt.Fprintf(w, "effects done at the destination: %.0f/s while sending (%d in %s); %d of %d after a further %s (%.0f/s over the whole run)\n",
		windowRate, r.doneInWindow, r.sendFor.Round(time.Millisecond), total, r.acked, r.drainedIn.Round(time.Millisecond),
		rate(int64(total), r.sendFor+r.drainedIn))
	fmt.Fprintf(w, "end-to-end latency (webhook sent -> destination called), %d effects: p50 %s ms, p99 %s ms, max %s ms\n",
		len(r.lat), ms(r.lat.pct(0.5)), ms(r.lat.pct(0.99)), ms(r.lat.pct(1)))
	fmt.Fprintln(w)
	fmt.Fprintln(w, "server memory (VmRSS / VmHWM from /proc/PID/status):")
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "  %8s  %9s  %9s  %9s  %9s\n", "t", "RSS MiB", "peak MiB", "acked", "done")
	for _, s := range r.samples {
		fmt.Fprintf(&buf, "  %8s  %9s  %9s  %9d  %9d\n", s.at.Round(time.Second), mib(s.rss), mib(s.hwm), s.acked, s.done)
	}
	_, _ = w.Write(buf.Bytes())
	if n := len(r.samples); n > 0 {
		first, last := r.samples[0], r.samples[n-1]
		fmt.Fprintf(w, "  peak RSS %s MiB; RSS first %s MiB, last %s MiB\n", mib(last.hwm), mib(first.rss), mib(last.rss))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "ledger after the server stopped: %d effects, by state %v\n", r.ledgerTotal, r.ledger)

	ok := r.missing == 0 && r.duplicated == 0 && r.keyDiff == 0 && r.unknown == 0 && r.non2xx == 0 && r.errs == 0
	verdict := "ok"
	if !ok {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "exactly once: %s: %d acknowledged webhooks: %d called exactly once, %d not called, %d called more than once; %d calls under a second episode key, %d calls for unknown events\n",
		verdict, r.acked, r.exactlyOne, r.missing, r.duplicated, r.keyDiff, r.unknown)
	if r.probeRate > 0 {
		goal := r.probeRate / 2
		met := "MET"
		if windowRate < goal {
			met = "NOT MET"
		}
		fmt.Fprintf(w, "target (effects done/s while sending >= half the probed ingest rate, %.0f/s): %.0f/s: %s\n", goal, windowRate, met)
	}
	return ok
}
