package inbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "inbox.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func sub(eventID string) *store.Submission {
	return &store.Submission{Deliveries: []*store.DeliveryInput{{
		RequestID: "r-" + eventID, Source: "stripe", EventID: eventID, Type: "t",
		ReceivedAt: t0, Body: []byte("{}"),
	}}}
}

// gate wraps the real store and holds the first commit until released, so
// the test controls exactly what queues up behind it.
type gate struct {
	store.Store
	mu      sync.Mutex
	sizes   []int
	entered chan struct{}
	release chan struct{}
}

func (g *gate) InboxCommit(ctx context.Context, p *store.InboxCommitParams) ([]store.SubmissionResult, error) {
	g.mu.Lock()
	first := len(g.sizes) == 0
	g.sizes = append(g.sizes, len(p.Submissions))
	g.mu.Unlock()
	if first {
		close(g.entered)
		<-g.release
	}
	return g.Store.InboxCommit(ctx, p)
}

// waitQueued waits for n submissions to be queued behind a held commit. It
// fails with what it waited for at a generous deadline, rather than going
// on and failing later on something that only looks like the cause.
func waitQueued(t *testing.T, w *Writer, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for len(w.queue) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d submissions queued after a minute", len(w.queue), n)
		}
		time.Sleep(time.Millisecond) // waiting for goroutines to enqueue, not for time to pass
	}
}

func TestConcurrentSubmissionsShareCommits(t *testing.T) {
	s := openStore(t)
	g := &gate{Store: s, entered: make(chan struct{}), release: make(chan struct{})}
	w := New(g, Options{MaxBatch: 64, Registerer: prometheus.NewRegistry()})
	w.Start()
	defer w.Stop(context.Background())

	ctx := context.Background()
	var wg sync.WaitGroup
	results := make([]error, 41)
	wg.Add(1)
	go func() { defer wg.Done(); _, results[0] = w.Submit(ctx, sub("evt_first")) }()
	<-g.entered
	// 40 more arrive while the first commit is held open.
	for i := 1; i <= 40; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _, results[i] = w.Submit(ctx, sub(fmt.Sprint("evt_", i))) }()
	}
	waitQueued(t, w, 40)
	close(g.release)
	wg.Wait()
	for i, err := range results {
		if err != nil {
			t.Fatalf("submit %d: %v", i, err)
		}
	}
	g.mu.Lock()
	sizes := append([]int(nil), g.sizes...)
	g.mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != 40 {
		t.Fatalf("commit sizes %v, want [1 40]: the 40 queued submissions must share one commit", sizes)
	}
	r, err := s.EventList(ctx, &store.EventListParams{Limit: 1000})
	if err != nil || len(r.Events) != 41 {
		t.Fatalf("stored %d events (%v), want 41", len(r.Events), err)
	}
}

// On SQLite the writer hands a group to the store while an earlier
// group's commit is still under way: the one writer's transaction is
// shared, so the later group joins it or the next one. With the driver's
// flushers at one, webhooks arriving meanwhile waited for that commit
// before they were even handed over, and so for one commit more.
func TestSQLiteHandsOverAGroupWhileOneCommits(t *testing.T) {
	d, err := storeopen.For("sqlite:./h.db")
	if err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	g := &gate{Store: s, entered: make(chan struct{}), release: make(chan struct{})}
	w := New(g, Options{Flushers: d.Flushers, Registerer: prometheus.NewRegistry()})
	w.Start()
	defer w.Stop(context.Background())

	ctx := context.Background()
	errs := make(chan error, 2)
	submit := func(id string) {
		res, err := w.Submit(ctx, sub(id))
		if err == nil {
			err = res.Err
		}
		errs <- err
	}
	go submit("evt_first")
	<-g.entered
	go submit("evt_second")
	// A liveness bound, not a timing: the hand-over takes microseconds.
	deadline := time.Now().Add(time.Minute)
	for handed := 1; handed < 2; {
		if time.Now().After(deadline) {
			close(g.release)
			t.Fatalf("the second webhook's group was not handed to the store while the first group's commit was under way (%d flushers)", d.Flushers)
		}
		time.Sleep(time.Millisecond) // waiting for a goroutine, not for time to pass
		g.mu.Lock()
		handed = len(g.sizes)
		g.mu.Unlock()
	}
	close(g.release)
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("submit: %v", err)
		}
	}
	r, err := s.EventList(ctx, &store.EventListParams{Limit: 10})
	if err != nil || len(r.Events) != 2 {
		t.Fatalf("stored %d events (%v), want both", len(r.Events), err)
	}
}

