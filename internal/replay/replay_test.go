package replay_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/replay"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

const configFmt = `sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: %s}
    state: '{"name": event.customer.name}'
    effects:
      - name: sync
        destination: crm
        request: {path: '"/orders/" + entity'}
destinations:
  - {name: crm, base_url: "http://127.0.0.1:1", allow_private_networks: true}
`

type fixture struct {
	t   *testing.T
	st  *sqlite.Store
	clk *clock.Fake
	n   int
}

func (f *fixture) engine(revision string) *flow.Engine {
	f.t.Helper()
	cfg, err := config.Parse("r.yaml", []byte(fmt.Sprintf(configFmt, revision)), func(string) (string, bool) { return "", false })
	if err != nil {
		f.t.Fatal(err)
	}
	return flow.New(cfg, f.st, flow.Options{Clock: f.clk})
}

func (f *fixture) send(eventID, body string) {
	f.t.Helper()
	f.n++
	res, err := f.st.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: fmt.Sprint("r", f.n), Source: "shop", EventID: eventID, Type: "order.updated", ReceivedAt: f.clk.Now(), Body: []byte(body),
	}}}}})
	if err != nil || res[0].Err != nil {
		f.t.Fatal(err, res)
	}
}

func newFixture(t *testing.T) *fixture {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, st: st, clk: clock.NewFake(t0)}
}

