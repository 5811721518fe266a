package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/server"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

const (
	shapeHot    = "hot"    // every event for one entity, increasing revisions
	shapeSpread = "spread" // events spread over --entities entities

	modeLoop  = "loop"  // Engine.Start, as serve runs it
	modeDrain = "drain" // Engine.Drain: route a page, then process, in turn

	pipelineSource = "shop"
	pipelineFlow   = "orders"
	pipelineEffect = "sync"
)

type pipelineFlags struct {
	postgres string
	drivers  []string
	shapes   []string
	events   int
	entities int
	group    int
	workers  int
	mode     string
	timeout  time.Duration
	dir      string
	profiles string // directory of one CPU profile of processing per cell
	table    bool

	// pgStatements: the server loads pg_stat_statements, so PostgreSQL
	// cells count the database's work while processing.
	pgStatements bool
}

func runPipeline(ctx context.Context, stdout, stderr io.Writer, args []string) int {
	fs := newFlagSet(stderr, "pipeline", "pipeline [--postgres URL] [--events 10000] [--entities 10000] [flags]",
		"Measures events per second from the inbox to the effect ledger. Per cell, a fresh\n"+
			"database is preloaded with --events order events through store.InboxCommit in groups\n"+
			"(timed: the same-run baseline), then the flow engine runs in this process (a\n"+
			"revision-mode flow with one effect, --mode loop or drain) until no work is pending. Shapes: hot = every\n"+
			"event for one entity with increasing revisions; spread = the events spread round-robin\n"+
			"over --entities entities. Afterwards every entity's projection must be at its newest\n"+
			"revision and the ledger must hold one effect per event; exit 1 otherwise.")
	var f pipelineFlags
	fs.StringVar(&f.postgres, "postgres", "", "PostgreSQL admin `URL`; a database is created and dropped per cell (omit to measure SQLite only)")
	drivers := fs.String("drivers", "", "comma-separated `drivers` (default sqlite, plus postgres when --postgres is set)")
	shapes := fs.String("shapes", shapeHot+","+shapeSpread, "comma-separated `shapes`: hot, spread")
	fs.IntVar(&f.events, "events", 10_000, "events preloaded per cell")
	fs.IntVar(&f.entities, "entities", 10_000, "entities of the spread shape")
	fs.IntVar(&f.group, "group", 64, "submissions per InboxCommit while preloading")
	fs.IntVar(&f.workers, "workers", 64, "flow engine workers (entities processed in parallel; 64 is the product default, processing.workers)")
	fs.StringVar(&f.mode, "mode", modeLoop, "how the engine runs: loop = its background loop, as serve runs it (routing beside processing,\n"+
		"a worker's slot refilled as soon as its entity is done); drain = Step after Step (route a page, then process\n"+
		"what is ready, in turn)")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Minute, "upper bound on each cell's processing `time`")
	fs.StringVar(&f.dir, "dir", "", "parent `directory` of the temp dir holding SQLite files (default the system temp dir)")
	fs.StringVar(&f.profiles, "cpuprofile", "", "write a CPU profile of each cell's processing (this process: the engine and the store driver) into `dir`")
	table := tableFlag(fs)
	if code, ok := parseFlags(stdout, fs, args); !ok {
		return code
	}
	f.table = *table
	f.shapes = splitList(*shapes)
	for _, s := range f.shapes {
		if s != shapeHot && s != shapeSpread {
			fmt.Fprintf(stderr, "hookledger-bench pipeline: --shapes: unknown shape %q (hot, spread)\n", s)
			return exitUsage
		}
	}
	var err error
	if f.drivers, err = chooseTargets(*drivers, []string{"sqlite"}, []string{"sqlite", "postgres"}, f.postgres); err != nil {
		fmt.Fprintf(stderr, "hookledger-bench pipeline: --drivers: %v\n", err)
		return exitUsage
	}
	if f.mode != modeLoop && f.mode != modeDrain {
		fmt.Fprintf(stderr, "hookledger-bench pipeline: --mode: unknown mode %q (loop, drain)\n", f.mode)
		return exitUsage
	}
	if f.events < 1 || f.entities < 1 || f.group < 1 || f.workers < 1 || f.timeout <= 0 {
		fmt.Fprintln(stderr, "hookledger-bench pipeline: --events, --entities, --group, --workers and --timeout must be positive")
		return exitUsage
	}
	return benchExit(stderr, "pipeline")(pipelineBench(ctx, stdout, stderr, &f))
}

