package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// SQLite has one writer, and with synchronous=FULL every commit costs an
// fsync. The processor and the delivery worker settle one event or one call
// per transaction, from several goroutines at once; committing each alone
// would cap the pipeline near the raw fsync rate. inTx therefore runs
// concurrent write transactions back to back inside ONE database
// transaction, each under its own savepoint: a caller's error rolls back
// only its own writes, and every caller learns its own outcome only after
// the shared commit is durable (or that it failed).

type txJob struct {
	ctx  context.Context
	fn   func(ctx context.Context, tx *wtx) error
	done chan error
}

// defaultBatchDeadline bounds one shared write transaction, from BEGIN to
// COMMIT; far above any healthy one (milliseconds), it only ends a stuck one.
const defaultBatchDeadline = 30 * time.Second

// maxTxBatch bounds the callers sharing one commit.
const maxTxBatch = 64

// errStoreClosed is returned to callers after Close.
var errStoreClosed = errors.New("sqlite store closed")

// startBatcher runs the shared writer loop until Close.
func (s *Store) startBatcher() {
	s.jobs = make(chan *txJob, maxTxBatch)
	s.quit = make(chan struct{})
	s.batcherDone = make(chan struct{})
	go func() {
		defer close(s.batcherDone)
		batch := make([]*txJob, 0, maxTxBatch)
		for {
			select {
			case <-s.quit:
				s.failPending()
				return
			case j := <-s.jobs:
				start := time.Now()
				batch = append(batch[:0], j)
			drain:
				for len(batch) < maxTxBatch {
					select {
					case j := <-s.jobs:
						batch = append(batch, j)
					default:
						break drain
					}
				}
				s.runBatch(batch, start)
				prepared := time.Now()
				s.prepareWanted()
				s.busyNanos.Add(int64(time.Since(prepared)))
			}
		}
	}()
}

// WriterTime is how long the one writer has spent on shared write
// transactions since Open (running their callers' statements, then
// committing), and of that, in their commits (the WAL's page writes, its
// fsync, and a checkpoint when one falls due). Every write on SQLite
// passes through this one connection: busy growing by about a second a
// second means each write waits for the commit in progress, and with a
// growing backlog that the writer, not the processors, bounds what the
// store takes.
func (s *Store) WriterTime() (busy, commit time.Duration) {
	return time.Duration(s.busyNanos.Load()), time.Duration(s.commitNanos.Load())
}

func (s *Store) failPending() {
	for {
		select {
		case j := <-s.jobs:
			j.done <- errStoreClosed
		default:
			return
		}
	}
}

// inTx runs fn in a write transaction shared with concurrent callers.
//
// fn gets a context that is never canceled: cancelling a statement would
// make SQLite roll back the whole shared transaction, and with it the other
// callers' work. A caller that gives up still waits for its outcome.
func (s *Store) inTx(ctx context.Context, fn func(ctx context.Context, tx *wtx) error) error {
	return s.inTxQueued(ctx, fn, nil)
}

// inTxQueued is inTx, calling queued (when set) once the job is queued:
// a job queued after that runs after it (store.InboxCommitParams.Queued,
// store.QueuedDriver). The callers that pass queued hear it in the order
// their jobs were queued.
func (s *Store) inTxQueued(ctx context.Context, fn func(ctx context.Context, tx *wtx) error, queued func()) error {
	j := &txJob{ctx: ctx, fn: fn, done: make(chan error, 1)}
	if err := s.queue(ctx, j, queued); err != nil {
		return err
	}
	// Wait for the outcome even if ctx ends meanwhile: the job may already
	// be part of a commit, and the caller must not guess. A job queued while
	// Close stopped the loop is never run: the loop has answered every job
	// it took before batcherDone closes, so no answer by then means none.
	select {
	case err := <-j.done:
		return dbErrors.MarkRefused(err)
	case <-s.batcherDone:
		select {
		case err := <-j.done:
			return dbErrors.MarkRefused(err)
		default:
			return errStoreClosed
		}
	}
}