func TestRunReportsProgressAndWatchTheOutcome(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	eng := f.engine("event.rev")
	f.send("e1", `{"order_id":"o1","rev":1,"customer":{"name":"a"}}`)
	f.send("e2", `{"order_id":"o1","rev":2,"customer":{"name":"a"}}`)
	f.send("e3", `{"order_id":"o2","rev":1,"customer":{"name":"b"}}`)
	f.send("estate", `{"order_id":"o5","rev":1}`)                            // no customer: its state fails, dead-lettered
	f.send("ebad", `{"order_id":"o3","revision":5,"customer":{"name":"c"}}`) // no rev: its route fails
	f.send("enone", `{"rev":1,"customer":{"name":"d"}}`)                     // no entity: its route fails
	if err := eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	f.send("epending", `{"order_id":"o4","rev":1,"customer":{"name":"e"}}`) // not processed yet

	var progress []replay.Progress
	res, err := replay.RunWith(ctx, f.st, eng, replay.Selection{Source: "shop", Actor: "test"}, f.clk.Now(),
		replay.Options{Progress: func(p replay.Progress) { progress = append(progress, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Events != 4 || res.WorkItems != 4 || res.Skipped != 3 {
		t.Fatalf("result %+v; want 4 events and items (e1, e2, e3, estate), 3 skipped (the failed routes of ebad and enone, epending)", res)
	}
	if len(progress) != 1 || progress[0] != (replay.Progress{Scanned: 7, Events: 4, WorkItems: 4, Skipped: 3}) {
		t.Fatalf("progress %+v", progress)
	}

	w := replay.NewWatcher(f.st, res)
	out, err := w.Poll(ctx)
	if err != nil || out.Settled != 0 || out.Done() {
		t.Fatalf("before processing: %+v %v", out, err)
	}
	if err := eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	out, err = w.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// e1 (r1 behind the applied r2) is stale, e2 and e3 are applied
	// already, estate still has no customer; the first pass of epending
	// is not part of the replay.
	want := replay.Outcome{ReplayID: res.ReplayID, Events: 4, WorkItems: 4, Skipped: 3, Settled: 4, Stale: 1, Duplicate: 2, DeadLettered: 1}
	if out != want || !out.Done() {
		t.Fatalf("outcome\n got %+v\nwant %+v", out, want)
	}
	// Polling again counts nothing twice.
	if again, err := w.Poll(ctx); err != nil || again != want {
		t.Fatalf("second poll %+v %v", again, err)
	}

	// The cause of ebad's dead letter is fixed (the revision is read from
	// the field it is in): a replay of its entity routes and applies it
	// and creates its effect.
	fixed := f.engine(`has(event.rev) ? event.rev : event.revision`)
	res, err = replay.Run(ctx, f.st, fixed, replay.Selection{Source: "shop", Entity: "o3"}, f.clk.Now())
	if err != nil || res.WorkItems != 1 {
		t.Fatalf("replay of o3: %+v %v", res, err)
	}
	if err := fixed.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	var seen []replay.Outcome
	out, err = replay.Watch(ctx, f.st, res, replay.WatchOptions{Interval: time.Hour, Progress: func(o replay.Outcome) { seen = append(seen, o) }})
	if err != nil || out.Applied != 1 || out.EffectsCreated != 1 || !out.Done() || len(seen) != 1 || seen[0] != out {
		t.Fatalf("watch of the repair: %+v %v, progress %+v; want applied 1, effects created 1", out, err, seen)
	}
}

// Watch stops when its context ends and returns what it saw; the replay
// itself goes on.
func TestWatchStopsWithItsContext(t *testing.T) {
	f := newFixture(t)
	eng := f.engine("event.rev")
	f.send("e1", `{"order_id":"o1","rev":1}`)
	if err := eng.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := replay.Run(context.Background(), f.st, eng, replay.Selection{}, f.clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, err := replay.Watch(ctx, f.st, res, replay.WatchOptions{Interval: time.Hour, Progress: func(replay.Outcome) { cancel() }})
	if !errors.Is(err, context.Canceled) || out.Settled != 0 || out.WorkItems != 1 {
		t.Fatalf("watch = %+v, %v; want the unsettled outcome and context.Canceled", out, err)
	}
}

func TestNothingSelected(t *testing.T) {
	f := newFixture(t)
	_, err := replay.Run(context.Background(), f.st, f.engine("event.rev"), replay.Selection{Source: "shop"}, f.clk.Now())
	if !errors.Is(err, replay.ErrNothingSelected) {
		t.Fatalf("empty store: %v", err)
	}
}

// batchStore records the size of every batch a replay enqueues and fails
// the failAt-th one.
type batchStore struct {
	*sqlite.Store
	sizes  []int
	failAt int
}

func (b *batchStore) ReplayEnqueue(ctx context.Context, id int64, p *store.ReplayCreateParams) (int64, error) {
	b.sizes = append(b.sizes, len(p.Decisions))
	if len(b.sizes) == b.failAt {
		return 0, errors.New("the store is down")
	}
	return b.Store.ReplayEnqueue(ctx, id, p)
}

// A replay is enqueued in batches of at most BatchEvents events, whatever
// the size of the selection, so its memory does not grow with it. A replay
// stopped between two batches keeps the work enqueued before (it is
// processed), stays unplanned and is not audited as complete; replaying
// again enqueues all of it, and the watcher counts the work from the
// store across batches.
func TestRunEnqueuesInBatches(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	eng := f.engine("event.rev")
	const n = 1201
	var ds []*store.DeliveryInput
	for i := range n {
		ds = append(ds, &store.DeliveryInput{RequestID: "bulk", BatchIndex: i, Source: "shop", EventID: fmt.Sprint("b", i),
			Type: "order.updated", ReceivedAt: f.clk.Now(), Body: []byte(fmt.Sprintf(`{"order_id":"o%d","rev":1,"customer":{"name":"a"}}`, i%7))})
	}
	if res, err := f.st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: ds}}}); err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	if err := eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}

	bs := &batchStore{Store: f.st, failAt: 2}
	opts := replay.Options{BatchEvents: 500}
	res, err := replay.RunWith(ctx, bs, eng, replay.Selection{}, f.clk.Now(), opts)
	if err == nil || res == nil || res.ReplayID == 0 || !strings.Contains(err.Error(), "stopped after enqueuing 500 work items") {
		t.Fatalf("replay with its second batch failing: %+v, %v; want the replay so far and the error naming the 500 items in", res, err)
	}
	p, err := f.st.ReplayProgress(ctx, res.ReplayID)
	if err != nil || p == nil || p.Planned || p.Items != 500 {
		t.Fatalf("stopped replay: %+v %v; want unplanned with its first batch of 500 items", p, err)
	}
	rows, err := f.st.AuditList(ctx, &store.AuditListParams{Action: "replay"})
	if err != nil || len(rows) != 0 {
		t.Fatalf("a stopped replay audited as complete: %+v %v", rows, err)
	}

	bs.sizes, bs.failAt = nil, 0
	res, err = replay.RunWith(ctx, bs, eng, replay.Selection{}, f.clk.Now(), opts)
	if err != nil || res.Events != n || res.WorkItems != n {
		t.Fatalf("replay: %+v %v", res, err)
	}
	if len(bs.sizes) != 3 || bs.sizes[0] != 500 || bs.sizes[1] != 500 || bs.sizes[2] != 201 {
		t.Fatalf("batches of %v events; want at most 500 at a time", bs.sizes)
	}
	if err := eng.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := replay.NewWatcher(f.st, res).Poll(ctx)
	if err != nil || !out.Done() || out.Settled != n || out.Duplicate+out.Stale != n || out.EffectsCreated != 0 {
		t.Fatalf("outcome %+v %v; want every item settled, none creating an effect", out, err)
	}
}
