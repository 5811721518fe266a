package sim

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver/delivertest"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/postgres"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

var (
	flagSeeds   = flag.Int("seeds", 0, "how many seeds TestSimulation runs on SQLite (default 300, 12 under -race; CI runs 10,000)")
	flagPGSeeds = flag.Int("pg-seeds", 0, "how many seeds TestSimulationPostgres runs (default 50, 10 under -race)")
	flagSeed    = flag.Int64("seed", -1, "run only this seed, printing its whole schedule")
	flagBase    = flag.Uint64("seed-base", 1, "first seed of the range; change it to explore other schedules")
)

// backend opens a fresh, migrated, empty store for each seed of one
// goroutine (slot); done releases it.
type backend struct {
	name  string
	rerun string // the go test command that reruns one seed (%d)
	open  func(ctx context.Context, t *testing.T, sl *slot) (st simStore, done func(), err error)
	// faults is set when the backend's stores fail statements on demand.
	faults bool
}

// slot is what one goroutine's seeds share, one seed after another: the
// loopback source API and destination (each serving the current run),
// keep-alive clients for them, and the store fault hook.
type slot struct {
	id     int
	api    *apiServer
	apiURL string
	hc     *http.Client // refetches
	dest   *delivertest.Server
	dc     *http.Client // delivery calls
	faults *faultSwitch // nil when the backend cannot inject faults
	// cfg is parsed once per variant (with orders_open or without): it is
	// the same for every seed of the slot, parsing compiles every
	// expression of it, and nothing changes it.
	cfg map[bool]*config.Config
}

func (sl *slot) config(open bool) (*config.Config, error) {
	if sl.cfg[open] == nil {
		cfg, err := config.Parse("sim.yaml", []byte(simConfig(sl.apiURL, sl.dest.URL, open)), func(string) (string, bool) { return "", false })
		if err != nil {
			return nil, fmt.Errorf("simulation config: %w", err)
		}
		if sl.cfg == nil {
			sl.cfg = map[bool]*config.Config{}
		}
		sl.cfg[open] = cfg
	}
	return sl.cfg[open], nil
}