// queue queues j for the writer and then calls queued (when set), both
// under queueMu: the callers that ask to hear it hear it in queue order.
func (s *Store) queue(ctx context.Context, j *txJob, queued func()) error {
	if queued != nil {
		s.queueMu.Lock()
		defer s.queueMu.Unlock()
	}
	select {
	case s.jobs <- j:
	case <-s.quit:
		return errStoreClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	if queued != nil {
		queued()
	}
	return nil
}

// runBatch runs the jobs of one shared transaction, begun at start, and
// counts the writer's time for it in WriterTime. Where the transaction
// reaches its commit, that is before any caller hears the outcome (and
// the busy time before the commit's, so that a reading never shows more
// committing than busy); otherwise as it returns.
func (s *Store) runBatch(batch []*txJob, start time.Time) {
	counted := false
	defer func() {
		if !counted {
			s.busyNanos.Add(int64(time.Since(start)))
		}
	}()
	live := batch[:0:0]
	for _, j := range batch {
		if err := j.ctx.Err(); err != nil {
			j.done <- err
			continue
		}
		live = append(live, j)
	}
	if len(live) == 0 {
		return
	}
	// The transaction serves several callers, so it runs on its own
	// context: one caller giving up must not roll back the others. It has
	// a deadline all the same: a statement stuck on a lock or a dying disk
	// must not hold the only writer, and every caller behind it, forever.
	ctx, cancel := context.WithTimeout(context.Background(), s.batchDeadline)
	defer cancel()
	deadline, _ := ctx.Deadline()
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		for _, j := range live {
			j.done <- fmt.Errorf("begin: %w: %w", store.ErrUnavailable, err)
		}
		return
	}
	b := &batchRun{s: s, ctx: ctx, deadline: deadline, tx: tx, shared: &wtx{Tx: tx, s: s, stmts: map[string]*sql.Stmt{}}}
	if len(live) == 1 {
		// Alone in the transaction: no savepoint needed, a failure
		// rolls the whole transaction back.
		b.jobs = live
		b.results = []error{b.call(live[0])}
		if b.results[0] != nil {
			_ = tx.Rollback()
			live[0].done <- b.results[0]
			return
		}
	} else {
		for _, j := range live {
			if !b.runSaved(j) {
				return
			}
		}
	}
	if !b.lateJoiners() {
		return
	}
	committing := time.Now()
	err = tx.Commit()
	end := time.Now()
	s.busyNanos.Add(int64(end.Sub(start)))
	s.commitNanos.Add(int64(end.Sub(committing)))
	counted = true
	if err != nil {
		b.failAll(fmt.Errorf("commit: %w: %w", store.ErrUnavailable, err))
		return
	}
	if s.committed != nil {
		s.committed(len(b.jobs))
	}
	for i, j := range b.jobs {
		j.done <- b.results[i]
	}
}

// batchRun is one shared write transaction in progress: the jobs it has
// run and their outcomes, answered once it commits.
type batchRun struct {
	s        *Store
	ctx      context.Context
	deadline time.Time
	tx       *sql.Tx
	shared   *wtx
	jobs     []*txJob
	results  []error
}

// call runs one job's function on the shared transaction, under a context
// that its caller cannot cancel but that ends with the transaction's.
func (b *batchRun) call(j *txJob) error {
	jctx, jcancel := context.WithDeadline(context.WithoutCancel(j.ctx), b.deadline)
	defer jcancel()
	return j.fn(jctx, b.shared)
}

