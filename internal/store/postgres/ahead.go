package postgres

import (
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// A routing page that settles its leases' work reads, after the lease,
// what the settle's ReadGroup would read: the leased entities'
// projections, their listed items' events locked, and every work row of
// those events. Read with the lease, in the same round trip, a lone
// webhook's routing takes four round trips instead of five
// (TestLoneWebhookRoutingRoundTrips); every round trip is a wake-up of
// the server and of PostgreSQL (docs/benchmarks-history.md, "Run AJ").
//
// The read is ReadGroup's own, taken earlier in the same transaction.
// The lease holds each entity's row lock from its UPDATE, so nothing
// changes a projection or the count of its pending items until the
// commit; the events are locked in pk order after the entities, as
// ReadGroup locks them; and the work rows are read by a statement after
// the lock, for the reason ReadGroup gives. The read covers every item
// the lease listed, and the settle may take fewer (an entity whose flow
// it leaves to the processor): their events stay locked until routing
// commits, milliseconds later, as the settled ones do.
//
// ReadGroup takes the read only while nothing was queued on the
// transaction since, and only when every item it is asked for belongs to
// an entity this lease holds under the token the item names, and to an
// event the read locked; otherwise it reads as it always did.

// listedWork is the ids of the items leaseAheadSQL listed: it leaves them
// in a setting of the transaction, where the statements sent after it in
// the same round trip find them. Where the lease took no entity, the
// setting may be unset, and the ids are none.
const listedWork = `coalesce(nullif(current_setting('hookledger.listed_work', true), ''), '{}')::bigint[]`

// leaseAheadSQL is leaseListedSQL that also answers each leased entity's
// projection (version, version_sort, state, pending, after the lease's
// UPDATE) and sets listedWork: the first $5 pending items of each leased
// entity, as the listing reads them.
const leaseAheadSQL = `/* routing's pipe, read ahead */ WITH c AS MATERIALIZED (` + entityReadySQL + `),
	l AS (` + entityLeaseSQL + `, e.version, e.version_sort, e.state::text AS state, e.pending),
	s AS MATERIALIZED (SELECT set_config('hookledger.listed_work',
		coalesce((SELECT array_agg(w.id) FROM l CROSS JOIN LATERAL (` + leasedPendingSQL + `) w), '{}')::text, true) AS listed)
	SELECT l.not_before, l.flow, l.entity, l.lease_token, l.lease_until, i.*, l.version, l.version_sort, l.state, l.pending
	FROM l CROSS JOIN s ` + leasedItemsSQL

// groupAhead is ReadGroup's read, taken with routing's lease.
type groupAhead struct {
	entities map[[2]string]aheadEntity // by flow and entity
	work     []store.BatchWork
	// statements is the transaction's count of statements queued
	// (pipeTx.statements) once the read was queued.
	statements int
}

// aheadEntity is a leased entity as its lease left it.
type aheadEntity struct {
	token string
	until time.Time
	read  store.EntityRead
}

// takeAhead hands over the read taken ahead, if any: it answers one
// ReadGroup at most.
func (t *pipeTx) takeAhead() *groupAhead {
	g := t.ahead
	t.ahead = nil
	return g
}

// answer is ReadGroup's answer for subs from the read ahead, or nil when
// it cannot give it: a statement was queued or a write held since, or an
// item of subs is not one of the read's, of an entity the lease holds
// under the item's token.
func (g *groupAhead) answer(t *pipeTx, subs [][]*store.FlowApplyParams) *store.GroupRead {
	if g == nil || g.statements != t.statements || !t.held.empty() {
		return nil
	}
	byID := make(map[int64]*store.BatchWork, len(g.work))
	for i := range g.work {
		byID[g.work[i].WorkID] = &g.work[i]
	}
	rd := &store.GroupRead{Entities: make([]*store.EntityRead, len(subs))}
	events := map[int64]bool{}
	for i, ps := range subs {
		l := ps[0].Lease
		e, ok := g.entities[[2]string{l.Flow, l.Entity}]
		if !ok || e.token != l.Token || !e.until.After(ps[0].Now) {
			return nil
		}
		read := e.read
		rd.Entities[i] = &read
		for _, p := range ps {
			w := byID[p.WorkID]
			if w == nil || w.Flow != l.Flow || w.Entity != l.Entity {
				return nil
			}
			events[w.EventPK] = true
		}
	}
	for _, w := range g.work {
		if events[w.EventPK] {
			rd.Work = append(rd.Work, w)
		}
	}
	return rd
}
