package postgres

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookledger/hookledger/internal/store"
)

// pipeTx is a transaction whose statements are pipelined: a statement
// whose answer the caller does not need (an audit row, a counter, a
// disposition) is queued and sent together with the next statement that
// returns rows, or with COMMIT, in one round trip. BEGIN itself travels
// with the first read. A settle that used to cost a round trip per
// statement (17 for an applied event with one effect) costs five or six,
// and each round trip is a wake-up of both processes on a busy machine
// (docs/architecture.md, "Storage"). The order of statements is kept, so
// the transaction means exactly what it meant statement by statement.
//
// Errors of queued statements surface at the flush that sent them,
// labelled with the statement they belong to; the caller then rolls back.
type pipeTx struct {
	conn  *pgxpool.Conn
	trips *atomic.Int64 // the store's count of round trips (Store.pipeTrips)
	batch *pgx.Batch
	// queued names each statement of batch (for errors) and, for one
	// whose rows are wanted, the function that reads them.
	queued []queued
	// then holds follow-up reads that a scan asked for; they run after
	// the flush that answered it.
	then []func(context.Context) error
	// held are writes of a settle that wait to go as one statement per
	// table (held.go).
	held held
	// audits wait to be written as one multi-row insert, queued before
	// the next read or COMMIT: a settle writes three or four audit rows,
	// and one statement costs the database less than four.
	audits []*store.AuditInsertParams
	// open is set when the pipe began a transaction, which commit ends;
	// a pipe of reads alone (store.TxRead) runs each flush's statements
	// as one implicit transaction.
	open bool
	// statements counts the statements queued on the pipe, so that a
	// read taken ahead can tell whether anything was written after it.
	statements int
	// ahead is what routing's lease read for the settle that follows it
	// (groupAhead), until ReadGroup takes it.
	ahead *groupAhead
}

// queued is one statement of pipeTx.batch.
type queued struct {
	label string
	scan  func(pgx.Rows) error
	// count, when set, receives the rows the statement changed.
	count *int64
}

// beginPipe takes a connection and queues BEGIN and plan, the settings
// its statements are planned under (pipePlanSQL, or one that extends it).
func (s *Store) beginPipe(ctx context.Context, plan string) (*pipeTx, error) {
	t, err := s.acquirePipe(ctx)
	if err != nil {
		return nil, err
	}
	t.begin("BEGIN")
	t.exec("plan settings", plan)
	return t, nil
}

// acquirePipe takes a connection for a pipe that has begun nothing yet.
func (s *Store) acquirePipe(ctx context.Context) (*pipeTx, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pipeTx{conn: conn, trips: &s.pipeTrips, batch: &pgx.Batch{}}, nil
}

// begin queues the statement that begins the transaction.
func (t *pipeTx) begin(sql string) {
	t.exec("begin", sql)
	t.open = true
}

// pipePlanSettings plan a pipelined transaction's statements once per
// connection, as lookups of the keys they name. Each of them takes arrays,
// so PostgreSQL's own choice (plan_cache_mode auto) was a fresh plan at
// every execution: a plan made for the arrays at hand always looks
// cheaper than one made without them, and planning was the largest share
// of PostgreSQL's CPU at a light load (docs/benchmarks-history.md,
// "Generic plans for the pipelined transactions"). A generic plan cannot
// see how long the arrays are, and with sequential scans allowed it read
// small tables whole (the fence 56 buffers a call where 8 do); with them
// off, it reads the keys the statement names by index, which is what these
// statements are (TestPipelinePlans proves each generic plan, and
// TestEntityPlansWithStatistics the entities' on a large table). Hash
// joins stay allowed: they join a page's arrays to the rows found by key
// (with them off, nested loops compared every pair). The
// settings end with the transaction, so list pages and other reads keep
// plans made for their arguments. Every statement a pipe runs is written
// for pipes alone: a generic plan is kept per statement and connection,
// and one made outside a pipe under other settings would be reused here.
//
// The JIT compiler is off in a pipe. A plan that needs a node these
// settings (or the claim's, effectClaimSettings) turn off costs the
// planner ten billion, far above jit_above_cost, and PostgreSQL compiled
// and optimized such a statement to machine code at every run: about two
// seconds for a claim over every destination on a table of 24 rows
// (TestPipedStatementsAreNotCompiled). A pipe's statements are lookups by
// key, which compiling never pays for.
const pipePlanSettings = `set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true), ` +
	`set_config('jit', 'off', true)`

// pipePlanSQL applies pipePlanSettings.
const pipePlanSQL = `SELECT ` + pipePlanSettings

// exec queues a statement whose result only matters as success.
func (t *pipeTx) exec(label, sql string, args ...any) {
	t.batch.Queue(sql, args...)
	t.statements++
	t.queued = append(t.queued, queued{label: label})
}

