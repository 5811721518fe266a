// Package sqlite is the embedded store driver: one database file, WAL,
// synchronous=FULL and a single writer connection, on the pure-Go
// modernc.org/sqlite (no cgo, so the binary stays static).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/hookledger/hookledger/internal/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Store implements store.Store on one SQLite file: the rules' operations
// (store.Rules) over its statements, and its own reads and inbox.
type Store struct {
	*store.Rules
	path string
	// writer has exactly one connection: SQLite allows one writer at a time,
	// and serialising in the pool is cheaper than SQLITE_BUSY retries.
	writer *sql.DB
	// reader serves queries concurrently; WAL lets readers run beside the
	// writer without blocking it.
	reader *sql.DB

	inboxOnce sync.Once
	inbox     *inboxStmts
	inboxErr  error

	// The shared write transaction loop (see batch.go).
	batchDeadline time.Duration
	jobs          chan *txJob
	quit          chan struct{}
	batcherDone   chan struct{}
	closeOnce     sync.Once
	// queueMu orders the jobs whose callers hear that they are queued
	// (inTxQueued).
	queueMu sync.Mutex

	readMu    sync.Mutex
	readStmts map[string]*sql.Stmt

	writeMu    sync.Mutex
	writeStmts map[string]*sql.Stmt
	wantStmts  map[string]bool

	// faults is Options.Faults: nil outside tests.
	faults func(query string) error
	// committed, set only by tests, hears how many jobs each shared
	// write transaction committed.
	committed func(jobs int)

	// busyNanos and commitNanos are the writer's time on shared write
	// transactions and, of it, in their commits (see WriterTime).
	busyNanos, commitNanos atomic.Int64
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the database file at path. The parent
// directory is created so that the quick-start works on a fresh clone.
func Open(ctx context.Context, path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("open sqlite: empty path")
	}
	if path != ":memory:" {
		if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
			return nil, fmt.Errorf("open sqlite: create directory: %w", err)
		}
	}
	// journal_mode=WAL: readers never block the writer and commits append.
	// synchronous=FULL: fsync the WAL on every commit, so a 2xx that follows
	// a commit survives power loss (NORMAL would only survive a crash of the
	// process). busy_timeout covers another process briefly holding the lock
	// (e.g. migrate running beside serve). _txlock=immediate takes the write
	// lock at BEGIN so a transaction never fails to upgrade halfway.
	// temp_store=MEMORY keeps the writer's statement journals in memory:
	// an upsert or insert touching tables with several indexes, inside a
	// group commit, saves the pages it changes so that it alone can roll
	// back, and past 64 KiB SQLite spilled that journal to a temporary
	// file, a third of the bytes an inbox commit wrote (about 12 of 36 KB
	// per event). The journal matters only until its statement ends, so
	// durability does not depend on it.
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Set("_txlock", "immediate")
	dsn := "file:" + path + "?" + q.Encode()

	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, explainOpen(path, err)
	}

	rq := url.Values{}
	rq.Add("_pragma", "busy_timeout(10000)")
	rq.Add("_pragma", "query_only(ON)")
	r, err := sql.Open("sqlite", "file:"+path+"?"+rq.Encode())
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	s := &Store{path: path, writer: w, reader: r, batchDeadline: defaultBatchDeadline}
	s.Rules = store.NewRules(s)
	s.startBatcher()
	return s, nil
}

// Close stops the shared writer loop and closes both pools.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.quit)
		<-s.batcherDone
		s.readMu.Lock()
		for _, st := range s.readStmts {
			st.Close()
		}
		s.readStmts = nil
		s.readMu.Unlock()
		s.writeMu.Lock()
		for _, st := range s.writeStmts {
			st.Close()
		}
		s.writeStmts = nil
		s.writeMu.Unlock()
	})
	return errors.Join(s.reader.Close(), s.writer.Close())
}

// Ping checks the file is readable and writable.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.writer.PingContext(ctx); err != nil {
		return fmt.Errorf("ping sqlite: %w", err)
	}
	return nil
}