func TestEachCallerGetsItsOwnOutcome(t *testing.T) {
	s := openStore(t)
	w := New(s, Options{})
	w.Start()
	defer w.Stop(context.Background())
	ctx := context.Background()
	res, err := w.Submit(ctx, sub("evt_a"))
	if err != nil || res.Err != nil || res.Items[0].Duplicate {
		t.Fatalf("first: %+v %v", res, err)
	}
	res, err = w.Submit(ctx, sub("evt_a"))
	if err != nil || res.Err != nil || !res.Items[0].Duplicate {
		t.Fatalf("second: %+v %v, want duplicate", res, err)
	}
	res, err = w.Submit(ctx, sub(""))
	if err != nil || res.Err == nil {
		t.Fatalf("invalid submission: %+v %v, want its own error", res, err)
	}
}

// A commit that cannot happen must never look like success.
func TestCommitFailureIsReportedToEveryCaller(t *testing.T) {
	s := openStore(t)
	w := New(s, Options{})
	w.Start()
	defer w.Stop(context.Background())
	s.Close() // the database goes away under the writer
	var wg sync.WaitGroup
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := w.Submit(context.Background(), sub(fmt.Sprint("evt_", i)))
			if err == nil && res.Err == nil {
				t.Errorf("submit %d reported success against a closed store", i)
			}
		}()
	}
	wg.Wait()
}

func TestStopDrainsQueuedAndRefusesNew(t *testing.T) {
	s := openStore(t)
	g := &gate{Store: s, entered: make(chan struct{}), release: make(chan struct{})}
	w := New(g, Options{})
	w.Start()
	var wg sync.WaitGroup
	errs := make([]error, 10)
	submit := func(i int) {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = w.Submit(context.Background(), sub(fmt.Sprint("evt_", i))) }()
	}
	// The first submission holds the writer inside its commit before the
	// others start: started together, a busy machine can let all ten
	// queue before the writer wakes, and the first commit takes them all.
	submit(0)
	<-g.entered
	for i := 1; i < 10; i++ {
		submit(i)
	}
	waitQueued(t, w, 9)
	stopped := make(chan error, 1)
	go func() { stopped <- w.Stop(context.Background()) }()
	// Stop has begun (or is about to): new submissions are refused.
	for {
		w.mu.RLock()
		closed := w.closed
		w.mu.RUnlock()
		if closed {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := w.Submit(context.Background(), sub("evt_late")); !errors.Is(err, errStopped) {
		t.Fatalf("submit after stop: %v, want ErrStopped", err)
	}
	close(g.release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("queued submission %d was not committed before stop: %v", i, err)
		}
	}
	r, _ := s.EventList(context.Background(), &store.EventListParams{})
	if len(r.Events) != 10 {
		t.Fatalf("%d events stored, want 10", len(r.Events))
	}
}

func TestCanceledCallerIsNotCommitted(t *testing.T) {
	s := openStore(t)
	g := &gate{Store: s, entered: make(chan struct{}), release: make(chan struct{})}
	w := New(g, Options{})
	w.Start()
	defer w.Stop(context.Background())

	// The first submission holds the writer inside its commit, so the
	// second waits in the queue when its caller gives up.
	first := make(chan error, 1)
	go func() {
		_, err := w.Submit(context.Background(), sub("evt_first"))
		first <- err
	}()
	<-g.entered
	ctx, cancel := context.WithCancel(context.Background())
	queued := make(chan error, 1)
	go func() {
		_, err := w.Submit(ctx, sub("evt_canceled"))
		queued <- err
	}()
	// Wait until the second submission is in the queue, not merely
	// racing towards it.
	for len(w.queue) == 0 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-queued; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled submit returned %v, want context.Canceled", err)
	}
	close(g.release)
	if err := <-first; err != nil {
		t.Fatalf("first submit: %v", err)
	}
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	// What the store holds is the proof: the caller was never told its
	// event was stored, so storing it would be a silent acknowledgement.
	res, err := s.EventList(context.Background(), &store.EventListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Events) != 1 || res.Events[0].EventID != "evt_first" {
		t.Fatalf("stored events %+v, want only evt_first", res.Events)
	}
	// And an already-canceled caller is refused outright.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	w2 := New(s, Options{})
	w2.Start()
	defer w2.Stop(context.Background())
	if _, err := w2.Submit(ctx, sub("evt_c")); err == nil {
		t.Fatal("canceled submit reported success")
	}
}
