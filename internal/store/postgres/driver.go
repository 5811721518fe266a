package postgres

import (
	"context"
	"fmt"

	"github.com/hookledger/hookledger/internal/store"
)

// The store is the rules' driver (store.Driver) on its pool. Every
// transaction is a pipe (pipeTx): a statement whose answer the rules do
// not need at once waits for the next one that answers, so a transaction
// costs the round trips of its reads, not of its statements.
var _ store.Driver = (*Store)(nil)

// InTx runs the processing path's transactions under the plan settings
// of pipePlanSQL (generic plans, made once per connection); any other
// write in a plain READ COMMITTED transaction whose statements are planned
// for their arguments; a snapshot in a REPEATABLE READ READ ONLY
// transaction, which takes no row lock, so writers never wait for it;
// and reads apart from any transaction.
func (s *Store) InTx(ctx context.Context, kind store.TxKind, fn func(ctx context.Context, tx store.Tx) error) error {
	var t *pipeTx
	var err error
	switch kind {
	case store.TxProcess:
		t, err = s.beginPipe(ctx, pipePlanSQL)
	case store.TxOperate, store.TxWrite:
		if t, err = s.acquirePipe(ctx); err == nil {
			t.begin("BEGIN")
		}
	case store.TxSnapshot:
		if t, err = s.acquirePipe(ctx); err == nil {
			t.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
		}
	case store.TxRead:
		t, err = s.acquirePipe(ctx)
	default:
		return fmt.Errorf("transaction of unknown kind %d", kind)
	}
	if err != nil {
		return err
	}
	return s.runPipe(ctx, t, func(t *pipeTx) error { return fn(ctx, txn{t}) })
}

// txn is store.Tx on a pipelined transaction: a method that returns only
// an error queues its statement (pipeTx), or holds it to be sent as one
// statement with its kind (held); one that answers sends what is queued
// with its own statement.
type txn struct{ t *pipeTx }

var _ store.Tx = txn{}