// ProbeWrite rewrites the probe row in the shared write transaction, so it
// fails exactly when the writer cannot commit.
func (s *Store) ProbeWrite(ctx context.Context, now time.Time) error {
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO probe (id, at) VALUES (1, ?)
			ON CONFLICT (id) DO UPDATE SET at = excluded.at`, now.UnixMicro())
		return err
	})
	if err != nil {
		return dbErrors.Wrap("probe write", err)
	}
	return nil
}

// Migrate applies pending migrations in one immediate transaction, which
// also serialises two processes migrating the same file.
func (s *Store) Migrate(ctx context.Context) ([]string, error) {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("migrate sqlite: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	done, err := store.Migrate(ctx, migrationFiles, migrationTx{tx})
	if err != nil {
		return nil, fmt.Errorf("migrate sqlite: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("migrate sqlite: commit: %w", err)
	}
	return done, nil
}

// isUniqueViolation classifies by SQLite's extended result code.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}

// dbErrors marks SQLite's errors for the rules, by extended result code.
var dbErrors = store.ErrorKinds{Unique: isUniqueViolation, Refused: isRefused}

// isRefused reports that SQLite refused the values of the statement
// rather than failed itself: a string or blob over its limit, a value of
// the wrong type, or a check, not-null or trigger constraint. A busy or
// locked database, an I/O error or a full disk are not, and the stage
// retries them.
func isRefused(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_CONSTRAINT_CHECK,
		sqlite3.SQLITE_CONSTRAINT_NOTNULL, sqlite3.SQLITE_CONSTRAINT_TRIGGER, sqlite3.SQLITE_CONSTRAINT_DATATYPE:
		return true
	}
	return false
}

// InboxCommit writes every submission in one transaction. The common case
// (every statement succeeds) runs without savepoints; only when a statement
// fails is the group redone with one savepoint per submission, so that the
// failing submission alone is rolled back and reported.
func (s *Store) InboxCommit(ctx context.Context, p *store.InboxCommitParams) ([]store.SubmissionResult, error) {
	results, err := s.inboxCommit(ctx, p, false)
	if errors.Is(err, errRetryWithSavepoints) {
		results, err = s.inboxCommit(ctx, p, true)
	}
	return results, err
}

// errRetryWithSavepoints reports that a submission failed on the fast path.
var errRetryWithSavepoints = errors.New("a submission failed: retry the group with savepoints")

// The statements of an inbox commit.
const (
	sqlUpsertEvent = `INSERT INTO events
		(source, event_id, type, entity, account, occurred_at, received_at, causation_id, hop, disposition, routed, deliveries, trace_context)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?)
		ON CONFLICT (source, event_id) DO UPDATE SET deliveries = deliveries + 1
		RETURNING pk, deliveries`
	sqlInsertDelivery = `INSERT INTO deliveries
		(event_pk, request_id, batch_index, source, event_id, type, entity, account, occurred_at, received_at, causation_id, hop, headers, body)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sqlInboxAudit = `INSERT INTO audit (at, actor, action, source, event_id, entity, detail)
		VALUES (?, ?, ?, ?, ?, ?, ?)`
)

// inboxStmts are prepared once on the single writer connection and bound
// into each transaction: parsing them per commit was a large share of the
// serial commit path.
type inboxStmts struct {
	upsertEvent, insertDelivery, insertAudit, savepoint, rollbackTo, release *sql.Stmt
}

func (s *Store) prepareInbox(ctx context.Context) error {
	var err error
	prep := func(q string) *sql.Stmt {
		if err != nil {
			return nil
		}
		var st *sql.Stmt
		st, err = s.writer.PrepareContext(ctx, q)
		return st
	}
	s.inbox = &inboxStmts{
		upsertEvent:    prep(sqlUpsertEvent),
		insertDelivery: prep(sqlInsertDelivery),
		insertAudit:    prep(sqlInboxAudit),
		savepoint:      prep(`SAVEPOINT sub`),
		rollbackTo:     prep(`ROLLBACK TO sub`),
		release:        prep(`RELEASE sub`),
	}
	if err != nil {
		s.inbox = nil
		return fmt.Errorf("prepare inbox statements: %w", err)
	}
	return nil
}

