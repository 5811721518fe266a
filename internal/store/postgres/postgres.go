// Package postgres is the store driver for PostgreSQL (pgx/v5), for
// deployments where several hookledger processes share one database.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/hookledger/hookledger/internal/store"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockKey is the advisory lock that serialises migrations between
// processes starting at once ("hookledg" as a 64-bit number).
const migrationLockKey int64 = 0x686f6f6b6c656467

// uniqueViolation is SQLSTATE 23505.
const uniqueViolation = "23505"

// Store implements store.Store on PostgreSQL: the rules' operations
// (store.Rules) over its statements, and its own reads and inbox.
type Store struct {
	*store.Rules
	pool *pgxpool.Pool
	// windowCap bounds the rows an event page with a time range selects
	// by the range's index before it falls back to the pk walk
	// (eventListSQL); tests lower it.
	windowCap int
	// inboxCareful counts the inbox groups written the careful way, one
	// savepoint per submission, after the fast path failed: tests assert
	// that a valid group takes the fast path.
	inboxCareful atomic.Int64
	// pipeTrips counts the round trips of pipelined transactions
	// (pipeTx.flush): tests assert how many a path takes.
	pipeTrips atomic.Int64
}

// defaultWindowCap: a page with a time range reads at most this many rows
// of the range (about 15 ms on the machine of BENCHMARKS.md) before it
// decides the range is too wide to read first.
const defaultWindowCap = 50000

var _ store.Store = (*Store)(nil)

// DefaultMaxConns is the pool size of one process when neither the caller
// nor the URL's pool_max_conns sets one. pgx's own default is the number
// of CPUs (at least 4), which starves a process that runs 64 processing
// and delivery workers: each waits mostly on its commit, so more
// transactions in flight fill each WAL flush instead of queueing for a
// connection. 20 leaves room for several processes under PostgreSQL's
// default max_connections of 100 (docs/deploy.md counts them).
const defaultMaxConns = 20

// Open connects with a postgres:// URL. maxConns 0 takes the URL's
// pool_max_conns, or else DefaultMaxConns.
func Open(ctx context.Context, url string, maxConns int32) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's parse error can echo the URL, password included; say only
		// what is wrong with its shape.
		return nil, errors.New("open postgres: the store URL is not a valid postgres:// connection string")
	}
	switch {
	case maxConns > 0:
		cfg.MaxConns = maxConns
	case !strings.Contains(url, "pool_max_conns"):
		cfg.MaxConns = defaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", err)
	}
	s := &Store{pool: pool, windowCap: defaultWindowCap}
	s.Rules = store.NewRules(s)
	return s, nil
}

// Pool exposes the connection pool to tests and benchmarks of this driver.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Ping checks a connection answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("ping postgres: %w", err)
	}
	return nil
}

// ProbeWrite rewrites the probe row: one durable commit.
func (s *Store) ProbeWrite(ctx context.Context, now time.Time) error {
	if _, err := s.pool.Exec(ctx, `INSERT INTO probe (id, at) VALUES (1, $1)
		ON CONFLICT (id) DO UPDATE SET at = excluded.at`, now); err != nil {
		return s.unavailable("probe write", err)
	}
	return nil
}

// Migrate applies pending migrations in one transaction under an advisory
// lock: a second process starting at the same moment waits for the first
// and then finds nothing left to do. PostgreSQL DDL is transactional, so a
// failed migration leaves no half-made schema.
func (s *Store) Migrate(ctx context.Context) ([]string, error) {
	var done []string
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey); err != nil {
			return fmt.Errorf("lock: %w", err)
		}
		var err error
		done, err = store.Migrate(ctx, migrationFiles, migrationTx{tx})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("migrate postgres: %w", err)
	}
	return done, nil
}

// isUniqueViolation classifies by SQLSTATE.
func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == uniqueViolation
}

// dbErrors marks PostgreSQL's errors for the rules, by SQLSTATE.
var dbErrors = store.ErrorKinds{Unique: isUniqueViolation, Refused: isRefused}

