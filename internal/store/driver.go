package store

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/hookledger/hookledger/internal/groupcommit"
)

// The drivers run statements; the rules live here, once, and own the
// transaction (docs/architecture.md, "Where the rules live"). A driver
// offers InTx, which runs a function of the rules in one transaction of
// its database, and Tx, the statements of that transaction, each a small
// method whose params carry the rules' values (the states a pruning may
// delete, the reason a resumed call records). Rules is every operation of
// a Store made of more than one statement, written once over them: the
// transaction, the decisions, the numbers and the audit rows. A new
// driver implements statements only.

// TxKind says what a transaction is for, so that each driver runs it the
// way its database serves that best. The rules choose it; the statements
// a transaction may run are the same whatever its kind.
type TxKind int

const (
	// TxProcess is a write of the processing or delivery path: short,
	// frequent and concurrent. SQLite shares one commit between
	// concurrent ones; PostgreSQL pipelines its statements under plans
	// made once per connection.
	TxProcess TxKind = iota + 1
	// TxOperate is an operator's or a timer's write: rare, in a
	// transaction of its own.
	TxOperate
	// TxWrite is any other write that may come often or in batches
	// (publishing, a pruning batch): SQLite shares its commit as it does
	// the processing path's; PostgreSQL runs it in a plain transaction,
	// its statements planned for their arguments.
	TxWrite
	// TxSnapshot reads on one consistent snapshot and takes no lock a
	// writer would wait for.
	TxSnapshot
	// TxRead reads only, and needs no snapshot common to its statements:
	// a driver may run each apart.
	TxRead
)

// Driver is a database as the rules use it.
type Driver interface {
	// InTx runs fn in one transaction of kind and commits it when fn
	// returns nil; an error from fn or from the commit rolls the whole of
	// it back and is returned. fn runs its statements on the context it
	// is given: a driver that shares one transaction between callers
	// gives each a context that another's cancellation does not end.
	InTx(ctx context.Context, kind TxKind, fn func(ctx context.Context, tx Tx) error) error
	// Shared reports whether several processes may share the database
	// (PostgreSQL), rather than one process owning it (SQLite): routing
	// then takes its pages under row locks (RouteTx.EventsTake).
	Shared() bool
	// EventList and EventListUnrouted are the driver's own reads (Store):
	// an operation reads its result back through EventList when the
	// caller is to see it as the list shows it, and routing on a database
	// one process owns reads its pages with EventListUnrouted.
	EventList(ctx context.Context, p *EventListParams) (*EventListResult, error)
	EventListUnrouted(ctx context.Context, p *EventListUnroutedParams) ([]*RoutableEvent, error)
}

// QueuedDriver is a Driver whose writes queue for one writer (SQLite).
// InTxQueued runs fn as InTx(ctx, TxProcess, fn) does, and calls queued
// once fn is queued, callers in the order of the queue: a write queued
// after that runs after fn, in its transaction or a later one.
type QueuedDriver interface {
	InTxQueued(ctx context.Context, fn func(ctx context.Context, tx Tx) error, queued func()) error
}

// Tx is the statements of one open transaction. What each must do is
// written on its method; the SQL is the driver's. As in ApplyTx, a
// statement that answers through a pointer may be held back and sent
// with the next one that answers at once, or with Flush or the commit,
// and a failure of a statement held back is reported by the next call
// that returns an error.
type Tx interface {
	ApplyTx
	LedgerTx
	OutcomesTx
	CheckTx
	RetentionTx
	ResolveTx
	PublishTx
	ReplayTx
	RouteTx
	SignalTx
}

// Rules is the part of a Store written once for every database: each
// operation of more than one statement, over a Driver's statements. A
// driver's Store embeds it and implements the rest itself: single
// statements (lists, reads by key) and what is its own (migrations, the
// inbox's group commit, the signals' measures).
type Rules struct {
	db Driver
	// groupsAlone and settlesAlone count the groups that failed as a
	// whole and were settled one by one (FlowApplyGroup,
	// EffectSettleGroup); tests read them.
	groupsAlone, settlesAlone atomic.Int64
	// insertedClaimed counts the effects a settle inserted already
	// claimed for the delivery worker (flowclaim.go), in transactions
	// that committed or not; tests read it.
	insertedClaimed atomic.Int64
	// routeMu makes EventRouteNext's pages disjoint on a database one
	// process owns: one router at a time lists, decides and records.
	routeMu sync.Mutex
	// publisher runs concurrent publishes as groups where the database
	// does not queue writes itself (MessagePublish), and publishesAlone
	// counts the groups published one by one.
	publisher      *groupcommit.Batcher[*MessagePublishParams, PublishAnswer]
	publishesAlone atomic.Int64
}

// NewRules returns the rules over db.
func NewRules(db Driver) *Rules {
	r := &Rules{db: db}
	if _, queued := db.(QueuedDriver); !queued {
		r.publisher = groupcommit.New(r.MessagePublishGroup, publishSize, maxPublishGroupBytes)
	}
	return r
}

// InsertedClaimed reports how many effects a settle inserted already
// claimed for the delivery worker since the store was opened (flowclaim.go),
// counting those of transactions that then rolled back.
func (r *Rules) InsertedClaimed() int64 { return r.insertedClaimed.Load() }

// GroupsAlone reports how many groups of work items (FlowApplyGroup) and
// of settles (EffectSettleGroup) failed as a whole and were settled one
// by one since the store was opened: a group of valid items never does.
func (r *Rules) GroupsAlone() (applies, settles int64) {
	return r.groupsAlone.Load(), r.settlesAlone.Load()
}
