package postgres

import (
	"context"
	"fmt"

	"github.com/hookledger/hookledger/internal/store"
)

// driver is store.Driver on the pool. Every transaction is a pipe
// (pipeTx): a statement whose answer the rules do not need at once waits
// for the next one that answers, so a transaction costs the round trips
// of its reads, not of its statements.
type driver struct{ s *Store }

var _ store.Driver = driver{}

// InTx runs the processing path's transactions under the plan settings
// of pipePlanSQL (generic plans, made once per connection); any other
// write in a plain READ COMMITTED transaction whose statements are planned
// for their arguments; a snapshot in a REPEATABLE READ READ ONLY
// transaction, which takes no row lock, so writers never wait for it;
// and reads apart from any transaction.
func (d driver) InTx(ctx context.Context, kind store.TxKind, fn func(ctx context.Context, tx store.Tx) error) error {
	var t *pipeTx
	var err error
	switch kind {
	case store.TxProcess:
		t, err = d.s.beginPipe(ctx, pipePlanSQL)
	case store.TxOperate, store.TxWrite:
		if t, err = d.s.acquirePipe(ctx); err == nil {
			t.begin("BEGIN")
		}
	case store.TxSnapshot:
		if t, err = d.s.acquirePipe(ctx); err == nil {
			t.begin("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
		}
	case store.TxRead:
		t, err = d.s.acquirePipe(ctx)
	default:
		return fmt.Errorf("transaction of unknown kind %d", kind)
	}
	if err != nil {
		return err
	}
	return d.s.runPipe(ctx, t, func(t *pipeTx) error { return fn(ctx, txn{t}) })
}

func (d driver) EventList(ctx context.Context, p *store.EventListParams) (*store.EventListResult, error) {
	return d.s.EventList(ctx, p)
}
