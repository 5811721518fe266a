package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

type bulkheadFlags struct {
	healthy, hanging int
	timeout          time.Duration
	workers          int
	dir              string
}

func runBulkhead(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "bulkhead", "bulkhead [--healthy 600] [--hanging 200] [--timeout 4s] [--workers 64]",
		"Head-of-line blocking between destinations: delivers --healthy effects to a loopback\n"+
			"destination that answers at once, first alone, then again (on a fresh SQLite store)\n"+
			"beside --hanging effects to a destination that holds every call until its --timeout.\n"+
			"Both runs use the product's delivery worker with the documented defaults\n"+
			"(delivery.workers, each destination's max_in_flight at its default). Prints the\n"+
			"healthy destination's effects/s, p50 and p99 time to done from the start of the run,\n"+
			"and the ratio of the two run times (target: at most 1.5); exit 1 if an effect is\n"+
			"not delivered exactly once.")
	var f bulkheadFlags
	fs.IntVar(&f.healthy, "healthy", 600, "effects to the healthy destination")
	fs.IntVar(&f.hanging, "hanging", 200, "effects to the hanging destination")
	fs.DurationVar(&f.timeout, "timeout", 4*time.Second, "the hanging destination's timeout: each of its calls lasts this long")
	fs.IntVar(&f.workers, "workers", config.DefaultWorkers, "delivery workers")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir (default the system temp dir)")
	table := tableFlag(fs)
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	if f.healthy < 1 || f.hanging < 0 || f.timeout <= 0 || f.workers < 1 {
		fmt.Fprintln(stderr, "hookledger-bench bulkhead: counts and --timeout must be positive")
		return exitUsage
	}
	tmp, err := os.MkdirTemp(f.dir, "hookledger-bulkhead-")
	if err != nil {
		fmt.Fprintf(stderr, "hookledger-bench bulkhead: %v\n", err)
		return exitFail
	}
	defer os.RemoveAll(tmp)

	fmt.Fprintf(stdout, "bulkhead: %d effects to a healthy destination, alone and beside %d to one that hangs for %s; %d workers, GOMAXPROCS %d\n",
		f.healthy, f.hanging, f.timeout, f.workers, runtime.GOMAXPROCS(0))
	alone, err := bulkheadRun(ctx, &f, filepath.Join(tmp, "alone.db"), 0)
	if err != nil {
		fmt.Fprintf(stderr, "hookledger-bench bulkhead: alone: %v\n", err)
		return exitFail
	}
	beside, err := bulkheadRun(ctx, &f, filepath.Join(tmp, "beside.db"), f.hanging)
	if err != nil {
		fmt.Fprintf(stderr, "hookledger-bench bulkhead: beside: %v\n", err)
		return exitFail
	}
	for _, r := range []struct {
		name string
		res  *bulkheadResult
	}{{"alone", alone}, {"beside a hanging destination", beside}} {
		fmt.Fprintf(stdout, "  %-30s %8.0f effects/s  done in %7.2fs  p50 %s ms  p99 %s ms  hanging calls %d\n",
			r.name, float64(f.healthy)/r.res.took.Seconds(), r.res.took.Seconds(),
			ms(r.res.p50), ms(r.res.p99), r.res.hangingCalls)
	}
	ratio := beside.took.Seconds() / alone.took.Seconds()
	verdict := "met"
	if ratio > 1.5 {
		verdict = "NOT met"
	}
	fmt.Fprintf(stdout, "  ratio beside/alone: %.2f (target at most 1.5: %s)\n", ratio, verdict)
	if *table {
		printHeadlines(stdout, "bulkhead", bulkheadHeadlines(&f, alone, beside))
	}
	return exitOK
}

// bulkheadHeadlines are the healthy destination's run beside the hanging
// one against its run alone.
func bulkheadHeadlines(f *bulkheadFlags, alone, beside *bulkheadResult) []headline {
	perSec := func(r *bulkheadResult) float64 { return float64(f.healthy) / r.took.Seconds() }
	ratio := beside.took.Seconds() / alone.took.Seconds()
	return []headline{{
		figure: fmt.Sprintf("%d effects to a healthy destination beside %d to one hanging %s", f.healthy, f.hanging, f.timeout),
		value: fmt.Sprintf("%s effects/s, all done in %.2f s, p99 %s ms", num(perSec(beside)), beside.took.Seconds(),
			ms(beside.p99)),
		baseline: fmt.Sprintf("the same effects alone: %s effects/s, done in %.2f s", num(perSec(alone)), alone.took.Seconds()),
		ratio:    fmt.Sprintf("%.2f of the time alone", ratio),
		goal:     "at most 1.5: " + verdict(ratio <= 1.5),
	}}
}