// TestSimulation runs seeded schedules against SQLite.
func TestSimulation(t *testing.T) {
	dir := t.TempDir()
	// tmpfs keeps thousands of short-lived databases off the disk.
	if shm, err := os.MkdirTemp("/dev/shm", "hookledger-sim-"); err == nil {
		dir = shm
		t.Cleanup(func() { os.RemoveAll(shm) })
	}
	// Migrating costs more than a small seed's whole run, so every seed
	// starts from a copy of one migrated, closed (fully checkpointed) file.
	tmpl := filepath.Join(dir, "template.db")
	st, err := sqlite.OpenWithOptions(t.Context(), tmpl, sqlite.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	migrated, err := os.ReadFile(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	b := backend{
		name:   "sqlite",
		rerun:  "go test ./internal/sim -run 'TestSimulation$' -seed=%d -v",
		faults: true,
		open: func(ctx context.Context, t *testing.T, sl *slot) (simStore, func(), error) {
			path := filepath.Join(dir, fmt.Sprintf("slot%d.db", sl.id))
			remove := func() {
				for _, suffix := range []string{"", "-wal", "-shm"} {
					os.Remove(path + suffix)
				}
			}
			remove()
			if err := os.WriteFile(path, migrated, 0o600); err != nil {
				return nil, nil, err
			}
			st, err := sqlite.OpenWithOptions(ctx, path, sqlite.Options{NoSync: true, Faults: sl.faults.fault})
			if err != nil {
				return nil, nil, err
			}
			return st, func() { st.Close(); remove() }, nil
		},
	}
	n := *flagSeeds
	if n <= 0 {
		// Enough to catch regressions in an ordinary `go test ./...` while
		// keeping it quick; scripts/test.sh runs the full 10,000.
		n = 300
		if raceEnabled {
			n = 12
		}
	}
	runSeeds(t, b, n)
}

// TestSimulationPostgres runs fewer seeds against PostgreSQL: one database
// per goroutine, emptied between seeds.
func TestSimulationPostgres(t *testing.T) {
	pgtest.ServerURL(t)
	// Databases are made here, on the test goroutine, because a failure
	// to make one must stop the test (t.Fatal) there.
	var stores []*postgres.Store
	for range runtime.GOMAXPROCS(0) {
		st, err := postgres.Open(t.Context(), pgtest.NewDatabase(t), 8)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if _, err := st.Migrate(t.Context()); err != nil {
			t.Fatal(err)
		}
		stores = append(stores, st)
	}
	b := backend{
		name:  "postgres",
		rerun: pgtest.EnvVar + "=<admin URL> go test ./internal/sim -run 'TestSimulationPostgres$' -seed=%d -v",
		open: func(ctx context.Context, _ *testing.T, sl *slot) (simStore, func(), error) {
			st := stores[sl.id]
			if err := truncate(ctx, st); err != nil {
				return nil, nil, err
			}
			return st, func() {}, nil
		},
	}
	n := *flagPGSeeds
	if n <= 0 {
		n = 50
		if raceEnabled {
			n = 10
		}
	}
	runSeeds(t, b, n)
}

// truncate empties every table but the migration record, restarting the
// identities so that a seed sees the same ids whichever seed ran before.
func truncate(ctx context.Context, st *postgres.Store) error {
	rows, err := st.Pool().Query(ctx, `SELECT quote_ident(tablename) FROM pg_tables
		WHERE schemaname = current_schema() AND tablename <> 'schema_migrations'`)
	if err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	var tables []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("list tables: %w", err)
		}
		tables = append(tables, name)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("list tables: %w", err)
	}
	if _, err := st.Pool().Exec(ctx, "TRUNCATE "+strings.Join(tables, ", ")+" RESTART IDENTITY CASCADE"); err != nil {
		return fmt.Errorf("truncate: %w", err)
	}
	return nil
}

