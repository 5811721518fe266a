package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgFloor is the same-run baseline of a webhook's PostgreSQL CPU: what
// the target database's backend spends on one round trip (a SELECT of its parameter) and
// on one commit of a one-row insert, each sent alone at the run's send
// rate over one connection once the servers have stopped. A backend
// that is woken for every round trip runs cold: at a light load one
// costs it several times what it costs a busy backend, whatever the
// statement. Beside the webhook's own CPU this says how much of it
// round trips and commits alone would take, which no count of rows or
// statements shows (docs/benchmarks-history.md, "Run AH").
type pgFloor struct {
	rate              float64       // the sends per second it was paced at
	calls             int           // measured calls of each kind
	roundTrip, commit time.Duration // the backend's CPU per call
}

// floorFigure formats one of the floor's figures in microseconds, "-"
// where it was not measured.
func (c *pgCost) floorFigure(of func(*pgFloor) time.Duration) string {
	if c.floor == nil {
		return "-"
	}
	return fmt.Sprintf("%.0f", float64(of(c.floor))/float64(time.Microsecond))
}

// errNotLocal says PostgreSQL runs on another machine: its backends'
// CPU cannot be read from this one's /proc.
var errNotLocal = errors.New("PostgreSQL does not run on this machine")

// measurePGFloor paces the floor's calls at rate for window each, on one
// connection to storeURL's database, in a table of its own that it drops
// after.
func measurePGFloor(ctx context.Context, storeURL string, rate float64, window time.Duration) (*pgFloor, error) {
	conn, err := pgx.Connect(ctx, singleConnURL(storeURL))
	if err != nil {
		return nil, fmt.Errorf("postgres floor: %w", err)
	}
	defer conn.Close(ctx)
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return nil, fmt.Errorf("postgres floor: %w", err)
	}
	if _, err := readSchedCPU(pid); err != nil {
		return nil, errNotLocal
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE hookledger_bench_floor (id bigserial PRIMARY KEY, v int NOT NULL)"); err != nil {
		return nil, fmt.Errorf("postgres floor: %w", err)
	}
	// The database is the target's and is dropped with it: a failed drop
	// leaves nothing behind.
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), "DROP TABLE IF EXISTS hookledger_bench_floor") }()
	f := &pgFloor{rate: rate, calls: max(int(rate*window.Seconds()), 1)}
	cpu := func() (time.Duration, error) { return readSchedCPU(pid) }
	if f.roundTrip, err = floorCPU(ctx, conn, cpu, floorSelectSQL, rate, f.calls); err != nil {
		return nil, err
	}
	if f.commit, err = floorCPU(ctx, conn, cpu, floorInsertSQL, rate, f.calls); err != nil {
		return nil, err
	}
	return f, nil
}

// The floor's statements take a parameter, as the server's do: pgx sends
// a statement without arguments by the simple protocol, which parses and
// plans it at every call, where one with arguments is prepared once per
// connection and then only bound and run.
const (
	floorSelectSQL = "SELECT $1::int"                                     // a round trip
	floorInsertSQL = "INSERT INTO hookledger_bench_floor (v) VALUES ($1)" // a one-row commit
)

// floorCPU sends sql n times at rate per second, after a tenth as many
// (at least five) to warm the connection's statement up, and answers the
// backend's CPU (cpu, read before and after the measured calls) per
// measured call.
func floorCPU(ctx context.Context, conn *pgx.Conn, cpu func() (time.Duration, error), sql string, rate float64, n int) (time.Duration, error) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	warm := max(n/10, 5)
	var start time.Duration
	for i := range warm + n {
		if i == warm {
			var err error
			if start, err = cpu(); err != nil {
				return 0, fmt.Errorf("postgres floor: %w", err)
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-tick.C:
		}
		if _, err := conn.Exec(ctx, sql, 1); err != nil {
			return 0, fmt.Errorf("postgres floor: %s: %w", sql, err)
		}
	}
	end, err := cpu()
	if err != nil {
		return 0, fmt.Errorf("postgres floor: %w", err)
	}
	return (end - start) / time.Duration(n), nil
}

// readSchedCPU is a process's CPU time in nanoseconds, from the first
// field of /proc/PID/schedstat: /proc/PID/stat counts in ticks of 10 ms,
// too coarse for a few seconds of a backend that mostly sleeps.
func readSchedCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", pid))
	if err != nil {
		return 0, fmt.Errorf("read CPU time: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("read CPU time: empty /proc/%d/schedstat", pid)
	}
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read CPU time: /proc/%d/schedstat: %w", pid, err)
	}
	return time.Duration(ns), nil
}
