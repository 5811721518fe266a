package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	conn   *pgxpool.Conn
	batch  *pgx.Batch
	labels []string
	// audits wait to be written as one multi-row insert, queued before
	// the next read or COMMIT: a settle writes three or four audit rows,
	// and one statement costs the database less than four.
	audits []*store.AuditInsertParams
}

// beginPipe takes a connection and queues BEGIN.
func (s *Store) beginPipe(ctx context.Context) (*pipeTx, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	t := &pipeTx{conn: conn, batch: &pgx.Batch{}}
	t.exec("begin", "BEGIN")
	return t, nil
}

// exec queues a statement whose result only matters as success.
func (t *pipeTx) exec(label, sql string, args ...any) {
	t.batch.Queue(sql, args...)
	t.labels = append(t.labels, label)
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
	n := len(t.audits)
	at := make([]time.Time, n)
	actor, action, source, eventID, entity, detail := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n)
	for i, a := range t.audits {
		at[i], actor[i], action[i], source[i], eventID[i], entity[i], detail[i] = a.At, a.Actor, a.Action, a.Source, a.EventID, a.Entity, a.Detail
	}
	t.audits = t.audits[:0]
	t.exec("insert audit", `INSERT INTO audit (at, actor, action, source, event_id, entity, detail)
		SELECT at, actor, action, source, event_id, entity, detail
		FROM unnest($1::timestamptz[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[])
			WITH ORDINALITY AS a(at, actor, action, source, event_id, entity, detail, n)
		ORDER BY n`, at, actor, action, source, eventID, entity, detail)
}

// query sends the queue and then sql, and hands sql's rows to scan.
func (t *pipeTx) query(ctx context.Context, label, sql string, args []any, scan func(pgx.Rows) error) error {
	t.queueAudits()
	t.batch.Queue(sql, args...)
	t.labels = append(t.labels, label)
	return t.flush(ctx, scan)
}

// flush sends the queue; when last is not nil, the last queued statement
// returns rows and last reads them.
func (t *pipeTx) flush(ctx context.Context, last func(pgx.Rows) error) error {
	if t.batch.Len() == 0 {
		return nil
	}
	b, labels := t.batch, t.labels
	t.batch, t.labels = &pgx.Batch{}, nil
	br := t.conn.SendBatch(ctx, b)
	n := len(labels)
	if last != nil {
		n--
	}
	for i := range n {
		if _, err := br.Exec(); err != nil {
			br.Close()
			return fmt.Errorf("%s: %w", labels[i], err)
		}
	}
	if last != nil {
		rows, err := br.Query()
		if err == nil {
			err = last(rows)
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			br.Close()
			return fmt.Errorf("%s: %w", labels[len(labels)-1], err)
		}
	}
	return br.Close()
}

// sendScan sends the queue, whose first skip statements (BEGIN) return
// nothing to look at; scan reads the result row of each statement after
// them, numbered from 0, except a final COMMIT. The statements were queued
// on t.batch directly (no labels): the caller's scan names what failed.
func (t *pipeTx) sendScan(ctx context.Context, skip int, scan func(i int, row pgx.Row) error) error {
	b := t.batch
	t.batch, t.labels = &pgx.Batch{}, nil
	n := b.Len()
	commit := n > 0 && b.QueuedQueries[n-1].SQL == "COMMIT"
	br := t.conn.SendBatch(ctx, b)
	for i := range n {
		var err error
		switch {
		case i < skip || (commit && i == n-1):
			_, err = br.Exec()
		default:
			err = scan(i-skip, br.QueryRow())
		}
		if err != nil {
			br.Close()
			return err
		}
	}
	return br.Close()
}

// commit sends what is queued with COMMIT and gives the connection back.
func (t *pipeTx) commit(ctx context.Context) error {
	t.queueAudits()
	t.exec("commit", "COMMIT")
	err := t.flush(ctx, nil)
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

// inPipe runs fn in a pipelined transaction and commits it; any error
// rolls the whole of it back.
func (s *Store) inPipe(ctx context.Context, fn func(*pipeTx) error) error {
	t, err := s.beginPipe(ctx)
	if err != nil {
		return err
	}
	if err := fn(t); err != nil {
		t.rollback()
		return err
	}
	return t.commit(ctx)
}

// rollbackTimeout bounds the ROLLBACK of a failed pipelined transaction.
const rollbackTimeout = 5 * time.Second