// runSaved runs a job under a savepoint of its own, so that its error
// rolls back its writes only. false: the transaction itself failed, and
// every job has been answered.
func (b *batchRun) runSaved(j *txJob) bool {
	b.jobs = append(b.jobs, j)
	// Savepoints run on a context that cannot end, for the reason stmtCtx
	// gives; the job itself is held to the transaction's deadline.
	sctx := context.WithoutCancel(b.ctx)
	if err := b.savepoint(sctx, `SAVEPOINT job`); err != nil {
		b.results = append(b.results, fmt.Errorf("savepoint: %w", err))
		return true
	}
	err := b.call(j)
	b.results = append(b.results, err)
	if err != nil {
		if err := b.savepoint(sctx, `ROLLBACK TO job`); err != nil {
			_ = b.tx.Rollback()
			b.failAll(fmt.Errorf("rollback to savepoint: %w: %w", store.ErrUnavailable, err))
			return false
		}
	}
	if err := b.savepoint(sctx, `RELEASE job`); err != nil {
		_ = b.tx.Rollback()
		b.failAll(fmt.Errorf("release savepoint: %w: %w", store.ErrUnavailable, err))
		return false
	}
	return true
}

// savepoint runs q, one of a job's savepoint statements, through the
// writer's statement cache: two run for every job that shares a
// transaction, and compiling them each time was the one writer's work for
// nothing. They bypass Options.Faults, which injects failures into the
// jobs' own statements.
func (b *batchRun) savepoint(ctx context.Context, q string) error {
	if st := b.shared.prepared(ctx, q); st != nil {
		_, err := st.ExecContext(ctx)
		return err
	}
	_, err := b.tx.ExecContext(ctx, q)
	return err
}

// lateJoiners runs, before the commit, the jobs queued while the
// transaction ran: they share its commit instead of waiting for it and
// then paying an fsync of their own, which is where a stage's hand-off
// spent its time (the next stage's claim, a receiver's group, a settle).
// Only what is queued already joins: nothing waits for more. false: the
// transaction failed, and every job has been answered.
func (b *batchRun) lateJoiners() bool {
	for len(b.jobs) < maxTxBatch {
		var j *txJob
		select {
		case j = <-b.s.jobs:
		default:
			return true
		}
		if err := j.ctx.Err(); err != nil {
			j.done <- err
			continue
		}
		if !b.runSaved(j) {
			return false
		}
	}
	return true
}

// failAll answers every job of the transaction with err.
func (b *batchRun) failAll(err error) {
	for _, j := range b.jobs {
		j.done <- err
	}
}

// wtx is a write transaction that prepares each distinct statement once and
// reuses it for every caller sharing the transaction: the driver would
// otherwise parse the same SQL again for each of them, and parsing is a
// large share of the single writer's time. Each statement first asks
// Options.Faults (tests only) whether it fails.
type wtx struct {
	*sql.Tx
	s     *Store
	stmts map[string]*sql.Stmt // nil: no reuse (a transaction of its own)
}

// fault is the error Options.Faults injects into statement q, or nil (always
// nil outside tests).
func (s *Store) fault(q string) error {
	if s == nil || s.faults == nil {
		return nil
	}
	return s.faults(q)
}