// isRefused reports that PostgreSQL refused the values of the statement
// rather than failed itself: a data exception (class 22: text it cannot
// hold, a number out of range), a row over one of its limits (class 54)
// or a check or not-null constraint. Anything else (a lost connection, a
// lock, a full disk) is not, and the stage retries it.
func isRefused(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "54") ||
		pgErr.Code == "23502" || pgErr.Code == "23514" // not_null_violation, check_violation
}

// upsertEventSQL is inboxGroupSQL's upsert for one delivery: a new event that
// needs routing ($11) is queued for the router.
const upsertEventSQL = `WITH up AS (INSERT INTO events
	(source, event_id, type, entity, account, occurred_at, received_at, causation_id, hop, disposition, routed, deliveries, trace_context)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, true, 1, $12)
	ON CONFLICT (source, event_id) DO UPDATE SET deliveries = events.deliveries + 1
	RETURNING pk, deliveries),
	q AS (INSERT INTO route_queue (pk) SELECT pk FROM up WHERE $11::bool AND deliveries = 1)
	SELECT pk, deliveries FROM up`

const insertDeliverySQL = `INSERT INTO deliveries
	(event_pk, request_id, batch_index, source, event_id, type, entity, account, occurred_at, received_at, causation_id, hop, headers, body)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING id`

const insertAuditSQL = `INSERT INTO audit (at, actor, action, source, event_id, entity, detail)
	VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`