// pipelineConfig is the flow under test: one revision-mode flow with one
// effect per applied event, as docs/flows.md describes. The destination is
// never called here (no delivery worker runs); it only has to exist.
func pipelineConfig(storeURL string) (*config.Config, error) {
	yaml := fmt.Sprintf(`store: %q
sources:
  - name: %s
    kind: hmac
    secrets: ["bench-secret-not-used-for-signing"]
    hmac: {header: X-Signature, prefix: "sha256="}
destinations:
  - name: sink
    base_url: http://127.0.0.1:9
    allow_private_networks: true          # never called; kept like the other loopback benches
flows:
  - name: %s
    source: %s
    events: ["order.*"]
    entity: event.order_id
    version:
      mode: revision
      revision: event.revision
    state: '{"status": event.status, "total": event.total.amount}'
    effects:
      - name: %s
        destination: sink
        request:
          path: '"/orders/" + entity'
          body: '{"order": entity, "revision": version, "status": state.status}'
`, storeURL, pipelineSource, pipelineFlow, pipelineSource, pipelineEffect)
	cfg, err := config.Parse("pipeline.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, fmt.Errorf("pipeline config: %w", err)
	}
	return cfg, nil
}

// pipelineResult is one driver × shape cell.
type pipelineResult struct {
	driver   string
	shape    string
	events   int
	entities int

	commitElapsed time.Duration // preload through InboxCommit
	elapsed       time.Duration // Drain, until no work is pending
	timing        *timedPipeline
	pg            *pgStatement // PostgreSQL's work while processing, when counted

	// The correctness account.
	pending      int64
	effects      int
	effectStates map[store.EffectState]int
	projOK       int
	projBad      int
	firstBad     string
}

func (r *pipelineResult) commitRate() float64 { return rate(int64(r.events), r.commitElapsed) }
func (r *pipelineResult) rate() float64       { return rate(r.timing.applied.Load(), r.elapsed) }

func (r *pipelineResult) ok() bool {
	return r.pending == 0 && r.effects == r.events && r.projBad == 0 && r.projOK == r.entities &&
		r.timing.applied.Load() == int64(r.events)
}

