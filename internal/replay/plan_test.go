package replay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hookledger/hookledger/internal/replay"
	"github.com/hookledger/hookledger/internal/store"
)

// A plan counts the work a replay would enqueue and the effects the ledger
// already holds of it, and writes nothing; the replay it describes then
// creates exactly the effects the plan said it may.
func TestPlanCountsLedgerAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	eng := f.engine("event.rev")
	f.send("e1", `{"order_id":"o1","rev":1,"customer":{"name":"a"}}`)
	f.send("e2", `{"order_id":"o1","rev":2,"customer":{"name":"a"}}`)
	f.send("e3", `{"order_id":"o2","rev":1,"customer":{"name":"b"}}`)
	f.send("ebad", `{"order_id":"o3","revision":5,"customer":{"name":"c"}}`) // no rev: its route fails
	if err := eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	effects, err := f.st.EffectList(ctx, &store.EffectListParams{})
	if err != nil || len(effects) != 3 {
		t.Fatalf("effects after processing: %d %v; want one per applied event", len(effects), err)
	}
	audit := func() int {
		rows, err := f.st.AuditList(ctx, &store.AuditListParams{Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return len(rows)
	}
	before := audit()

	p, err := replay.MakePlan(ctx, f.st, eng, replay.Selection{Source: "shop"}, replay.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Events != 3 || p.WorkItems != 3 || p.Skipped != 1 || p.Entities != 2 || p.InLedger != 3 || p.MayCreate != 0 ||
		p.Unchecked != 0 || p.ByState[store.EffectApproved] != 2 || p.ByState[store.EffectSuperseded] != 1 || len(p.Samples) != 3 {
		t.Fatalf("plan %+v; want 3 events and items over 2 entities, ebad skipped, their 3 effects in the ledger (r1 superseded by r2), none to create", p)
	}
	if after := audit(); after != before {
		t.Fatalf("the plan wrote %d audit rows", after-before)
	}
	if pending, err := f.st.WorkCount(ctx); err != nil || pending != 0 {
		t.Fatalf("the plan enqueued work: %d %v", pending, err)
	}

	// Past MaxEntities the ledger is not read, and the plan says so.
	p, err = replay.MakePlan(ctx, f.st, eng, replay.Selection{Source: "shop"}, replay.PlanOptions{MaxEntities: 1, Samples: 1})
	if err != nil || p.Unchecked != 1 || p.InLedger != 2 || p.Entities != 2 || len(p.Samples) != 1 {
		t.Fatalf("bounded plan %+v %v; want o1 read (2 effects), o2 unchecked, one sample", p, err)
	}

	// With its revision read from the right field, ebad's route works: the
	// plan says its work may create an effect, and the replay creates one.
	fixed := f.engine(`has(event.rev) ? event.rev : event.revision`)
	sel := replay.Selection{Source: "shop", Entity: "o3"}
	p, err = replay.MakePlan(ctx, f.st, fixed, sel, replay.PlanOptions{})
	if err != nil || p.WorkItems != 1 || p.MayCreate != 1 || p.InLedger != 0 || p.Samples[0].Entity != "o3" {
		t.Fatalf("plan of o3: %+v %v", p, err)
	}
	res, err := replay.Run(ctx, f.st, fixed, sel, f.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := fixed.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := replay.NewWatcher(f.st, res).Poll(ctx)
	if err != nil || out.EffectsCreated != p.MayCreate || !out.Done() {
		t.Fatalf("replay of o3: %+v %v; want the %d effect the plan announced", out, err, p.MayCreate)
	}

	// The time bounds select by receipt, in the store.
	if _, err := replay.MakePlan(ctx, f.st, eng, replay.Selection{From: f.clk.Now().Add(1)}, replay.PlanOptions{}); !errors.Is(err, replay.ErrNothingSelected) {
		t.Fatalf("plan after every receipt: %v, want ErrNothingSelected", err)
	}
}

// A plan bounded by MaxScan stops after the page that reaches it and says
// so; without the bound it reads every event.
func TestPlanStopsAtMaxScan(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	eng := f.engine("event.rev")
	var ds []*store.DeliveryInput
	for i := range 501 {
		ds = append(ds, &store.DeliveryInput{RequestID: "bulk", BatchIndex: i, Source: "shop", EventID: fmt.Sprint("b", i),
			Type: "order.updated", ReceivedAt: f.clk.Now(), Body: []byte(fmt.Sprintf(`{"order_id":"o%d","rev":1,"customer":{"name":"a"}}`, i))})
	}
	if res, err := f.st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: ds}}}); err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if err := eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var scanned int
	p, err := replay.MakePlan(ctx, f.st, eng, replay.Selection{}, replay.PlanOptions{MaxScan: 10,
		Progress: func(pr replay.Progress) { scanned = pr.Scanned }})
	if err != nil || !p.Truncated || p.Events != 500 || scanned != 500 {
		t.Fatalf("bounded plan: %+v %v after %d events; want truncated after the first page of 500", p, err, scanned)
	}
	p, err = replay.MakePlan(ctx, f.st, eng, replay.Selection{}, replay.PlanOptions{})
	if err != nil || p.Truncated || p.Events != 501 || p.InLedger != 501 {
		t.Fatalf("whole plan: %+v %v", p, err)
	}
}