// inboxSavepoints writes each submission under its own savepoint.
func (s *Store) inboxSavepoints(ctx context.Context, p *store.InboxCommitParams) ([]store.SubmissionResult, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, s.unavailable("inbox commit: begin", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	results := make([]store.SubmissionResult, len(p.Submissions))
	for i, sub := range p.Submissions {
		if _, err := tx.Exec(ctx, `SAVEPOINT sub`); err != nil {
			return nil, fmt.Errorf("inbox commit: savepoint: %w", err)
		}
		items, err := commitOne(ctx, tx, sub)
		if err != nil {
			if _, rerr := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT sub`); rerr != nil {
				return nil, fmt.Errorf("inbox commit: rollback to savepoint: %w", rerr)
			}
			results[i].Err = dbErrors.MarkRefused(err)
		} else {
			results[i].Items = items
		}
		if _, err := tx.Exec(ctx, `RELEASE SAVEPOINT sub`); err != nil {
			return nil, fmt.Errorf("inbox commit: release savepoint: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, s.unavailable("inbox commit", err)
	}
	return results, nil
}

// unavailable wraps a failed commit as ErrUnavailable and, when the failure
// came from the connection itself, empties the pool. A database that
// restarted or dropped its clients leaves every pooled connection dead,
// and pgx only pings a connection that was idle for more than a second
// before handing it out: without the reset each of them would fail one
// more request (an admin read, a claim) after the database is back.
// Commits fail rarely, so closing healthy connections with the dead ones
// costs a few reconnects at most.
func (s *Store) unavailable(what string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The caller gave up (a commit slower than receive.commit_timeout
		// under load): the connections are fine.
	case !errors.As(err, &pgErr), pgErr.Code == "57P01": // 57P01 admin_shutdown: the server ended the session
		s.pool.Reset()
	}
	return fmt.Errorf("%s: %w: %w", what, store.ErrUnavailable, err)
}

func commitOne(ctx context.Context, tx pgx.Tx, sub *store.Submission) ([]store.DeliveryOutcome, error) {
	// Pipelining the statements of one submission in a batch saves a round
	// trip per statement; the delivery insert needs the event pk, so the
	// two kinds go in two batches.
	eb := &pgx.Batch{}
	for _, d := range sub.Deliveries {
		disposition := store.DispositionAccepted
		if d.Unrouted {
			disposition = store.DispositionUnrouted
		}
		eb.Queue(upsertEventSQL, d.Source, d.EventID, d.Type, d.Entity, d.Account, nullTime(d.OccurredAt), d.ReceivedAt,
			d.CausationID, d.Hop, string(disposition), !d.Unrouted, d.TraceContext)
	}
	items := make([]store.DeliveryOutcome, len(sub.Deliveries))
	br := tx.SendBatch(ctx, eb)
	for j := range sub.Deliveries {
		var n int32
		if err := br.QueryRow().Scan(&items[j].EventPK, &n); err != nil {
			br.Close()
			return nil, dbErrors.Wrap("record event", err)
		}
		items[j].Duplicate = n > 1
	}
	if err := br.Close(); err != nil {
		return nil, dbErrors.Wrap("record event", err)
	}
	db := &pgx.Batch{}
	for j, d := range sub.Deliveries {
		queueDelivery(db, d, items[j].EventPK)
	}
	audits := submissionAudits(sub, items)
	for _, a := range audits {
		db.Queue(insertAuditSQL, a.At, a.Actor, a.Action, a.Source, a.EventID, a.Entity, a.Detail)
	}
	br = tx.SendBatch(ctx, db)
	for j := range sub.Deliveries {
		if err := br.QueryRow().Scan(&items[j].DeliveryID); err != nil {
			br.Close()
			return nil, dbErrors.Wrap("record delivery", err)
		}
	}
	for range audits {
		var id int64
		if err := br.QueryRow().Scan(&id); err != nil {
			br.Close()
			return nil, dbErrors.Wrap("insert audit", err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, dbErrors.Wrap("record delivery", err)
	}
	return items, nil
}

// queueDelivery queues the insert of one delivery of event eventPK.
func queueDelivery(b *pgx.Batch, d *store.DeliveryInput, eventPK int64) {
	headers, body := storedRequest(d.Headers, d.Body)
	b.Queue(insertDeliverySQL, eventPK, d.RequestID, d.BatchIndex, d.Source, d.EventID, d.Type,
		d.Entity, d.Account, nullTime(d.OccurredAt), d.ReceivedAt, d.CausationID, d.Hop, headers, body)
}

// submissionAudits is a submission's audit rows: its own, and one per
// event stored unrouted for the first time.
func submissionAudits(sub *store.Submission, items []store.DeliveryOutcome) []*store.AuditInsertParams {
	audits := slices.Clone(sub.Audit)
	for j, d := range sub.Deliveries {
		if d.Unrouted && !items[j].Duplicate {
			audits = append(audits, store.UnroutedAudit(d))
		}
	}
	return audits
}

// AuditInsert writes one audit row.
func (s *Store) AuditInsert(ctx context.Context, a *store.AuditInsertParams) (int64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, insertAuditSQL, a.At, a.Actor, a.Action, a.Source, a.EventID, a.Entity, a.Detail).Scan(&id); err != nil {
		return 0, dbErrors.Wrap("insert audit", err)
	}
	return id, nil
}

// filter builds "col > $1 AND col2 = $2 ..." with numbered placeholders.
type filter struct {
	where []string
	args  []any
}

// add appends a condition, numbering its ? placeholders after those
// already added.
func (f *filter) add(cond string, args ...any) {
	var b strings.Builder
	for _, arg := range args {
		before, after, _ := strings.Cut(cond, "?")
		f.args = append(f.args, arg)
		b.WriteString(before + "$" + strconv.Itoa(len(f.args)))
		cond = after
	}
	b.WriteString(cond)
	f.where = append(f.where, b.String())
}

// eq adds col = v unless v is empty.
func (f *filter) eq(col, v string) {
	if v != "" {
		f.add(col+" = ?", v)
	}
}

// span adds from <= col < to for the bounds that are set.
func (f *filter) span(col string, from, to time.Time) {
	if !from.IsZero() {
		f.add(col+" >= ?", from)
	}
	if !to.IsZero() {
		f.add(col+" < ?", to)
	}
}

func (f *filter) sql(limit int) string {
	f.args = append(f.args, limit)
	return " WHERE " + strings.Join(f.where, " AND ") + " ORDER BY 1 LIMIT $" + strconv.Itoa(len(f.args))
}

// eventDisposition matches one disposition. The two common ones are written
// as literals so that accepted reads its partial index and applied the pk
// order; the others repeat the partial index's predicate so that it is
// provably usable by a generic plan.
func eventDisposition(f *filter, d store.Disposition) {
	switch d {
	case "":
	case store.DispositionAccepted:
		f.add("disposition = 'accepted'")
	case store.DispositionApplied:
		f.add("disposition = 'applied'")
	default:
		f.add("disposition = ? AND disposition NOT IN ('accepted', 'applied')", string(d))
	}
}

// EventList pages through events.
func (s *Store) EventList(ctx context.Context, p *store.EventListParams) (*store.EventListResult, error) {
	limit := store.ClampLimit(p.Limit)
	events, err := s.eventPage(ctx, p, limit+1, true)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out, err := store.EventListPage(ctx, p, events, limit, s.eventRoutes)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}

// eventPage reads one page of limit rows. With a time range it reads the
// range first (window), unless the range holds more than windowCap rows:
// then the page is read again by the pk walk.
func (s *Store) eventPage(ctx context.Context, p *store.EventListParams, limit int, window bool) ([]*store.Event, error) {
	q, args, windowed := eventListQuery(p, limit, window, s.windowCap)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	matched := 0
	events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Event, error) {
		e := &store.Event{}
		var occ *time.Time
		dest := []any{&e.PK, &e.Source, &e.EventID, &e.Type, &e.Entity, &e.Account, &occ, &e.ReceivedAt, &e.Deliveries, &e.Disposition}
		if windowed {
			dest = append(dest, &matched)
		}
		if err := r.Scan(dest...); err != nil {
			return nil, err
		}
		e.OccurredAt = fromNull(occ)
		e.ReceivedAt = e.ReceivedAt.UTC()
		return e, nil
	})
	if err != nil {
		return nil, err
	}
	if windowed && matched > s.windowCap {
		return s.eventPage(ctx, p, limit, false)
	}
	return events, nil
}

// eventListQuery is EventList's query and arguments for a page of limit
// rows, and whether it is the windowed form (eventListSQL).
func eventListQuery(p *store.EventListParams, limit int, window bool, windowCap int) (string, []any, bool) {
	f := &filter{}
	f.add("pk > ?", p.AfterPK)
	f.eq("source", p.Source)
	f.eq("type", p.Type)
	switch {
	case p.EventID != "" && p.Source != "":
		f.add("event_id = ?", p.EventID)
	case p.EventID != "":
		f.add(store.EventIDAnySourceSQL, p.EventID)
	}
	if p.Entity != "" {
		f.add(store.EventEntitySQL, p.Entity, p.AfterPK, p.Entity, p.AfterPK)
	}
	eventDisposition(f, p.Disposition)
	f.span("received_at", p.ReceivedFrom, p.ReceivedTo)
	f.span("occurred_at", p.OccurredFrom, p.OccurredTo)
	timed := window && (!p.ReceivedFrom.IsZero() || !p.ReceivedTo.IsZero() || !p.OccurredFrom.IsZero() || !p.OccurredTo.IsZero())
	if !timed {
		return `SELECT ` + store.EventColumnsSQL + ` FROM events` + f.sql(limit), f.args, false
	}
	return eventWindowSQL(f, limit, windowCap), f.args, true
}

// eventWindowSQL is the query of a page in pk order with a time range.
// There the planner's estimate fails: it assumes the range's rows are
// spread evenly over the pk index, so that walking the index from the
// cursor finds a page of them at once, but events are received (and
// occur) in about pk order, so the walk reads every row before the range
// first: half the table for a window in the middle of it. Here the
// matching pks are selected in a materialized CTE, which has no order to
// walk the pk index for, so its plan reads the range's index
// (events_received, events_occurred) or a more selective filter's; the
// page is the top of those pks, then its rows. The CTE stops after
// windowCap+1 rows, and every row carries the CTE's count: a count over
// windowCap means the range is too wide to read first (and the page is
// not complete), and the caller reads it by the pk walk, which a wide
// range does not slow down.
func eventWindowSQL(f *filter, limit, windowCap int) string {
	f.args = append(f.args, windowCap+1, limit)
	n := len(f.args)
	return `WITH matched AS MATERIALIZED (SELECT pk FROM events WHERE ` + strings.Join(f.where, " AND ") +
		` LIMIT $` + strconv.Itoa(n-1) + `),
	page AS (SELECT pk FROM matched ORDER BY pk LIMIT $` + strconv.Itoa(n) + `)
	SELECT ` + prefixed("e.", store.EventColumnsSQL) + `, (SELECT count(*) FROM matched)
	FROM events e JOIN page USING (pk) ORDER BY e.pk`
}

// prefixed qualifies each of a comma-separated list of columns.
func prefixed(prefix, cols string) string {
	parts := strings.Split(cols, ", ")
	for i := range parts {
		parts[i] = prefix + parts[i]
	}
	return strings.Join(parts, ", ")
}

// eventRoutes fills the routes of a page of events from their work rows:
// per flow, the latest pass.
func (s *Store) eventRoutes(ctx context.Context, evs []*store.Event) error {
	return store.FillEventRoutes(evs, func(pks []int64, add func(int64, store.EventRoute)) error {
		// Flows sort in byte order, as SQLite sorts them.
		rows, err := s.pool.Query(ctx, `SELECT event_pk, flow, entity, disposition, reason FROM work
			WHERE event_pk = ANY($1) ORDER BY event_pk, flow COLLATE "C", replay_id`, pks)
		if err != nil {
			return fmt.Errorf("routes: %w", err)
		}
		var pk int64
		var r store.EventRoute
		if _, err := pgx.ForEachRow(rows, []any{&pk, &r.Flow, &r.Entity, &r.Disposition, &r.Reason}, func() error {
			add(pk, r)
			return nil
		}); err != nil {
			return fmt.Errorf("routes: %w", err)
		}
		return nil
	})
}

// deliveryListQuery is DeliveryList's statement and arguments.
func deliveryListQuery(p *store.DeliveryListParams) (string, []any) {
	f := &filter{}
	f.add("id > ?", p.AfterID)
	if p.Source != "" && p.EventID != "" {
		// One event's deliveries are found through the event: its unique
		// (source, event_id) names its pk, and deliveries_event holds its
		// deliveries in id order. An index on the deliveries' own copy of
		// the pair (dropped by 0024) cost every webhook an entry at a
		// random place, its keys being the senders' ids.
		f.add("event_pk = (SELECT pk FROM events WHERE source = ? AND event_id = ?)", p.Source, p.EventID)
	} else {
		f.eq("source", p.Source)
		f.eq("event_id", p.EventID)
	}
	where := f.sql(store.ClampLimit(p.Limit))
	body := "body"
	if p.BodyPrefix > 0 {
		f.args = append(f.args, p.BodyPrefix)
		body = "substring(body from 1 for $" + strconv.Itoa(len(f.args)) + ")"
	}
	return `SELECT id, event_pk, request_id, batch_index, source, event_id, type, entity, account, occurred_at,
		received_at, causation_id, hop, headers, ` + body + `, octet_length(body) FROM deliveries` + where, f.args
}

// DeliveryList pages through deliveries.
func (s *Store) DeliveryList(ctx context.Context, p *store.DeliveryListParams) ([]*store.Delivery, error) {
	q, args := deliveryListQuery(p)
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Delivery, error) {
		d := &store.Delivery{}
		var occ *time.Time
		var batch int32
		if err := r.Scan(&d.ID, &d.EventPK, &d.RequestID, &batch, &d.Source, &d.EventID, &d.Type, &d.Entity,
			&d.Account, &occ, &d.ReceivedAt, &d.CausationID, &d.Hop, &d.Headers, &d.Body, &d.BodySize); err != nil {
			return nil, err
		}
		d.BatchIndex = int(batch)
		d.OccurredAt = fromNull(occ)
		d.ReceivedAt = d.ReceivedAt.UTC()
		return d, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list deliveries: %w", err)
	}
	return out, nil
}

// AuditList pages through audit rows.
func (s *Store) AuditList(ctx context.Context, p *store.AuditListParams) ([]*store.AuditEntry, error) {
	f := &filter{}
	f.add("id > ?", p.AfterID)
	f.eq("action", p.Action)
	f.eq("source", p.Source)
	f.eq("entity", p.Entity)
	f.eq("event_id", p.EventID)
	f.span("at", p.From, p.To)
	q := `SELECT id, at, actor, action, source, event_id, entity, detail FROM audit` + f.sql(store.ClampLimit(p.Limit))
	rows, err := s.pool.Query(ctx, q, f.args...)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.AuditEntry, error) {
		a := &store.AuditEntry{}
		if err := r.Scan(&a.ID, &a.At, &a.Actor, &a.Action, &a.Source, &a.EventID, &a.Entity, &a.Detail); err != nil {
			return nil, err
		}
		a.At = a.At.UTC()
		return a, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", err)
	}
	return out, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func fromNull(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}