type bulkheadResult struct {
	took, p50, p99 time.Duration
	hangingCalls   int
}

func bulkheadRun(ctx context.Context, f *bulkheadFlags, path string, hanging int) (*bulkheadResult, error) {
	var mu sync.Mutex
	seen := map[string]int{}
	var done []time.Duration
	var start time.Time
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("Idempotency-Key")]++
		done = append(done, time.Since(start))
		mu.Unlock()
	}))
	defer healthy.Close()
	hangingCalls := 0
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hangingCalls++
		mu.Unlock()
		<-r.Context().Done() // the client gives up at its timeout
	}))
	defer stuck.Close()

	cfg, err := bulkheadConfig(healthy.URL, stuck.URL, f.timeout)
	if err != nil {
		return nil, err
	}
	st, err := sqlite.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		return nil, err
	}
	if err := bulkheadEnqueue(ctx, st, hanging, f.healthy); err != nil {
		return nil, err
	}
	if err := flow.New(cfg, st, flow.Options{}).Drain(ctx); err != nil {
		return nil, fmt.Errorf("process: %w", err)
	}
	w, err := deliver.New(cfg, st, deliver.Options{Workers: f.workers, LeaseFor: cfg.Delivery.Lease.D(), PollInterval: cfg.Delivery.PollInterval.D()})
	if err != nil {
		return nil, err
	}
	start = time.Now()
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	for {
		mu.Lock()
		n := len(done)
		mu.Unlock()
		if n >= f.healthy {
			break
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Since(start) > 10*time.Minute {
			return nil, errors.New("the healthy destination's effects were not done within 10 minutes")
		}
		time.Sleep(2 * time.Millisecond) // polling progress, not measuring
	}
	took := time.Since(start)
	stopCtx, cancel := context.WithTimeout(context.Background(), f.timeout+30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		return nil, err
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range seen {
		if n != 1 {
			return nil, fmt.Errorf("episode %s called %d times, want once", k, n)
		}
	}
	if len(seen) != f.healthy {
		return nil, fmt.Errorf("%d distinct healthy effects called, want %d", len(seen), f.healthy)
	}
	l := latencies(done)
	slices.Sort(l)
	return &bulkheadResult{took: took, p50: l.pct(0.50), p99: l.pct(0.99), hangingCalls: hangingCalls}, nil
}

// bulkheadConfig is the run's configuration: one flow whose effects go to
// the healthy destination or to the hanging one, which answers nothing
// before the client's timeout.
func bulkheadConfig(healthyURL, hangingURL string, timeout time.Duration) (*config.Config, error) {
	yaml := fmt.Sprintf(`destinations:
  - name: healthy
    base_url: %s
    allow_private_networks: true          # the simulated destinations listen on loopback
    idempotency: {header: Idempotency-Key, window: 24h}
  - name: hanging
    base_url: %s
    allow_private_networks: true          # the simulated destinations listen on loopback
    timeout: %s
sources:
  - name: shop
    kind: hmac
    secrets: [bench]
    hmac: {header: X-Sig}
flows:
  - name: orders
    source: shop
    events: ["*"]
    entity: event.id
    version: {mode: revision, revision: "1"}
    effects:
      - {name: push, when: 'event.to == "healthy"', destination: healthy, request: {path: '"/push"'}}
      - {name: push_slow, when: 'event.to == "hanging"', destination: hanging, request: {path: '"/push"'}}
`, healthyURL, hangingURL, timeout)
	return config.Parse("bulkhead.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
}

// bulkheadEnqueue commits the run's webhooks: hanging for the hanging
// destination, then healthy for the healthy one.
func bulkheadEnqueue(ctx context.Context, st *sqlite.Store, hanging, healthy int) error {
	var subs []*store.Submission
	add := func(i int, to string) {
		subs = append(subs, &store.Submission{Deliveries: []*store.DeliveryInput{{
			RequestID: fmt.Sprint("r", i), Source: "shop", EventID: fmt.Sprintf("evt-%s-%d", to, i), Type: "order.paid",
			ReceivedAt: time.Now(), Body: []byte(fmt.Sprintf(`{"id":"%s-%d","to":%q}`, to, i, to)),
		}}})
	}
	// The hanging destination's effects come first, so an engine that
	// claimed in batches would meet them first.
	for i := range hanging {
		add(i, "hanging")
	}
	for i := range healthy {
		add(i, "healthy")
	}
	for len(subs) > 0 {
		n := min(len(subs), 256)
		res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: subs[:n]})
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Err != nil {
				return r.Err
			}
		}
		subs = subs[n:]
	}
	return nil
}