// execCount is exec for a statement whose count of rows changed is
// wanted: *n has it once the statement is sent.
func (t *pipeTx) execCount(label, sql string, n *int64, args ...any) {
	t.batch.Queue(sql, args...)
	t.statements++
	t.queued = append(t.queued, queued{label: label, count: n})
}

// later queues a statement whose rows scan reads when the queue is sent,
// with the next query or flush.
func (t *pipeTx) later(label, sql string, args []any, scan func(pgx.Rows) error) {
	t.batch.Queue(sql, args...)
	t.statements++
	t.queued = append(t.queued, queued{label: label, scan: scan})
}

// audit queues an audit row (see audits).
func (t *pipeTx) audit(a *store.AuditInsertParams) {
	t.audits = append(t.audits, a)
}

// queueAudits queues the waiting audit rows as one insert, in their order.
func (t *pipeTx) queueAudits() {
	if len(t.audits) == 0 {
		return
	}
	// One statement in every pipe, whatever its plan settings: its plan,
	// a sort of the arrays, is the same however it is planned.
	args := auditArrays.args(t.audits)
	t.audits = t.audits[:0]
	t.exec("insert audit", insertAuditsSQL, args...)
}

// insertAuditsSQL inserts audit rows (auditArrays), in their order.
var insertAuditsSQL = `INSERT INTO audit (` + auditInsertColumns + `)
	SELECT ` + auditInsertColumns + `
	FROM unnest(` + auditArrays.params(1) + `) WITH ORDINALITY AS a(` + auditInsertColumns + `, n)
	ORDER BY n`

// query sends the queue and then sql, and hands sql's rows to scan.
func (t *pipeTx) query(ctx context.Context, label, sql string, args []any, scan func(pgx.Rows) error) error {
	t.beforeReads()
	t.later(label, sql, args, scan)
	return t.flush(ctx)
}

// beforeReads queues what a read must see: the held-back writes and the
// audit rows waiting. query calls it; a caller that queues several reads
// with later to send them together calls it first.
func (t *pipeTx) beforeReads() {
	t.held.queue(t)
	t.queueAudits()
}

// flush sends the queue, hands each statement's rows to its scan, and
// then runs the follow-up reads the scans asked for.
func (t *pipeTx) flush(ctx context.Context) error {
	t.held.queue(t)
	if t.batch.Len() == 0 {
		return nil
	}
	b, qs := t.batch, t.queued
	t.batch, t.queued = &pgx.Batch{}, nil
	t.trips.Add(1)
	br := t.conn.SendBatch(ctx, b)
	for _, q := range qs {
		var err error
		if q.scan == nil {
			var tag pgconn.CommandTag
			if tag, err = br.Exec(); err == nil && q.count != nil {
				*q.count = tag.RowsAffected()
			}
		} else {
			var rows pgx.Rows
			if rows, err = br.Query(); err == nil {
				err = q.scan(rows)
				rows.Close()
				if err == nil {
					err = rows.Err()
				}
			}
		}
		if err != nil {
			br.Close()
			return fmt.Errorf("%s: %w", q.label, err)
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	for len(t.then) > 0 {
		f := t.then[0]
		t.then = t.then[1:]
		if err := f(ctx); err != nil {
			return err
		}
	}
	return nil
}

// commit sends what is queued with COMMIT and gives the connection back.
func (t *pipeTx) commit(ctx context.Context) error {
	t.held.queue(t)
	t.queueAudits()
	if t.open {
		t.exec("commit", "COMMIT")
	}
	err := t.flush(ctx)
	if err != nil {
		t.rollback()
		return err
	}
	t.conn.Release()
	return nil
}

// rollback ends a failed transaction and gives the connection back. The
// pool closes a connection that is not idle outside a transaction when it
// comes back, so a ROLLBACK that could not be sent (a dead connection, a
// canceled context) loses nothing but that connection.
func (t *pipeTx) rollback() {
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	if t.conn.Conn().PgConn().TxStatus() != 'I' {
		_, _ = t.conn.Exec(ctx, "ROLLBACK") //nolint:errcheck // see above
	}
	t.conn.Release()
}

// runPipe runs fn in t and commits it; any error rolls the whole of it
// back.
func (s *Store) runPipe(ctx context.Context, t *pipeTx, fn func(*pipeTx) error) error {
	if err := fn(t); err != nil {
		t.rollback()
		return dbErrors.MarkRefused(err)
	}
	return dbErrors.MarkRefused(t.commit(ctx))
}

// rollbackTimeout bounds the ROLLBACK of a failed pipelined transaction.
const rollbackTimeout = 5 * time.Second
