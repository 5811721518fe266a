package storetest

import (
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// testReplayInBatches: a replay of more events than one batch takes is
// written in batches of at most ReplayBatchMost events, each atomic. The
// replay is recorded unplanned first; between two batches (where a crash
// or a failed batch leaves it) its items are exactly the work rows
// enqueued so far and no "replay" audit row claims it complete; a batch
// over the bound is refused whole; the last batch and ReplayFinish make it
// planned and audited with every item. ReplayProgress counts its settled
// work by disposition and the effects its work created, not those its
// events caused before.
func testReplayInBatches(t *testing.T, o Opener) {
	f := newPipe(t, o)
	n := store.ReplayBatchMost + 2
	var ds []*store.DeliveryInput
	for i := range n {
		d := delivery("crm", fmt.Sprintf("evt_%05d", i), 0)
		d.Type, d.Entity = "deal.updated", "bulk"
		ds = append(ds, d)
	}
	res := commit(t, f.s, one(ds...))
	if res[0].Err != nil || len(res[0].Items) != n {
		t.Fatalf("store %d events: %+v", n, res[0])
	}
	pks := make([]int64, n)
	for i, it := range res[0].Items {
		pks[i] = it.EventPK
	}
	// The last event's first pass created its effect before the replay.
	last := pks[n-1]
	f.route(t0, to(last, rt("deals", "x", "1")))
	f.step("deals", "x", t0, rev(1, `{}`, eff("deals:x:r1:notify", "notify")))

	at := t0.Add(time.Hour)
	p := &store.ReplayCreateParams{Now: at, Actor: "operator:ann", Selection: "everything"}
	progress := func(id int64, want store.ReplayProgress) {
		t.Helper()
		got, err := f.s.ReplayProgress(f.ctx, id)
		if err != nil || got == nil || got.Planned != want.Planned || got.Items != want.Items || got.EffectsCreated != want.EffectsCreated ||
			!maps.Equal(got.Settled, want.Settled) {
			t.Fatalf("ReplayProgress(%d) = %+v, %v; want %+v", id, got, err, want)
		}
	}
	id, err := f.s.ReplayBegin(f.ctx, p)
	if err != nil || id <= 0 {
		t.Fatalf("ReplayBegin: %d %v", id, err)
	}
	progress(id, store.ReplayProgress{Settled: map[store.Disposition]int64{}})
	if started, done := f.audit("replay_started"), f.audit("replay"); len(started) != 1 || len(done) != 0 ||
		started[0].Detail != fmt.Sprintf("replay %d: started for everything", id) {
		t.Fatalf("audit after ReplayBegin: started %+v, replay %+v", started, done)
	}

	bulk := func(from, to int) []*store.RouteDecision {
		var out []*store.RouteDecision
		for i := from; i < to; i++ {
			out = append(out, &store.RouteDecision{EventPK: pks[i], Routes: []store.Route{rt("deals", "bulk", fmt.Sprintf("%06d", i))}})
		}
		return out
	}
	work := f.workCount()
	p.Decisions = bulk(0, store.ReplayBatchMost+1)
	if _, err := f.s.ReplayEnqueue(f.ctx, id, p); err == nil {
		t.Fatalf("ReplayEnqueue took %d events in one batch; want at most %d", len(p.Decisions), store.ReplayBatchMost)
	}
	if w := f.workCount(); w != work {
		t.Fatalf("a refused batch enqueued %d work items", w-work)
	}
	progress(id, store.ReplayProgress{Settled: map[store.Disposition]int64{}})

	p.Decisions = bulk(0, store.ReplayBatchMost)
	if items, err := f.s.ReplayEnqueue(f.ctx, id, p); err != nil || items != int64(store.ReplayBatchMost) {
		t.Fatalf("first batch: %d %v", items, err)
	}
	// Between two batches: the items are the work enqueued, unplanned.
	progress(id, store.ReplayProgress{Items: int64(store.ReplayBatchMost), Settled: map[store.Disposition]int64{}})
	if done := f.audit("replay"); len(done) != 0 {
		t.Fatalf("replay audited complete before its last batch: %+v", done)
	}
	p.Decisions = append(bulk(store.ReplayBatchMost, n-1), to(last, rt("deals", "x", "1")))
	if items, err := f.s.ReplayEnqueue(f.ctx, id, p); err != nil || items != int64(n) {
		t.Fatalf("second batch: %d %v; want every item", items, err)
	}
	if err := f.s.ReplayFinish(f.ctx, id, p); err != nil {
		t.Fatalf("ReplayFinish: %v", err)
	}
	progress(id, store.ReplayProgress{Planned: true, Items: int64(n), Settled: map[store.Disposition]int64{}})
	if done := f.audit("replay"); len(done) != 1 || done[0].Detail != fmt.Sprintf("replay %d: %d work items for everything", id, n) {
		t.Fatalf("replay audit = %+v", done)
	}
	if w := f.workCount(); w != work+int64(n) {
		t.Fatalf("WorkCount = %d, want %d more", w, n)
	}

	// The last event's effect is in the ledger already: not created by the
	// replay. A bulk item creates one.
	if r := f.step("deals", "x", at, rev(1, `{}`, eff("deals:x:r1:notify", "notify"))); r.Disposition != store.DispositionDuplicate {
		t.Fatalf("replay of x: %+v", r)
	}
	if r := f.step("deals", "bulk", at, rev(1, `{}`, eff("deals:bulk:r1:notify", "notify"))); r.Disposition != store.DispositionApplied || r.EffectsInserted != 1 {
		t.Fatalf("replay of a bulk item: %+v", r)
	}
	progress(id, store.ReplayProgress{Planned: true, Items: int64(n), EffectsCreated: 1,
		Settled: map[store.Disposition]int64{store.DispositionDuplicate: 1, store.DispositionApplied: 1}})
	if got, err := f.s.ReplayProgress(f.ctx, id+1000); got != nil || err != nil {
		t.Fatalf("ReplayProgress of no replay = %+v, %v; want nil, nil", got, err)
	}
}