func pipelineBench(ctx context.Context, stdout, stderr io.Writer, f *pipelineFlags) (bool, error) {
	dir, err := os.MkdirTemp(f.dir, "hookledger-bench-pipeline-")
	if err != nil {
		return false, fmt.Errorf("make temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	if f.profiles != "" {
		if err := os.MkdirAll(f.profiles, 0o750); err != nil {
			return false, fmt.Errorf("--cpuprofile: %w", err)
		}
	}
	if slices.Contains(f.drivers, "postgres") {
		if f.pgStatements, err = pgEnableStatements(ctx, f.postgres); err != nil {
			return false, err
		}
	}
	var results []*pipelineResult
	for _, driver := range f.drivers {
		for _, shape := range f.shapes {
			if err := ctx.Err(); err != nil {
				return false, fmt.Errorf("interrupted: %w", err)
			}
			label := driver + "-" + shape
			fmt.Fprintf(stderr, "cell %s: preload %d events, then process...\n", label, f.events)
			res, err := pipelineCell(ctx, f, dir, driver, shape, label)
			if err != nil {
				return false, fmt.Errorf("cell %s: %w", label, err)
			}
			fmt.Fprintf(stderr, "cell %s: %.0f events/s processed in %s (InboxCommit %.0f events/s), effects %d, projections ok %d/%d\n",
				label, res.rate(), res.elapsed.Round(time.Millisecond), res.commitRate(), res.effects, res.projOK, res.entities)
			results = append(results, res)
		}
	}
	ok := printPipeline(stdout, f, results)
	if f.table {
		printHeadlines(stdout, "pipeline", pipelineHeadlines(results))
	}
	return ok, nil
}

// pipelineGoals are the product's goals for PostgreSQL, in events/s with
// the default 64 workers, per shape (docs/benchmarks-history.md,
// "PostgreSQL at scale"): SQLite, one process on one file, has none of
// its own.
var pipelineGoals = map[string]float64{shapeHot: 800, shapeSpread: 1500}

// pipelineHeadlines are each cell's events/s beside the InboxCommit rate
// of the same events, and the correctness account.
func pipelineHeadlines(results []*pipelineResult) []headline {
	var rows []headline
	allOK := true
	for _, r := range results {
		allOK = allOK && r.ok()
		what := "one hot entity"
		if r.shape == shapeSpread {
			what = fmt.Sprintf("spread over %s entities", num(float64(r.entities)))
		}
		h := headline{
			figure:   fmt.Sprintf("%s, %s", driverName(r.driver), what),
			value:    fmt.Sprintf("%s events/s", num(r.rate())),
			baseline: fmt.Sprintf("InboxCommit of the same events %s/s", num(r.commitRate())),
			ratio:    ratioOf(r.rate(), r.commitRate()) + " of InboxCommit",
		}
		if g, ok := pipelineGoals[r.shape]; ok && r.driver == "postgres" {
			h.goal = fmt.Sprintf(">= %s events/s: %s", num(g), verdict(r.rate() >= g))
		}
		rows = append(rows, h)
	}
	check := "every event settled, one effect each, every projection at its newest revision"
	if !allOK {
		check = "FAILED in some cell (see the report)"
	}
	return append(rows, headline{figure: "correctness", value: check, goal: verdict(allOK)})
}

// pipelineEvent returns event i of a cell: its entity and revision. Events
// are generated in revision order per entity, as a sender emits them.
func pipelineEvent(shape string, entities, i int) (entity string, revision int) {
	if shape == shapeHot {
		return "ord-hot", i + 1
	}
	return fmt.Sprintf("ord-%06d", i%entities), i/entities + 1
}

func pipelineCell(ctx context.Context, f *pipelineFlags, dir, driver, shape, label string) (res *pipelineResult, err error) {
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
	cfg, err := pipelineConfig(cs.URL)
	if err != nil {
		return nil, err
	}
	entities := min(f.entities, f.events)
	if shape == shapeHot {
		entities = 1
	}
	res = &pipelineResult{driver: driver, shape: shape, events: f.events, entities: entities}

	// Preload: the bodies are built before the clock starts, so the
	// baseline is the store's commit rate and not JSON formatting.
	subs := make([]*store.Submission, f.events)
	now := time.Now()
	for i := range subs {
		entity, rev := pipelineEvent(shape, entities, i)
		id := fmt.Sprintf("evt_%s_%d", label, i)
		subs[i] = &store.Submission{Deliveries: []*store.DeliveryInput{{
			RequestID:  fmt.Sprintf("req_%s_%d", label, i),
			Source:     pipelineSource,
			EventID:    id,
			Type:       "order.updated",
			Entity:     entity,
			OccurredAt: now.Truncate(time.Second),
			ReceivedAt: now,
			Headers:    map[string]string{"Content-Type": "application/json"},
			Body:       orderBody(id, entity, rev, now),
		}}}
	}
	t0 := time.Now()
	for start := 0; start < len(subs); start += f.group {
		batch := subs[start:min(start+f.group, len(subs))]
		out, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: batch})
		if err != nil {
			return nil, fmt.Errorf("preload: %w", err)
		}
		for _, o := range out {
			if o.Err != nil {
				return nil, fmt.Errorf("preload: %w", o.Err)
			}
		}
	}
	res.commitElapsed = time.Since(t0)

	res.timing = &timedPipeline{Pipeline: st}
	engine := flow.New(cfg, res.timing, flow.Options{Workers: f.workers, Owner: "bench"})
	// pg_stat_statements counts as each statement ends, so the counters
	// read just before and just after processing hold its work alone.
	var stats *pgStats
	var base pgCounters
	if driver == "postgres" && f.pgStatements {
		if stats, err = newPGStats(ctx, f.postgres, cs.URL, true); err != nil {
			return nil, err
		}
		if base, err = stats.read(ctx); err != nil {
			return nil, err
		}
	}
	var profile string
	if f.profiles != "" {
		profile = filepath.Join(f.profiles, label+".pprof")
	}
	stopProfile, err := startCPUProfile(profile)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, f.timeout)
	t0 = time.Now()
	derr := runEngine(dctx, st, engine, f.mode, res.timing, int64(f.events))
	res.elapsed = time.Since(t0)
	cancel()
	if err := stopProfile(); err != nil {
		return nil, err
	}
	if derr != nil {
		return nil, fmt.Errorf("process after %s: %w", res.elapsed.Round(time.Millisecond), derr)
	}
	if stats != nil {
		end, err := stats.read(ctx)
		if err != nil {
			return nil, err
		}
		work, _ := end.delta(base)
		res.pg = &work
	}
	if err := pipelineAccount(ctx, st, res); err != nil {
		return nil, err
	}
	return res, nil
}

