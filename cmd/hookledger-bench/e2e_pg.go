package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// pgCost is what a PostgreSQL target asked of the database while the
// webhooks were sent and drained, read from the server's own statistics for
// the target's database alone (each target has a fresh one).
type pgCost struct {
	// idleCommits and idleStatements are per second while the servers
	// idled before sending: polling, not work.
	idleCommits, idleStatements float64

	commits, rollbacks int64       // pg_stat_database xact_commit, xact_rollback
	counted            bool        // pg_stat_statements is loaded: work, txControl and top hold
	work               pgStatement // the sums over the run's statements (calls: the statements)
	txControl          int64       // of which BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE
	events             int64       // acknowledged webhooks
	top                []pgStatement
	tables             []pgTable // the run's row versions by table, most first
	floor              *pgFloor  // nil: not measured (--pg-floor 0, or PostgreSQL elsewhere)
}

// pgTable is what the run wrote into one table: the row versions that
// cost PostgreSQL's executor most of its time per webhook. An insert, and
// an update that is not HOT, each add an entry to every index of the
// table whose predicate the new version meets; a HOT update adds none
// (it changed no indexed column, and the page had room). Index buffers
// are the index pages the statements touched, scans included.
type pgTable struct {
	name                      string
	indexes                   int64
	ins, upd, hot, del        int64 // n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
	heapBuffers, indexBuffers int64 // pg_statio_user_tables, hit or read
}

// versions is the new row versions and removals the table took.
func (t pgTable) versions() int64 { return t.ins + t.upd + t.del }

// pgStatement is one normalized statement's calls over the run, with the
// rows it returned or changed, the WAL it wrote and the shared buffers it
// read (hit or read in). Unlike times, these do not change with the
// machine's load, so they compare runs on a busy machine.
type pgStatement struct {
	calls, rows, walBytes, buffers int64
	// ms is the time PostgreSQL spent planning and executing the calls:
	// unlike the counts it moves with the machine's load, but beside the
	// backends' CPU it shows how much of that CPU the statements
	// themselves are, and how much the rest (commits, the protocol,
	// waking up).
	ms    float64
	query string
}

func (c *pgCost) perEvent(n int64) float64 {
	if c.events == 0 {
		return 0
	}
	return float64(n) / float64(c.events)
}

// pgStats reads the counters of one database over an admin connection
// (the server's statistics are cluster-wide views filtered by database).
type pgStats struct {
	adminURL, db string
	storeURL     string // the target's own database: its tables' counters are read there
	statements   bool

	base pgCounters
}

type pgCounters struct {
	commits, rollbacks int64
	calls              map[int64]pgStatement // by queryid
	tables             map[string]pgTable
}

// pgEnableStatements reports whether pg_stat_statements is loaded on the
// server and, if so, makes its view available in the admin database.
// It can be counted only where the server preloads it
// (shared_preload_libraries); scripts/bench.sh starts its server so.
func pgEnableStatements(ctx context.Context, adminURL string) (bool, error) {
	conn, err := pgx.Connect(ctx, singleConnURL(adminURL))
	if err != nil {
		return false, fmt.Errorf("connect to postgres admin URL: %w", err)
	}
	defer conn.Close(ctx)
	var libs string
	if err := conn.QueryRow(ctx, "SELECT current_setting('shared_preload_libraries')").Scan(&libs); err != nil {
		return false, fmt.Errorf("read shared_preload_libraries: %w", err)
	}
	if !slices.Contains(splitList(libs), "pg_stat_statements") {
		return false, nil
	}
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return false, fmt.Errorf("create extension pg_stat_statements: %w", err)
	}
	return true, nil
}

func newPGStats(ctx context.Context, adminURL, storeURL string, statements bool) (*pgStats, error) {
	db, err := databaseOf(storeURL)
	if err != nil {
		return nil, err
	}
	return &pgStats{adminURL: adminURL, db: db, storeURL: storeURL, statements: statements}, nil
}

// idle waits for the servers' startup statistics to be flushed (a backend
// flushes at most once a second), takes the baseline, and measures the
// idle rate over the window after it.
func (s *pgStats) idle(ctx context.Context, window time.Duration) (*pgCost, error) {
	sleepCtx(ctx, 1500*time.Millisecond)
	a, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	sleepCtx(ctx, window)
	b, err := s.readWithTables(ctx)
	if err != nil {
		return nil, err
	}
	c := &pgCost{}
	c.idleCommits = float64(b.commits-a.commits) / window.Seconds()
	if s.statements {
		total, _ := b.delta(a)
		c.idleStatements = float64(total.calls) / window.Seconds()
	}
	s.base = b
	return c, ctx.Err()
}

// finish reads the counters after the servers stopped and fills c with
// the run's deltas over the baseline.
func (s *pgStats) finish(ctx context.Context, c *pgCost, events int64, top int) error {
	// A backend flushes its statistics as it exits, just after its
	// client has gone.
	sleepCtx(ctx, 500*time.Millisecond)
	end, err := s.readWithTables(ctx)
	if err != nil {
		return err
	}
	c.events = events
	c.commits = end.commits - s.base.commits
	c.rollbacks = end.rollbacks - s.base.rollbacks
	c.tables = end.tableDelta(s.base)
	if s.statements {
		var stmts []pgStatement
		c.counted = true
		c.work, stmts = end.delta(s.base)
		for _, st := range stmts {
			if isTxControl(st.query) {
				c.txControl += st.calls
			}
		}
		slices.SortFunc(stmts, func(a, b pgStatement) int { return cmp.Compare(b.calls, a.calls) })
		c.top = stmts[:min(top, len(stmts))]
	}
	return nil
}