// inboxCommit runs the group as one job of the shared write transaction
// (inTx): a group that arrives while the processor's and the worker's
// writes are running shares their commit, and theirs its, instead of each
// paying an fsync of its own on the one writer, one after the other.
func (s *Store) inboxCommit(ctx context.Context, p *store.InboxCommitParams, savepoints bool) ([]store.SubmissionResult, error) {
	s.inboxOnce.Do(func() { s.inboxErr = s.prepareInbox(context.WithoutCancel(ctx)) })
	if s.inboxErr != nil {
		return nil, fmt.Errorf("inbox commit: %w: %w", store.ErrUnavailable, s.inboxErr)
	}
	var results []store.SubmissionResult
	err := s.inTxQueued(ctx, func(ctx context.Context, tx *wtx) error {
		var err error
		results, err = s.inboxSubmissions(ctx, tx.Tx, p, savepoints)
		return err
	}, p.Queued)
	switch {
	case errors.Is(err, errRetryWithSavepoints):
		return nil, errRetryWithSavepoints
	case err != nil:
		return nil, fmt.Errorf("inbox commit: %w", err)
	}
	return results, nil
}

// inboxSubmissions writes the group's submissions in tx; with savepoints,
// each under its own, so that a failing one is rolled back and reported
// alone.
func (s *Store) inboxSubmissions(ctx context.Context, tx *sql.Tx, p *store.InboxCommitParams, savepoints bool) ([]store.SubmissionResult, error) {
	bind := func(st *sql.Stmt) *sql.Stmt { return tx.StmtContext(ctx, st) }
	upsertEvent, insertDelivery, audit := bind(s.inbox.upsertEvent), bind(s.inbox.insertDelivery), bind(s.inbox.insertAudit)

	// The statements run on a context that cannot end: the driver watches a
	// cancelable one with a goroutine and a progress handler per statement,
	// which cost about a fifth of the group's processor time at three
	// statements per event, and BEGIN IMMEDIATE has already taken the only
	// lock a statement could wait for. The shared transaction's deadline
	// still holds: it is checked before each submission, and a group past
	// it fails whole, its writes rolled back with its job.
	stmtCtx := context.WithoutCancel(ctx)
	results := make([]store.SubmissionResult, len(p.Submissions))
	for i, sub := range p.Submissions {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		if savepoints {
			if _, err := bind(s.inbox.savepoint).ExecContext(stmtCtx); err != nil {
				return nil, fmt.Errorf("savepoint: %w", err)
			}
		}
		items, err := s.commitOne(stmtCtx, upsertEvent, insertDelivery, audit, sub)
		switch {
		case err != nil && !savepoints:
			return nil, errRetryWithSavepoints
		case err != nil:
			if _, rerr := bind(s.inbox.rollbackTo).ExecContext(stmtCtx); rerr != nil {
				return nil, fmt.Errorf("rollback to savepoint: %w", rerr)
			}
			results[i].Err = dbErrors.MarkRefused(err)
		default:
			results[i].Items = items
		}
		if savepoints {
			if _, err := bind(s.inbox.release).ExecContext(stmtCtx); err != nil {
				return nil, fmt.Errorf("release savepoint: %w", err)
			}
		}
	}
	return results, nil
}