// stmtCtx is the context a statement of t runs on. In the shared write
// transaction it cannot end: the driver watches a cancelable context with a
// goroutine and a progress handler per statement, a large share of the
// single writer's time at a few statements per effect, and BEGIN IMMEDIATE
// has already taken the only lock a statement could wait for. The
// transaction's deadline still holds between statements: a job past it
// gets an error before its next statement runs, as the inbox's group does.
// Other transactions (reads, an operator's) keep their caller's context,
// whose end should stop a long read.
func (t *wtx) stmtCtx(ctx context.Context) (context.Context, error) {
	if t.stmts == nil {
		return ctx, nil
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return context.WithoutCancel(ctx), nil
}

// failedRow is the row of a statement that failed before it ran.
type failedRow struct{ err error }

func (r failedRow) Scan(...any) error { return r.err }

func (t *wtx) prepared(ctx context.Context, q string) *sql.Stmt {
	if t.stmts == nil {
		return nil
	}
	if st, ok := t.stmts[q]; ok {
		return st
	}
	var st *sql.Stmt
	if persistent := t.s.writeStmt(q); persistent != nil {
		// Prepared on the writer connection between transactions: binding
		// it to this transaction reuses the compiled statement.
		st = t.Tx.StmtContext(ctx, persistent)
	} else {
		var err error
		if st, err = t.Tx.PrepareContext(ctx, q); err != nil {
			// The plain call below reports the same error to the caller.
			return nil
		}
		t.s.wantWriteStmt(q)
	}
	t.stmts[q] = st
	return st
}

// writeStmt returns the statement prepared for q on the writer, if any.
func (s *Store) writeStmt(q string) *sql.Stmt {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	return s.writeStmts[q]
}

// wantWriteStmt notes a statement to prepare once the writer is free.
func (s *Store) wantWriteStmt(q string) {
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if s.wantStmts == nil {
		s.wantStmts = map[string]bool{}
	}
	s.wantStmts[q] = true
}

// prepareWanted prepares, between transactions, the statements the last
// ones used for the first time. The writer has one connection, so a
// statement prepared on the pool lives on that connection.
func (s *Store) prepareWanted() {
	s.writeMu.Lock()
	want := s.wantStmts
	s.wantStmts = nil
	s.writeMu.Unlock()
	for q := range want {
		st, err := s.writer.PrepareContext(context.Background(), q)
		if err != nil {
			continue // used unprepared, as before
		}
		s.writeMu.Lock()
		if s.writeStmts == nil {
			s.writeStmts = map[string]*sql.Stmt{}
		}
		if _, dup := s.writeStmts[q]; dup {
			st.Close()
		} else {
			s.writeStmts[q] = st
		}
		s.writeMu.Unlock()
	}
}

// ExecContext runs q through the transaction's statement cache.
func (t *wtx) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if err := t.s.fault(q); err != nil {
		return nil, err
	}
	ctx, err := t.stmtCtx(ctx)
	if err != nil {
		return nil, err
	}
	if st := t.prepared(ctx, q); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return t.Tx.ExecContext(ctx, q, args...)
}

// QueryContext runs q through the transaction's statement cache.
func (t *wtx) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if err := t.s.fault(q); err != nil {
		return nil, err
	}
	ctx, err := t.stmtCtx(ctx)
	if err != nil {
		return nil, err
	}
	if st := t.prepared(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return t.Tx.QueryContext(ctx, q, args...)
}

// QueryRowContext runs q through the transaction's statement cache. Its
// row is a scanner, not a *sql.Row, so that an injected fault can fail it.
func (t *wtx) QueryRowContext(ctx context.Context, q string, args ...any) scanner {
	if err := t.s.fault(q); err != nil {
		return failedRow{err}
	}
	ctx, err := t.stmtCtx(ctx)
	if err != nil {
		return failedRow{err}
	}
	if st := t.prepared(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return t.Tx.QueryRowContext(ctx, q, args...)
}

// readQuery runs a read through a statement prepared once for the reader
// pool (database/sql prepares it again on each pooled connection the first
// time it is used there): the processor lists work and projections for
// every event, and parsing the same SQL each time was most of its cost.
func (s *Store) readQuery(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	st, err := s.readStmt(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// readQueryRow is readQuery for a single row.
func (s *Store) readQueryRow(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := s.readStmt(ctx, q)
	if err != nil {
		// The plain call reports the same preparation error through Scan.
		return s.reader.QueryRowContext(ctx, q, args...)
	}
	return st.QueryRowContext(ctx, args...)
}

func (s *Store) readStmt(ctx context.Context, q string) (*sql.Stmt, error) {
	s.readMu.Lock()
	defer s.readMu.Unlock()
	if st, ok := s.readStmts[q]; ok {
		return st, nil
	}
	st, err := s.reader.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	if s.readStmts == nil {
		s.readStmts = map[string]*sql.Stmt{}
	}
	s.readStmts[q] = st
	return st, nil
}
