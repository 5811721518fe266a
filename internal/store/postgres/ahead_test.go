package postgres

import (
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// TestGroupAheadAnswer: the read taken with routing's lease answers
// ReadGroup only for items of entities the lease holds under the items'
// token, read with their events, and only while nothing was queued or
// held on the transaction since; its answer holds the work rows of the
// items' events and no others.
func TestGroupAheadAnswer(t *testing.T) {
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	work := []store.BatchWork{
		{WorkID: 1, Flow: "orders", Entity: "o-1", EventPK: 10},
		{WorkID: 2, Flow: "audit", Entity: "o-1", EventPK: 10}, // another flow's row of the same event
		{WorkID: 3, Flow: "orders", Entity: "o-2", EventPK: 11},
	}
	ahead := func() *groupAhead {
		return &groupAhead{
			entities: map[[2]string]aheadEntity{
				{"orders", "o-1"}: {token: "router:a", until: at.Add(time.Minute), read: store.EntityRead{Version: "3", VersionSort: "03", State: []byte(`{"n":3}`), Pending: 1}},
				{"orders", "o-2"}: {token: "router:b", until: at.Add(time.Minute), read: store.EntityRead{Pending: 2}},
			},
			work: work, statements: 7,
		}
	}
	sub := func(entity, token string, now time.Time, ids ...int64) []*store.FlowApplyParams {
		l := &store.Lease{Flow: "orders", Entity: entity, Token: token}
		ps := make([]*store.FlowApplyParams, len(ids))
		for i, id := range ids {
			ps[i] = &store.FlowApplyParams{Lease: l, WorkID: id, Now: now}
		}
		return ps
	}
	fresh := func() *pipeTx { return &pipeTx{batch: &pgx.Batch{}, statements: 7} }

	got := ahead().answer(fresh(), [][]*store.FlowApplyParams{sub("o-1", "router:a", at, 1)})
	want := &store.GroupRead{
		Entities: []*store.EntityRead{{Version: "3", VersionSort: "03", State: []byte(`{"n":3}`), Pending: 1}},
		Work:     work[:2],
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("answer = %+v, want %+v", got, want)
	}
	if got := ahead().answer(fresh(), [][]*store.FlowApplyParams{sub("o-1", "router:a", at, 1), sub("o-2", "router:b", at, 3)}); got == nil ||
		len(got.Entities) != 2 || got.Entities[1].Pending != 2 || len(got.Work) != 3 {
		t.Fatalf("answer for two entities = %+v, want both, with all three work rows", got)
	}

	queued := fresh()
	queued.exec("settle work", `SELECT 1`)
	held := fresh()
	held.held.setDisposition(10, store.DispositionApplied)
	for _, c := range []struct {
		name string
		t    *pipeTx
		subs [][]*store.FlowApplyParams
	}{
		{"a statement queued since", queued, [][]*store.FlowApplyParams{sub("o-1", "router:a", at, 1)}},
		{"a write held since", held, [][]*store.FlowApplyParams{sub("o-1", "router:a", at, 1)}},
		{"another token", fresh(), [][]*store.FlowApplyParams{sub("o-1", "router:z", at, 1)}},
		{"a lease run out", fresh(), [][]*store.FlowApplyParams{sub("o-1", "router:a", at.Add(time.Minute), 1)}},
		{"an entity not leased", fresh(), [][]*store.FlowApplyParams{sub("o-9", "router:a", at, 1)}},
		{"an item not read", fresh(), [][]*store.FlowApplyParams{sub("o-1", "router:a", at, 1, 99)}},
		{"an item of another entity", fresh(), [][]*store.FlowApplyParams{sub("o-1", "router:a", at, 3)}},
	} {
		if got := ahead().answer(c.t, c.subs); got != nil {
			t.Errorf("%s: answer = %+v, want none (ReadGroup reads)", c.name, got)
		}
	}
	var none *groupAhead
	if got := none.answer(fresh(), [][]*store.FlowApplyParams{sub("o-1", "router:a", at, 1)}); got != nil {
		t.Errorf("no read ahead answered %+v", got)
	}
}