func (s *Store) commitOne(ctx context.Context, upsertEvent, insertDelivery, audit *sql.Stmt, sub *store.Submission) ([]store.DeliveryOutcome, error) {
	items := make([]store.DeliveryOutcome, len(sub.Deliveries))
	for j, d := range sub.Deliveries {
		headers, err := json.Marshal(nonNilMap(d.Headers))
		if err != nil {
			return nil, fmt.Errorf("encode headers: %w", err)
		}
		disposition, routed := store.DispositionAccepted, 0
		if d.Unrouted {
			disposition, routed = store.DispositionUnrouted, 1
		}
		var pk, n int64
		if err := s.fault(sqlUpsertEvent); err != nil {
			return nil, dbErrors.Wrap("record event", err)
		}
		if err := upsertEvent.QueryRowContext(ctx, d.Source, d.EventID, d.Type, d.Entity, d.Account,
			micros(d.OccurredAt), d.ReceivedAt.UnixMicro(), d.CausationID, d.Hop, disposition, routed, d.TraceContext).Scan(&pk, &n); err != nil {
			return nil, dbErrors.Wrap("record event", err)
		}
		if err := s.fault(sqlInsertDelivery); err != nil {
			return nil, dbErrors.Wrap("record delivery", err)
		}
		res, err := insertDelivery.ExecContext(ctx, pk, d.RequestID, d.BatchIndex, d.Source, d.EventID, d.Type,
			d.Entity, d.Account, micros(d.OccurredAt), d.ReceivedAt.UnixMicro(), d.CausationID, d.Hop, string(headers), nonNilBytes(d.Body))
		if err != nil {
			return nil, dbErrors.Wrap("record delivery", err)
		}
		id, err := res.LastInsertId()
		if err != nil {
			return nil, fmt.Errorf("record delivery: %w", err)
		}
		items[j] = store.DeliveryOutcome{DeliveryID: id, EventPK: pk, Duplicate: n > 1}
		if d.Unrouted && n == 1 {
			if err := s.fault(sqlInboxAudit); err != nil {
				return nil, dbErrors.Wrap("insert audit", err)
			}
			a := store.UnroutedAudit(d)
			if _, err := audit.ExecContext(ctx, a.At.UnixMicro(), a.Actor, a.Action, a.Source, a.EventID, a.Entity, a.Detail); err != nil {
				return nil, dbErrors.Wrap("insert audit", err)
			}
		}
	}
	for _, a := range sub.Audit {
		if err := s.fault(sqlInboxAudit); err != nil {
			return nil, dbErrors.Wrap("insert audit", err)
		}
		if _, err := audit.ExecContext(ctx, a.At.UnixMicro(), a.Actor, a.Action, a.Source, a.EventID, a.Entity, a.Detail); err != nil {
			return nil, dbErrors.Wrap("insert audit", err)
		}
	}
	return items, nil
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

func insertAudit(ctx context.Context, db execer, a *store.AuditInsertParams) (int64, error) {
	res, err := db.ExecContext(ctx, auditInsertSQL[0], a.At.UnixMicro(), a.Actor, a.Action, a.Source, a.EventID, a.Entity, a.Detail)
	if err != nil {
		return 0, dbErrors.Wrap("insert audit", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("insert audit: %w", err)
	}
	return id, nil
}

// AuditInsert writes one audit row in its own transaction.
func (s *Store) AuditInsert(ctx context.Context, p *store.AuditInsertParams) (int64, error) {
	return insertAudit(ctx, s.writer, p)
}

// filter is the WHERE clause of a paged list: the cursor condition, then
// conditions that apply only when their value is set.
//
// Without statistics SQLite's planner rates every equality alike and picks
// the index that also yields id order, so beside a selective filter (an
// entity, an event id, an owner) it may well take a source's or a flow's
// index and read all of it to find a few rows. A list that has a selective
// filter therefore writes its broad ones as +col, which SQLite never reads
// through an index: they only filter the rows the selective index finds.
type filter struct {
	where []string
	args  []any
	// narrow is set when a selective filter is present (see above).
	narrow bool
}

func cursor(cond string, after int64) *filter {
	return &filter{where: []string{cond}, args: []any{after}}
}

// broad names a column of a broad filter, kept off the indexes when the
// list has a selective filter.
func (f *filter) broad(col string) string {
	if f.narrow {
		return "+" + col
	}
	return col
}

// eq adds col = v unless v is empty.
func (f *filter) eq(col, v string) *filter {
	return f.cond(v != "", col+" = ?", v)
}

// cond adds a condition and its arguments when on is set.
func (f *filter) cond(on bool, cond string, args ...any) *filter {
	if on {
		f.where = append(f.where, cond)
		f.args = append(f.args, args...)
	}
	return f
}

// span adds from <= col < to for the bounds that are set.
func (f *filter) span(col string, from, to time.Time) *filter {
	return f.cond(!from.IsZero(), col+" >= ?", from.UnixMicro()).cond(!to.IsZero(), col+" < ?", to.UnixMicro())
}

// sql returns the conditions and the arguments with limit last, for a
// query ending in "WHERE " + conds + " ORDER BY ... LIMIT ?".
func (f *filter) sql(limit int) (string, []any) {
	return strings.Join(f.where, " AND "), append(f.args, limit)
}

// eventDisposition matches one disposition. The two common ones are written
// as literals so that accepted reads its partial index and applied the pk
// order; the others repeat the partial index's predicate so that it is
// provably usable with a bound parameter.
func eventDisposition(f *filter, d store.Disposition) *filter {
	col := f.broad("disposition")
	switch d {
	case "":
		return f
	case store.DispositionAccepted:
		return f.cond(true, col+" = 'accepted'")
	case store.DispositionApplied:
		return f.cond(true, col+" = 'applied'")
	}
	return f.cond(true, col+" = ? AND disposition NOT IN ('accepted', 'applied')", string(d))
}

// eventListSQL is EventList's query for a page of limit rows.
func eventListSQL(p *store.EventListParams, limit int) (string, []any) {
	f := cursor("pk > ?", p.AfterPK)
	f.narrow = p.Entity != "" || p.EventID != ""
	f.cond(p.EventID != "" && p.Source != "", "source = ? AND event_id = ?", p.Source, p.EventID).
		cond(p.EventID != "" && p.Source == "", store.EventIDAnySourceSQL, p.EventID).
		cond(p.EventID == "" && p.Source != "", f.broad("source")+" = ?", p.Source).
		cond(p.Entity != "", store.EventEntitySQL, p.Entity, p.AfterPK, p.Entity, p.AfterPK).
		eq(f.broad("type"), p.Type).
		span(f.broad("received_at"), p.ReceivedFrom, p.ReceivedTo).span(f.broad("occurred_at"), p.OccurredFrom, p.OccurredTo)
	where, args := eventDisposition(f, p.Disposition).sql(limit)
	return `SELECT pk, source, event_id, type, entity, account, occurred_at,
		received_at, deliveries, disposition FROM events WHERE ` + where + ` ORDER BY pk LIMIT ?`, args
}

// EventList pages through events.
func (s *Store) EventList(ctx context.Context, p *store.EventListParams) (*store.EventListResult, error) {
	limit := store.ClampLimit(p.Limit)
	q, args := eventListSQL(p, limit+1)
	rows, err := s.readQuery(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var events []*store.Event
	for rows.Next() {
		e := &store.Event{}
		var occ sql.NullInt64
		var rec int64
		if err := rows.Scan(&e.PK, &e.Source, &e.EventID, &e.Type, &e.Entity, &e.Account, &occ, &rec,
			&e.Deliveries, &e.Disposition); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		e.OccurredAt = fromMicros(occ)
		e.ReceivedAt = time.UnixMicro(rec).UTC()
		events = append(events, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out, err := store.EventListPage(ctx, p, events, limit, s.eventRoutes)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// eventRoutes fills the routes of a page of events from their work rows:
// per flow, the latest pass. The pks travel as one JSON array so that
// every page size shares one prepared statement.
func (s *Store) eventRoutes(ctx context.Context, evs []*store.Event) error {
	return store.FillEventRoutes(evs, func(pks []int64, add func(int64, store.EventRoute)) error {
		list, err := json.Marshal(pks)
		if err != nil {
			return fmt.Errorf("routes: %w", err)
		}
		rows, err := s.readQuery(ctx, `SELECT event_pk, flow, entity, disposition, reason FROM work
			WHERE event_pk IN (SELECT value FROM json_each(?)) ORDER BY event_pk, flow, replay_id`, string(list))
		if err != nil {
			return fmt.Errorf("routes: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var pk int64
			var r store.EventRoute
			if err := rows.Scan(&pk, &r.Flow, &r.Entity, &r.Disposition, &r.Reason); err != nil {
				return fmt.Errorf("routes: %w", err)
			}
			add(pk, r)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("routes: %w", err)
		}
		return nil
	})
}

// deliveryListQuery is DeliveryList's statement and arguments.
func deliveryListQuery(p *store.DeliveryListParams) (string, []any) {
	f := cursor("id > ?", p.AfterID)
	if p.Source != "" && p.EventID != "" {
		// One event's deliveries are found through the event: its unique
		// (source, event_id) names its pk, and deliveries_event holds its
		// deliveries in id order. An index on the deliveries' own copy of
		// the pair (dropped by 0017) cost the receiver a page of the WAL
		// per webhook, its keys being the senders' random ids.
		f.cond(true, "event_pk = (SELECT pk FROM events WHERE source = ? AND event_id = ?)", p.Source, p.EventID)
	} else {
		f.eq("source", p.Source).eq("event_id", p.EventID)
	}
	where, args := f.sql(store.ClampLimit(p.Limit))
	// substr and length count bytes in a BLOB, which every body is.
	body := "body"
	if p.BodyPrefix > 0 {
		body = "substr(body, 1, ?)"
		args = append([]any{p.BodyPrefix}, args...)
	}
	return `SELECT id, event_pk, request_id, batch_index, source, event_id, type,
		entity, account, occurred_at, received_at, causation_id, hop, headers, ` + body + `, length(body) FROM deliveries WHERE ` + where +
		` ORDER BY id LIMIT ?`, args
}

// DeliveryList pages through deliveries.
func (s *Store) DeliveryList(ctx context.Context, p *store.DeliveryListParams) ([]*store.Delivery, error) {
	q, args := deliveryListQuery(p)
	rows, err := s.readQuery(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	defer rows.Close()
	var out []*store.Delivery
	for rows.Next() {
		d := &store.Delivery{}
		var occ sql.NullInt64
		var rec int64
		var headers string
		if err := rows.Scan(&d.ID, &d.EventPK, &d.RequestID, &d.BatchIndex, &d.Source, &d.EventID, &d.Type,
			&d.Entity, &d.Account, &occ, &rec, &d.CausationID, &d.Hop, &headers, &d.Body, &d.BodySize); err != nil {
			return nil, fmt.Errorf("list deliveries: %w", err)
		}
		d.OccurredAt = fromMicros(occ)
		d.ReceivedAt = time.UnixMicro(rec).UTC()
		if err := json.Unmarshal([]byte(headers), &d.Headers); err != nil {
			return nil, fmt.Errorf("list deliveries: decode headers of %d: %w", d.ID, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}

// auditListSQL is AuditList's query.
func auditListSQL(p *store.AuditListParams) (string, []any) {
	f := cursor("id > ?", p.AfterID)
	f.narrow = p.Entity != "" || p.EventID != ""
	where, args := f.eq("entity", p.Entity).eq("event_id", p.EventID).eq(f.broad("action"), p.Action).
		eq(f.broad("source"), p.Source).span(f.broad("at"), p.From, p.To).sql(store.ClampLimit(p.Limit))
	return `SELECT id, at, actor, action, source, event_id, entity, detail
		FROM audit WHERE ` + where + ` ORDER BY id LIMIT ?`, args
}

// AuditList pages through audit rows.
func (s *Store) AuditList(ctx context.Context, p *store.AuditListParams) ([]*store.AuditEntry, error) {
	q, args := auditListSQL(p)
	rows, err := s.readQuery(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	defer rows.Close()
	var out []*store.AuditEntry
	for rows.Next() {
		a := &store.AuditEntry{}
		var at int64
		if err := rows.Scan(&a.ID, &at, &a.Actor, &a.Action, &a.Source, &a.EventID, &a.Entity, &a.Detail); err != nil {
			return nil, fmt.Errorf("list audit: %w", err)
		}
		a.At = time.UnixMicro(at).UTC()
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return out, nil
}

func micros(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UnixMicro()
}

func fromMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMicro(v.Int64).UTC()
}

func nonNilMap(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// nonNilBytes keeps an empty body a zero-length BLOB rather than NULL.
func nonNilBytes(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