// delta is the counters since base, in total and per statement.
func (c pgCounters) delta(base pgCounters) (pgStatement, []pgStatement) {
	var total pgStatement
	var out []pgStatement
	for id, st := range c.calls {
		b := base.calls[id]
		d := pgStatement{calls: st.calls - b.calls, rows: st.rows - b.rows, walBytes: st.walBytes - b.walBytes,
			buffers: st.buffers - b.buffers, ms: st.ms - b.ms, query: st.query}
		if d.calls > 0 {
			total.calls += d.calls
			total.rows += d.rows
			total.walBytes += d.walBytes
			total.buffers += d.buffers
			total.ms += d.ms
			out = append(out, d)
		}
	}
	return total, out
}

// tableDelta is each table's counters since base, the tables that took
// the most row versions first; tables the run did not write are left out.
func (c pgCounters) tableDelta(base pgCounters) []pgTable {
	var out []pgTable
	for name, t := range c.tables {
		b := base.tables[name]
		d := pgTable{name: name, indexes: t.indexes, ins: t.ins - b.ins, upd: t.upd - b.upd, hot: t.hot - b.hot,
			del: t.del - b.del, heapBuffers: t.heapBuffers - b.heapBuffers, indexBuffers: t.indexBuffers - b.indexBuffers}
		if d.versions() > 0 {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b pgTable) int {
		return cmp.Or(cmp.Compare(b.versions(), a.versions()), strings.Compare(a.name, b.name))
	})
	return out
}

func isTxControl(q string) bool {
	f := strings.Fields(strings.ToLower(q))
	if len(f) == 0 {
		return false
	}
	switch strings.TrimSuffix(f[0], ";") {
	case "begin", "commit", "rollback", "savepoint", "release", "start", "end":
		return true
	}
	return false
}

func (s *pgStats) read(ctx context.Context) (pgCounters, error) {
	out := pgCounters{calls: map[int64]pgStatement{}}
	conn, err := pgx.Connect(ctx, singleConnURL(s.adminURL))
	if err != nil {
		return out, fmt.Errorf("postgres statistics: %w", err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, "SELECT xact_commit, xact_rollback FROM pg_stat_database WHERE datname = $1", s.db).
		Scan(&out.commits, &out.rollbacks); err != nil {
		return out, fmt.Errorf("postgres statistics: pg_stat_database: %w", err)
	}
	if !s.statements {
		return out, nil
	}
	rows, err := conn.Query(ctx, `SELECT queryid, sum(calls)::bigint, sum(rows)::bigint, sum(wal_bytes)::bigint,
			sum(shared_blks_hit + shared_blks_read)::bigint, sum(total_exec_time + total_plan_time)::float8, min(query)
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = $1) AND queryid IS NOT NULL
		GROUP BY queryid`, s.db)
	if err != nil {
		return out, fmt.Errorf("postgres statistics: pg_stat_statements: %w", err)
	}
	for rows.Next() {
		var id int64
		var st pgStatement
		if err := rows.Scan(&id, &st.calls, &st.rows, &st.walBytes, &st.buffers, &st.ms, &st.query); err != nil {
			return out, fmt.Errorf("postgres statistics: pg_stat_statements: %w", err)
		}
		out.calls[id] = st
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("postgres statistics: pg_stat_statements: %w", err)
	}
	return out, nil
}

// readWithTables is read with the tables' counters, which only the
// run's baseline and its end need.
func (s *pgStats) readWithTables(ctx context.Context) (pgCounters, error) {
	out, err := s.read(ctx)
	if err != nil {
		return out, err
	}
	out.tables, err = s.readTables(ctx)
	return out, err
}

// readTables reads the tables' counters in the target's own database
// (pg_stat_user_tables shows only the database it is read in).
func (s *pgStats) readTables(ctx context.Context) (map[string]pgTable, error) {
	out := map[string]pgTable{}
	conn, err := pgx.Connect(ctx, singleConnURL(s.storeURL))
	if err != nil {
		return nil, fmt.Errorf("postgres table statistics: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT t.relname, (SELECT count(*) FROM pg_index i WHERE i.indrelid = t.relid),
			t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del,
			coalesce(io.heap_blks_hit + io.heap_blks_read, 0), coalesce(io.idx_blks_hit + io.idx_blks_read, 0)
		FROM pg_stat_user_tables t JOIN pg_statio_user_tables io ON io.relid = t.relid`)
	if err != nil {
		return nil, fmt.Errorf("postgres table statistics: %w", err)
	}
	for rows.Next() {
		var t pgTable
		if err := rows.Scan(&t.name, &t.indexes, &t.ins, &t.upd, &t.hot, &t.del, &t.heapBuffers, &t.indexBuffers); err != nil {
			return nil, fmt.Errorf("postgres table statistics: %w", err)
		}
		out[t.name] = t
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres table statistics: %w", err)
	}
	return out, nil
}

// pgCheckpoint runs CHECKPOINT on the server of adminURL.
func pgCheckpoint(ctx context.Context, adminURL string) error {
	conn, err := pgx.Connect(ctx, singleConnURL(adminURL))
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}
