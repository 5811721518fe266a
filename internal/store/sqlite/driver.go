package sqlite

import (
	"context"
	"fmt"

	"github.com/hookledger/hookledger/internal/store"
)

// The store is the rules' driver (store.Driver): writes on the one writer
// connection, reads on the reader pool.
var (
	_ store.Driver       = (*Store)(nil)
	_ store.QueuedDriver = (*Store)(nil)
)

// InTx runs the processing path's writes and the other frequent ones
// (publishing, pruning batches) in the shared write transaction
// (batch.go), where concurrent callers share one commit; an operator's
// or a timer's write in a transaction of its own on the writer, which
// must not share the fate of a batch of pipeline writes; and reads in a
// read transaction of a reader connection, which WAL gives a snapshot of
// the last commit without taking the write lock.
func (s *Store) InTx(ctx context.Context, kind store.TxKind, fn func(ctx context.Context, tx store.Tx) error) error {
	switch kind {
	case store.TxProcess, store.TxWrite:
		return s.inTx(ctx, func(ctx context.Context, tx *wtx) error { return fn(ctx, txn{tx}) })
	case store.TxOperate:
		return s.writeTx(ctx, func(tx *wtx) error { return fn(ctx, txn{tx}) })
	case store.TxSnapshot, store.TxRead:
		return s.readTx(ctx, func(tx *wtx) error { return fn(ctx, txn{tx}) })
	}
	return fmt.Errorf("transaction of unknown kind %d", kind)
}

// InTxQueued runs fn as InTx(ctx, store.TxProcess, fn) does, calling
// queued once fn's job is queued for the writer (store.QueuedDriver).
func (s *Store) InTxQueued(ctx context.Context, fn func(ctx context.Context, tx store.Tx) error, queued func()) error {
	return s.inTxQueued(ctx, func(ctx context.Context, tx *wtx) error { return fn(ctx, txn{tx}) }, queued)
}

// writeTx runs fn in one immediate transaction on the writer connection.
func (s *Store) writeTx(ctx context.Context, fn func(tx *wtx) error) error {
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w: %w", store.ErrUnavailable, err)
	}
	defer tx.Rollback() //nolint:errcheck // no-op after commit
	if err := fn(&wtx{Tx: tx, s: s}); err != nil {
		return dbErrors.MarkRefused(err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w: %w", store.ErrUnavailable, err)
	}
	return nil
}

// readTx runs fn in a read transaction of a reader connection. Its
// statements are neither cached nor asked for faults (a wtx without its
// store): Options.Faults concerns writes.
func (s *Store) readTx(ctx context.Context, fn func(tx *wtx) error) error {
	tx, err := s.reader.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // read only
	return fn(&wtx{Tx: tx})
}

// txn is store.Tx on one SQLite transaction: every statement runs when it
// is called. A write transaction holds the database's only write lock, so
// nothing it read can change before it commits: no row locks are needed.
type txn struct{ tx *wtx }

var _ store.Tx = txn{}