// runSeeds runs n seeds (or only -seed) on as many goroutines as there are
// CPUs, each with its own store and its own loopback source API.
func runSeeds(t *testing.T, b backend, n int) {
	var seeds []uint64
	if *flagSeed >= 0 {
		seeds = []uint64{uint64(*flagSeed)}
	} else {
		for i := range n {
			seeds = append(seeds, *flagBase+uint64(i))
		}
	}
	slots := min(runtime.GOMAXPROCS(0), len(seeds))
	ctx := t.Context()
	todo := make(chan uint64)
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		failures int
		failed   []string // each failing seed's first violations
		total    stats
	)
	start := time.Now()
	for id := range slots {
		sl := &slot{id: id, api: &apiServer{}}
		srv := httptest.NewServer(sl.api)
		t.Cleanup(srv.Close)
		sl.apiURL = srv.URL
		sl.dest = delivertest.New(delivertest.Options{})
		t.Cleanup(sl.dest.Close)
		// Keep-alive connections to the loopback API and destination are
		// reused across seeds instead of leaving thousands of sockets in
		// TIME_WAIT.
		sl.hc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
		sl.dc = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
		t.Cleanup(sl.hc.CloseIdleConnections)
		t.Cleanup(sl.dc.CloseIdleConnections)
		if b.faults {
			sl.faults = &faultSwitch{}
		}
		wg.Go(func() {
			for seed := range todo {
				r, err := runOne(ctx, t, b, sl, seed)
				var errs, trace []string
				if r != nil {
					errs, trace = r.errs, r.trace
					mu.Lock()
					total.add(&r.stats)
					mu.Unlock()
				}
				if err == nil && len(errs) == 0 {
					if len(seeds) == 1 && testing.Verbose() {
						t.Logf("seed %d schedule:\n%s", seed, strings.Join(trace, "\n"))
					}
					continue
				}
				if err != nil {
					errs = append(errs, err.Error())
				}
				mu.Lock()
				failures++
				failed = append(failed, fmt.Sprintf("seed %d: %s", seed, strings.Join(errs[:min(len(errs), 3)], "; ")))
				mu.Unlock()
				report(t, b, seed, errs, trace)
			}
		})
	}
	for _, s := range seeds {
		mu.Lock()
		stop := failures >= 5
		mu.Unlock()
		if stop || ctx.Err() != nil {
			break
		}
		todo <- s
	}
	close(todo)
	wg.Wait()
	el := time.Since(start)
	t.Logf("%s: %d seeds from %d in %s on %d goroutines (%.1f seeds/s, %.1f ms/seed/goroutine)",
		b.name, len(seeds), seeds[0], el.Round(time.Millisecond), slots,
		float64(len(seeds))/el.Seconds(), el.Seconds()*1000*float64(slots)/float64(len(seeds)))
	t.Logf("%s: exercised %d events, %d deliveries, %d zombie writes refused, %d replays, %d lease-expiring clock jumps during steps, %d refetch 503s; settled %v",
		b.name, total.events, total.deliveries, total.zombies, total.replays, total.jumps, total.refetch503, total.settled)
	t.Logf("%s: delivery: destination answers %v, %d replayed from a saved key, %d lookups, %d hangs; %d claims, %d resumed, %d abandoned (counted by an attempts row), "+
		"%d lookups made after an unknown outcome in the same claim (no attempts row); %d zombie settles refused; %d notifications; effects ended %v",
		b.name, total.faults, total.replayed, total.lookups, total.hangs, total.claims, total.resumed, total.lost,
		total.unrowedLookups, total.dzombies, total.notified, total.effects)
	t.Logf("%s: hostile events by field=value:outcome: %v", b.name, total.hostile)
	t.Logf("%s: %d versions applied again, %d existing episode keys inserted again; %d store faults injected in %d seeds: %v",
		b.name, total.reappliedVersions, total.reinserted, total.storeFaults, total.storeFaultSeeds, total.storeFaultKinds)
	// Last, so that a log cut to its tail still names what failed.
	for _, f := range failed {
		t.Errorf("%s: %s", b.name, f)
	}
}

func runOne(ctx context.Context, t *testing.T, b backend, sl *slot, seed uint64) (*run, error) {
	st, done, err := b.open(ctx, t, sl)
	if err != nil {
		return nil, fmt.Errorf("open %s store: %w", b.name, err)
	}
	defer done()
	r, err := newRun(ctx, seed, st, sl)
	if err != nil {
		return nil, err
	}
	r.execute()
	return r, nil
}

// report prints a failing seed's violations, the end of its schedule and
// the command that reruns it alone.
func report(t *testing.T, b backend, seed uint64, errs, trace []string) {
	const maxTrace = 80
	var sb strings.Builder
	fmt.Fprintf(&sb, "seed %d (%s): %d invariant violations\n", seed, b.name, len(errs))
	violations(&sb, errs)
	if len(trace) > maxTrace {
		fmt.Fprintf(&sb, "schedule (last %d of %d ops):\n", maxTrace, len(trace))
		trace = trace[len(trace)-maxTrace:]
	} else {
		fmt.Fprintf(&sb, "schedule:\n")
	}
	for _, l := range trace {
		fmt.Fprintf(&sb, "  %s\n", l)
	}
	// The violations again, last: a log that keeps only its tail (a CI
	// summary) still says what failed, not only the schedule.
	fmt.Fprintf(&sb, "seed %d (%s) violated:\n", seed, b.name)
	violations(&sb, errs)
	fmt.Fprintf(&sb, "rerun this seed alone: "+b.rerun, seed)
	t.Error(sb.String())
}

// violations lists at most 20 of a seed's violations.
func violations(sb *strings.Builder, errs []string) {
	const maxErrs = 20
	for i, e := range errs {
		if i == maxErrs {
			fmt.Fprintf(sb, "  ... and %d more\n", len(errs)-maxErrs)
			break
		}
		fmt.Fprintf(sb, "  - %s\n", e)
	}
}