// runEngine processes the preloaded inbox: in drain mode until a Step
// finds nothing; in loop mode until every event is settled (the counter
// is read every millisecond, which costs the store nothing), then stops
// the loop; the table statistics keeper runs beside it, as in serve. The account afterwards checks that nothing is left pending.
func runEngine(ctx context.Context, st store.Store, engine *flow.Engine, mode string, timing *timedPipeline, events int64) error {
	if mode == modeDrain {
		return engine.Drain(ctx)
	}
	if err := engine.Start(ctx); err != nil {
		return err
	}
	if stats := server.NewStatsKeeper(st, slog.New(slog.DiscardHandler), clock.Real{}); stats != nil {
		if err := stats.Start(ctx); err != nil {
			return err
		}
		defer func() { _ = stats.Stop(context.WithoutCancel(ctx)) }()
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	var err error
	for timing.applied.Load() < events && err == nil {
		select {
		case <-ctx.Done():
			err = fmt.Errorf("%d of %d events settled: %w", timing.applied.Load(), events, ctx.Err())
		case <-tick.C:
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return errors.Join(err, engine.Stop(sctx))
}

// pipelineAccount checks the outcome through the store contract: nothing
// pending, one effect row per event, and every entity's projection at the
// newest revision it was sent.
func pipelineAccount(ctx context.Context, st store.Store, res *pipelineResult) error {
	var err error
	if res.pending, err = st.WorkCount(ctx); err != nil {
		return fmt.Errorf("count pending work: %w", err)
	}
	res.effectStates = map[store.EffectState]int{}
	var after int64
	for {
		page, err := st.EffectList(ctx, &store.EffectListParams{Flow: pipelineFlow, AfterID: after, Limit: 1000})
		if err != nil {
			return fmt.Errorf("list effects: %w", err)
		}
		for _, e := range page {
			res.effects++
			res.effectStates[e.State]++
			after = e.ID
		}
		if len(page) < 1000 {
			break
		}
	}
	newest := map[string]int{}
	for i := range res.events {
		entity, rev := pipelineEvent(res.shape, res.entities, i)
		newest[entity] = max(newest[entity], rev)
	}
	for entity, rev := range newest {
		p, err := st.ProjectionGet(ctx, &store.ProjectionGetParams{Flow: pipelineFlow, Entity: entity})
		if err != nil {
			return fmt.Errorf("projection of %s: %w", entity, err)
		}
		want := fmt.Sprintf("r%d", rev)
		if p != nil && p.Version == want && p.Pending == 0 {
			res.projOK++
			continue
		}
		res.projBad++
		if res.firstBad == "" {
			got := "none"
			if p != nil {
				got = fmt.Sprintf("%s, pending %d", p.Version, p.Pending)
			}
			res.firstBad = fmt.Sprintf("%s: projection %s, want %s", entity, got, want)
		}
	}
	return nil
}

// timedPipeline passes every call to the store and adds up the time spent
// in each kind of call and the dispositions applied, so the figure can be
// split into routing and settling without a second run.
type timedPipeline struct {
	store.Pipeline

	route, list, claim, apply atomic.Int64 // nanoseconds, summed over goroutines
	routed, applied, effects  atomic.Int64
	mu                        sync.Mutex
	dispositions              map[store.Disposition]int
}

func (t *timedPipeline) EventListUnrouted(ctx context.Context, p *store.EventListUnroutedParams) ([]*store.RoutableEvent, error) {
	defer addSince(&t.route, time.Now())
	return t.Pipeline.EventListUnrouted(ctx, p)
}

func (t *timedPipeline) EventRoute(ctx context.Context, p *store.EventRouteParams) error {
	defer addSince(&t.route, time.Now())
	err := t.Pipeline.EventRoute(ctx, p)
	if err == nil {
		t.routed.Add(int64(len(p.Decisions)))
	}
	return err
}

// EventRouteNext counts the store's time only: the engine's decisions,
// made inside the call, are left out.
func (t *timedPipeline) EventRouteNext(ctx context.Context, p *store.EventRouteNextParams) (store.RoutedPage, error) {
	t0 := time.Now()
	var deciding time.Duration
	inner := *p
	inner.Decide = func(evs []*store.RoutableEvent) []*store.RouteDecision {
		d0 := time.Now()
		defer func() { deciding += time.Since(d0) }()
		return p.Decide(evs)
	}
	page, err := t.Pipeline.EventRouteNext(ctx, &inner)
	t.route.Add(int64(time.Since(t0) - deciding))
	if err == nil {
		t.routed.Add(int64(page.Events))
	}
	return page, err
}

func (t *timedPipeline) EntityClaim(ctx context.Context, p *store.EntityClaimParams) ([]*store.Lease, error) {
	defer addSince(&t.claim, time.Now())
	return t.Pipeline.EntityClaim(ctx, p)
}

func (t *timedPipeline) WorkListPending(ctx context.Context, p *store.WorkListPendingParams) ([]*store.WorkItem, error) {
	defer addSince(&t.list, time.Now())
	return t.Pipeline.WorkListPending(ctx, p)
}

func (t *timedPipeline) WorkListPendingGroup(ctx context.Context, ps []*store.WorkListPendingParams) ([][]*store.WorkItem, error) {
	defer addSince(&t.list, time.Now())
	return t.Pipeline.WorkListPendingGroup(ctx, ps)
}

func (t *timedPipeline) FlowApply(ctx context.Context, p *store.FlowApplyParams) (*store.FlowApplyResult, error) {
	defer addSince(&t.apply, time.Now())
	res, err := t.Pipeline.FlowApply(ctx, p)
	if err == nil {
		t.count(res)
	}
	return res, err
}

func (t *timedPipeline) FlowApplyBatch(ctx context.Context, ps []*store.FlowApplyParams) ([]*store.FlowApplyResult, error) {
	defer addSince(&t.apply, time.Now())
	out, err := t.Pipeline.FlowApplyBatch(ctx, ps)
	if err == nil {
		for _, res := range out {
			t.count(res)
		}
	}
	return out, err
}

func (t *timedPipeline) FlowApplyGroup(ctx context.Context, subs [][]*store.FlowApplyParams) []store.FlowApplyOutcome {
	defer addSince(&t.apply, time.Now())
	outs := t.Pipeline.FlowApplyGroup(ctx, subs)
	for _, o := range outs {
		if o.Err == nil {
			for _, res := range o.Results {
				t.count(res)
			}
		}
	}
	return outs
}

func (t *timedPipeline) count(res *store.FlowApplyResult) {
	t.applied.Add(1)
	t.effects.Add(int64(res.EffectsInserted))
	t.mu.Lock()
	if t.dispositions == nil {
		t.dispositions = map[store.Disposition]int{}
	}
	t.dispositions[res.Disposition]++
	t.mu.Unlock()
}

func addSince(sum *atomic.Int64, t0 time.Time) { sum.Add(int64(time.Since(t0))) }

func seconds(ns int64) string { return fmt.Sprintf("%.2f", time.Duration(ns).Seconds()) }

func printPipeline(w io.Writer, f *pipelineFlags, results []*pipelineResult) bool {
	fmt.Fprintf(w, "hookledger-bench pipeline: %d order events (~%d B) per cell, flow engine in-process with %d workers, mode %s; %d CPUs (GOMAXPROCS %d)\n",
		f.events, len(orderBody("evt_x", "ord-x", 1, time.Now())), f.workers, f.mode, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(w, "revision-mode flow, one effect per applied event; preload through InboxCommit in groups of %d\n\n", f.group)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "driver\tshape\tentities\tevents/s\tseconds\tInboxCommit events/s\tvs InboxCommit\troute s\tclaim s\tlist s\tapply s\teffects\tpending\tprojections ok\t")
	allOK := true
	for _, r := range results {
		vs := "-"
		if c := r.commitRate(); c > 0 {
			vs = fmt.Sprintf("%.2f", r.rate()/c)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.2f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d/%d\t\n",
			r.driver, r.shape, r.entities, r.rate(), r.elapsed.Seconds(), r.commitRate(), vs,
			seconds(r.timing.route.Load()), seconds(r.timing.claim.Load()), seconds(r.timing.list.Load()), seconds(r.timing.apply.Load()),
			r.effects, r.pending, r.projOK, r.entities)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, r := range results {
		verdict := "ok"
		if !r.ok() {
			verdict = "FAILED"
			allOK = false
		}
		fmt.Fprintf(w, "%s-%s: %s: settled %d/%d, dispositions %v, effects %d (want %d) by state %v, pending %d, projections at the newest revision %d/%d",
			r.driver, r.shape, verdict, r.timing.applied.Load(), r.events, r.timing.dispositions, r.effects, r.events, r.effectStates, r.pending, r.projOK, r.entities)
		if r.firstBad != "" {
			fmt.Fprintf(w, "; first mismatch %s", r.firstBad)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "events/s: work items settled (FlowApply, FlowApplyBatch, FlowApplyGroup) per second of processing, routing included, from preloaded inbox to empty work queue.")
	fmt.Fprintln(w, "InboxCommit events/s: the same events written to the inbox in this run (the baseline); vs = events/s over it.")
	fmt.Fprintln(w, "route/claim/list/apply s: store time per kind of call, summed over workers (can exceed the wall time).")
	printPipelinePG(w, results)
	if allOK {
		fmt.Fprintln(w, "correctness: every cell settled every event, one effect per event, every projection at its newest revision")
	} else {
		fmt.Fprintln(w, "correctness: FAILED (see above)")
	}
	return allOK
}

// printPipelinePG prints what PostgreSQL did per event while the cells
// processed, where pg_stat_statements counted it.
func printPipelinePG(w io.Writer, results []*pipelineResult) {
	var pgs []*pipelineResult
	for _, r := range results {
		if r.pg != nil {
			pgs = append(pgs, r)
		}
	}
	if len(pgs) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "PostgreSQL work per event while processing (pg_stat_statements, the cell's database only):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "driver\tshape\tstatements/event\trows/event\tWAL B/event\tbuffers/event\t")
	for _, r := range pgs {
		per := func(n int64) float64 { return float64(n) / float64(r.events) }
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.1f\t%.0f\t%.0f\t\n", r.driver, r.shape,
			per(r.pg.calls), per(r.pg.rows), per(r.pg.walBytes), per(r.pg.buffers))
	}
	tw.Flush()
	fmt.Fprintln(w, "statements: top-level calls, the statistics keeper's ANALYZE included; rows returned or changed; WAL bytes written;")
	fmt.Fprintln(w, "  shared buffers read (hit or read in). Counts of work that do not move with the machine's load, unlike events/s.")
}
