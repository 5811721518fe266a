package sqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

var errInjected = errors.New("injected fault")

// faulty opens a store whose statements fail when fail says so.
func faulty(t *testing.T, fail func(q string) bool) *Store {
	t.Helper()
	path := filepath.Join(t.TempDir(), "f.db")
	open(t, path).Close() // migrated
	var mu sync.Mutex     // the hook runs on the writer's goroutines
	s, err := OpenWithOptions(context.Background(), path, Options{NoSync: true, Faults: func(q string) error {
		mu.Lock()
		defer mu.Unlock()
		if fail(q) {
			return errInjected
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func auditCount(t *testing.T, s *Store, action string) int {
	t.Helper()
	rows, err := s.AuditList(context.Background(), &store.AuditListParams{Action: action, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

// A statement failed by Options.Faults fails its caller alone in the shared
// write transaction: its earlier writes are rolled back with its savepoint,
// the callers before and after it commit. A failed one-row query fails at
// Scan, like a real one.
func TestFaultRollsBackOneCallerWhole(t *testing.T) {
	s := faulty(t, func(q string) bool { return strings.HasPrefix(q, "SELECT count(*) FROM audit") })
	at := time.Unix(0, 0)
	write := func(action string, query bool) func(ctx context.Context, tx *wtx) error {
		return func(ctx context.Context, tx *wtx) error {
			if _, err := insertAudit(ctx, tx, &store.AuditInsertParams{At: at, Actor: "t", Action: action}); err != nil {
				return err
			}
			if query {
				var n int
				return tx.QueryRowContext(ctx, `SELECT count(*) FROM audit`).Scan(&n)
			}
			return nil
		}
	}
	// One batch, run as the writer loop runs it (which is idle meanwhile).
	jobs := []*txJob{
		{ctx: context.Background(), fn: write("first", false), done: make(chan error, 1)},
		{ctx: context.Background(), fn: write("failing", true), done: make(chan error, 1)},
		{ctx: context.Background(), fn: write("last", false), done: make(chan error, 1)},
	}
	s.runBatch(jobs, time.Now())
	for i, want := range []error{nil, errInjected, nil} {
		if err := <-jobs[i].done; !errors.Is(err, want) {
			t.Fatalf("job %d: %v, want %v", i, err, want)
		}
	}
	for action, want := range map[string]int{"first": 1, "failing": 0, "last": 1} {
		if n := auditCount(t, s, action); n != want {
			t.Errorf("%d audit rows %q, want %d", n, action, want)
		}
	}
}

// An inbox commit whose statement fails for one submission reports that
// submission failed and stores nothing of it; the others commit.
func TestFaultFailsOneInboxSubmission(t *testing.T) {
	calls := 0
	// Deliveries are inserted in submission order, on the fast path and
	// again with savepoints: the second submission's fails both times.
	s := faulty(t, func(q string) bool {
		if q != sqlInsertDelivery {
			return false
		}
		calls++
		return calls%2 == 0
	})
	now := time.Unix(1000, 0)
	sub := func(id string) *store.Submission {
		return &store.Submission{Deliveries: []*store.DeliveryInput{{RequestID: "req-" + id, Source: "shop", EventID: id,
			Type: "order.created", Entity: "o1", Body: []byte(`{}`), ReceivedAt: now}}}
	}
	res, err := s.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: []*store.Submission{sub("evt_1"), sub("evt_2")}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || !errors.Is(res[1].Err, errInjected) {
		t.Fatalf("results %+v, want the first committed and the second failed by the fault", res)
	}
	page, err := s.EventList(context.Background(), &store.EventListParams{Source: "shop", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 || page.Events[0].EventID != "evt_1" || page.Events[0].Deliveries != 1 {
		t.Fatalf("events %+v, want evt_1 alone with one delivery: the failed submission's event is rolled back with it", page.Events)
	}
}

// A settle whose read of the effect fails reports that failure, not an
// effect that vanished, and writes nothing.
func TestFaultInSettleIsReportedAsItself(t *testing.T) {
	failRead := false
	s := faulty(t, func(q string) bool { return failRead && q == effectFencedByID })
	ctx, now := context.Background(), time.Unix(1000, 0).UTC()
	res, err := s.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "req-1", Source: "shop", EventID: "evt_1", Type: "order.created", Entity: "o1", Body: []byte(`{}`), ReceivedAt: now}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatal(err, res)
	}
	pk := res[0].Items[0].EventPK
	if err := s.EventRoute(ctx, &store.EventRouteParams{Now: now, Decisions: []*store.RouteDecision{{EventPK: pk,
		Routes: []store.Route{{Flow: "f", Entity: "o1", OrderKey: "1"}}}}}); err != nil {
		t.Fatal(err)
	}
	ls, err := s.EntityClaim(ctx, &store.EntityClaimParams{Owner: "w", Now: now, LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(ls) != 1 {
		t.Fatal(ls, err)
	}
	ws, err := s.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "f", Entity: "o1", Limit: 1})
	if err != nil || len(ws) != 1 {
		t.Fatal(ws, err)
	}
	if _, err := s.FlowApply(ctx, &store.FlowApplyParams{Lease: ls[0], Now: now, WorkID: ws[0].ID, EventPK: pk, Actor: "w",
		Version: "r1", VersionSort: "1", Ordered: true, State: []byte(`{}`),
		Effects: []*store.EffectInsert{{EpisodeKey: "f:o1:r1:mail", Effect: "mail", Destination: "d", Request: []byte(`{}`)}}}); err != nil {
		t.Fatal(err)
	}
	cs, err := s.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: now, LeaseFor: time.Minute, Limit: 1})
	if err != nil || len(cs) != 1 {
		t.Fatal(cs, err)
	}
	failRead = true
	err = s.EffectSettle(ctx, &store.EffectSettleParams{EffectID: cs[0].ID, Token: cs[0].Token, Now: now, State: store.EffectDone,
		AddAttempt: true, Attempt: &store.Attempt{Status: 201}})
	failRead = false
	if !errors.Is(err, errInjected) || strings.Contains(err.Error(), "vanished") {
		t.Fatalf("settle: %v, want the read's failure alone", err)
	}
	if f, err := s.EffectGet(ctx, cs[0].ID); err != nil || f.State != store.EffectSubmitting {
		t.Fatalf("after the failed settle: %+v %v, want the effect still submitting", f, err)
	}
	if atts, err := s.AttemptList(ctx, cs[0].ID); err != nil || len(atts) != 0 {
		t.Fatalf("after the failed settle: attempts %v %v, want none", atts, err)
	}
}

// inboxGroup is n submissions of one routed event each: two statements
// per submission, the event's upsert and the delivery's insert.
func inboxGroup(n int) *store.InboxCommitParams {
	p := &store.InboxCommitParams{}
	at := time.Unix(1_700_000_000, 0)
	for i := range n {
		p.Submissions = append(p.Submissions, &store.Submission{Deliveries: []*store.DeliveryInput{{
			RequestID: fmt.Sprintf("req-%d", i), Source: "stripe", EventID: fmt.Sprintf("evt_%d", i),
			Type: "invoice.paid", Entity: fmt.Sprintf("in_%d", i), ReceivedAt: at, Body: []byte(`{}`),
		}}})
	}
	return p
}

// cancelAtDelivery opens a store that cancels the returned context just
// before the nth delivery insert of an inbox commit runs, and counts the
// event upserts it is asked to run. After cancelling it holds the writer
// until the caller closes the returned channel (once its call has
// returned) or a quarter second has passed: a caller that would answer as
// soon as its context ends then answers before the commit, every time,
// rather than only when it wins the race with the writer.
func cancelAtDelivery(t *testing.T, nth int) (*Store, context.Context, *atomic.Int32, chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	returned := make(chan struct{})
	var upserts, deliveries atomic.Int32
	s := faulty(t, func(q string) bool {
		switch q {
		case sqlUpsertEvent:
			upserts.Add(1)
		case sqlInsertDelivery:
			if deliveries.Add(1) == int32(nth) {
				cancel()
				select {
				case <-returned:
				case <-time.After(250 * time.Millisecond):
				}
			}
		}
		return false
	})
	return s, ctx, &upserts, returned
}

func storedEvents(t *testing.T, s *Store) int {
	t.Helper()
	var n int
	if err := s.reader.QueryRow(`SELECT count(*) FROM events`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// An inbox group runs as a job of the shared write transaction, which its
// caller cannot cancel (others share its commit): a caller whose context
// ends while its group is being written still hears the group's true
// outcome, never "unavailable" for events that were stored.
func TestInboxCommitTellsItsOutcomeOnceItsContextEnds(t *testing.T) {
	s, ctx, upserts, returned := cancelAtDelivery(t, 1)
	res, err := s.InboxCommit(ctx, inboxGroup(3))
	close(returned)
	if err != nil {
		t.Fatalf("InboxCommit = %v, want the group's outcome: it was written and committed", err)
	}
	if len(res) != 3 {
		t.Fatalf("%d results, want 3", len(res))
	}
	if n := upserts.Load(); n != 3 {
		t.Errorf("%d event upserts ran, want 3", n)
	}
	if n := storedEvents(t, s); n != 3 {
		t.Errorf("%d events stored, want the 3 the caller was told of", n)
	}
}
