package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storetest"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.Exercise(t, storetest.Opener{
		Name: "sqlite (file)",
		Open: func(t *testing.T) store.Store {
			return open(t, filepath.Join(t.TempDir(), "sub", "hookledger.db"))
		},
		Reopen: func(t *testing.T, s store.Store) store.Store {
			return open(t, s.(*Store).path)
		},
		Tamper: tamper,
		Fresh: func(t *testing.T) store.Store {
			s, err := Open(context.Background(), filepath.Join(t.TempDir(), "fresh.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	})
}

func TestPragmas(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "p.db"))
	var mode string
	var sync int
	if err := s.writer.QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatal(err)
	}
	if err := s.writer.QueryRow(`PRAGMA synchronous`).Scan(&sync); err != nil {
		t.Fatal(err)
	}
	if mode != "wal" || sync != 2 {
		t.Fatalf("journal_mode=%s synchronous=%d, want wal and 2 (FULL)", mode, sync)
	}
	// Statement journals stay in memory (no temporary file per group
	// commit): 2 is MEMORY.
	var temp int
	if err := s.writer.QueryRow(`PRAGMA temp_store`).Scan(&temp); err != nil {
		t.Fatal(err)
	}
	if temp != 2 {
		t.Fatalf("writer temp_store=%d, want 2 (MEMORY)", temp)
	}
	if n := s.writer.Stats().MaxOpenConnections; n != 1 {
		t.Fatalf("writer pool allows %d connections, want exactly 1", n)
	}
}

// Unique violations are recognised by SQLite's extended result code.
func TestUniqueViolationByCode(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "u.db"))
	_, err := s.writer.Exec(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (1, 'again', 0)`)
	if err == nil {
		t.Fatal("duplicate version inserted")
	}
	wrapped := dbErrors.Wrap("insert", err)
	if !errors.Is(wrapped, store.ErrConflict) {
		t.Fatalf("unique violation not classified as conflict: %v", err)
	}
	_, err = s.writer.Exec(`INSERT INTO nosuchtable VALUES (1)`)
	if err == nil || errors.Is(dbErrors.Wrap("insert", err), store.ErrConflict) {
		t.Fatalf("other errors must not be conflicts: %v", err)
	}
}

// Writes racing Close must each get an error, never wait forever for a
// shared transaction that will not run.
func TestWritesAfterCloseFail(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "c.db"))
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	const n = 200
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := s.EntityClaim(context.Background(), &store.EntityClaimParams{Owner: "w", Now: time.Unix(0, 0), LeaseFor: time.Minute, Limit: 1})
			errs <- err
		}()
	}
	// A generous bound that only a hang exceeds: this is not a timing test.
	deadline := time.After(time.Minute)
	for i := range n {
		select {
		case err := <-errs:
			if err == nil {
				t.Fatalf("write %d after Close succeeded", i)
			}
		case <-deadline:
			t.Fatalf("%d of %d writes after Close still waiting: they would never return", n-i, n)
		}
	}
}

// A shared write transaction has a deadline: a caller's statement that
// never returns (a lock held elsewhere, a dying disk) ends with an error
// at the deadline instead of holding the only writer, and every write
// queued behind it, forever; the writer serves the next batch afterwards.
func TestSharedWriteTransactionHasADeadline(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "d.db"))
	s.batchDeadline = 200 * time.Millisecond
	stuck := make(chan error, 1)
	go func() {
		stuck <- s.inTx(context.Background(), func(ctx context.Context, tx *wtx) error {
			if _, ok := ctx.Deadline(); !ok {
				return errors.New("the job's context has no deadline")
			}
			<-ctx.Done() // a statement that only the deadline ends
			return ctx.Err()
		})
	}()
	select {
	case err := <-stuck:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stuck job ended with %v, want its deadline", err)
		}
	case <-time.After(time.Minute): // only a hang reaches this bound
		t.Fatal("a stuck job held the shared transaction for a minute: no deadline")
	}
	s.batchDeadline = defaultBatchDeadline
	if err := s.ProbeWrite(context.Background(), time.Unix(0, 0)); err != nil {
		t.Fatalf("the writer after a deadline: %v", err)
	}
}

// Statements of the shared write transaction run on a context that cannot
// end (no per-statement cancellation watch), so the transaction's deadline
// is checked before each: a job past it gets an error from its next
// statement instead of running it.
func TestSharedTransactionStatementAfterDeadlineFails(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "d.db"))
	s.batchDeadline = 200 * time.Millisecond
	defer func() { s.batchDeadline = defaultBatchDeadline }()
	var stmtErr error
	err := s.inTx(context.Background(), func(ctx context.Context, tx *wtx) error {
		<-ctx.Done()
		_, stmtErr = tx.ExecContext(ctx, `SELECT 1`)
		return stmtErr
	})
	if !errors.Is(stmtErr, context.DeadlineExceeded) || !errors.Is(stmtErr, store.ErrUnavailable) {
		t.Fatalf("statement after the deadline: %v, want the deadline as unavailable", stmtErr)
	}
	if err == nil {
		t.Fatal("the job past its deadline committed")
	}
}

// Without statistics SQLite chooses indexes by shape alone, so the lists'
// plans are pinned here: each filter reads its own index (a page stops at
// its limit instead of reading the table), and a selective filter is never
// passed over for a broad one that also gives id order.
func TestListPlans(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "plans.db"))
	t1 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Hour)
	exceptions := store.ExceptionStates()
	type planCase struct {
		name, sql  string
		args       []any
		use, avoid string
	}
	var cases []planCase
	ev := func(name string, p store.EventListParams, use, avoid string) {
		q, args := eventListSQL(&p, 101)
		cases = append(cases, planCase{"events " + name, q, args, use, avoid})
	}
	au := func(name string, p store.AuditListParams, use, avoid string) {
		q, args := auditListSQL(&p)
		cases = append(cases, planCase{"audit " + name, q, args, use, avoid})
	}
	ef := func(name string, p store.EffectListParams, use, avoid string) {
		q, args := effectListSQL(&p)
		cases = append(cases, planCase{"effects " + name, q, args, use, avoid})
	}
	ev("source", store.EventListParams{Source: "crm"}, "events_source", "TEMP B-TREE")
	ev("event id", store.EventListParams{EventID: "e1"}, "sqlite_autoindex_events_1 (source=? AND event_id=?", "")
	ev("source and event id", store.EventListParams{Source: "crm", EventID: "e1", Type: "x"}, "sqlite_autoindex_events_1 (source=? AND event_id=?", "events_type")
	ev("type", store.EventListParams{Type: "x"}, "events_type", "TEMP B-TREE")
	ev("entity", store.EventListParams{Entity: "x"}, "work_entity", "events_source")
	ev("entity and source", store.EventListParams{Entity: "x", Source: "crm", Type: "t"}, "events_entity", "events_source")
	ev("dead letters", store.EventListParams{Disposition: store.DispositionDeadLettered}, "events_disposition", "")
	ev("accepted", store.EventListParams{Disposition: store.DispositionAccepted}, "events_accepted", "")
	ev("received span", store.EventListParams{ReceivedFrom: t1, ReceivedTo: t2}, "events_received", "")
	ev("occurred span", store.EventListParams{OccurredFrom: t1, OccurredTo: t2}, "events_occurred", "")
	au("entity", store.AuditListParams{Entity: "x", Action: "disposition"}, "audit_entity", "audit_action")
	au("event id", store.AuditListParams{EventID: "e1", Source: "crm", From: t1, To: t2}, "audit_event", "audit_at")
	au("span", store.AuditListParams{From: t1, To: t2}, "audit_at", "")
	ef("flow", store.EffectListParams{Flow: "f"}, "effects_flow", "TEMP B-TREE")
	ef("destination", store.EffectListParams{Destination: "crm"}, "effects_destination", "TEMP B-TREE")
	ef("owner", store.EffectListParams{Owner: "bob", Flow: "f", Destination: "crm"}, "effects_owner", "effects_flow")
	ef("class", store.EffectListParams{Class: store.ClassPermanent, States: exceptions}, "effects_class", "effects_state")
	ef("exception queue", store.EffectListParams{States: exceptions, Flow: "f", Destination: "crm"}, "effects_state", "effects_flow")
	ef("entity", store.EffectListParams{Entity: "x", Destination: "crm"}, "effects_entity", "effects_destination")
	ef("flow and entity", store.EffectListParams{Flow: "f", Entity: "x"}, "effects_entity", "effects_flow (flow=? AND rowid")
	ef("finished states", store.EffectListParams{State: store.EffectDone}, "INTEGER PRIMARY KEY", "TEMP B-TREE")
	ef("created span", store.EffectListParams{CreatedFrom: t1, CreatedTo: t2}, "effects_created", "")
	ef("deadline missed", store.EffectListParams{DeadlineMissed: true, Flow: "f", Destination: "crm"}, "effects_deadline_missed", "effects_flow")
	ef("compensations", store.EffectListParams{Compensations: true, Destination: "crm"}, "effects_compensat", "effects_destination")
	// A delivery claim reads one destination's due effects in order, and
	// its range ends at the first effect not yet due.
	q, args := effectClaimSQL(&store.EffectLeaseParams{Destinations: []string{"crm"}, Limit: 10, MaxRedrives: 3}, t1.UnixMicro())
	cases = append(cases, planCase{"delivery claim", q, args,
		"effects_due_destination (destination=? AND next_attempt_at<?)", "TEMP B-TREE"})
	// An entity claim reads the ready entities in claim order from their
	// partial index, never the whole table, and sorts nothing.
	cases = append(cases, planCase{"entity claim", entityLeaseSQL(10), []any{"w:t", t1.UnixMicro(), t1.UnixMicro(), 10},
		"SEARCH entities USING INDEX entities_ready (not_before<?)", "TEMP B-TREE"})
	// A replay's progress reads its own work rows and the effects created
	// since it began, never the whole work table.
	cases = append(cases, planCase{"replay work counts", replayWorkCountsSQL, []any{int64(1)}, "COVERING INDEX work_replay", "SCAN"},
		planCase{"replay effects created", replayEffectsCreatedSQL, []any{int64(1), int64(0)}, "INTEGER PRIMARY KEY (rowid>?)", "SCAN"})
	for _, c := range cases {
		got, outer := queryPlan(t, s, c.name, c.sql, c.args...)
		if !strings.Contains(got, c.use) || (c.avoid != "" && strings.Contains(outer, c.avoid)) {
			t.Errorf("%s: plan\n%s\nwant it to use %q and not %q", c.name, got, c.use, c.avoid)
		}
	}
}

// The outcome signals must stay cheap on a large store: every query reads
// a partial index (or a range of a full one) and never scans a table. The
// plans are pinned here; see signals.go for why each index holds only what
// its signal counts.
func TestSignalPlans(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "signal-plans.db"))
	for _, c := range []struct {
		name, sql string
		args      []any
		use       []string
	}{
		{"lag by flow", signalSQL[store.SignalQueryLagByFlow], nil, []string{"entities_behind"}},
		{"lag largest gap", signalSQL[store.SignalQueryLagLargest], nil, []string{"entities_behind", "work_pending (flow=? AND entity=? AND order_key>?)",
			"work_dead (flow=? AND entity=? AND order_key>?)"}},
		{"unfinished", signalSQL[store.SignalQueryUnfinished], nil, []string{"events_accepted"}},
		{"deadline", signalSQL[store.SignalQueryDeadline], []any{1, 1, 1, 1}, []string{"effects_deadline"}},
		{"unknown", signalSQL[store.SignalQueryUnknown], []any{1}, []string{"effects_state (state=?)"}},
		{"window start", signalSQL[store.SignalQueryWindowStart], []any{1}, []string{"audit_at (at>?)", "audit_at (at=?)"}},
		{"windowed", signalSQL[store.SignalQueryWindowAudit], []any{1, 1}, []string{"audit_action (action=? AND id>?)"}},
		{"dead effects", signalSQL[store.SignalQueryDeadEffects], nil, []string{"effects_state (state=?)"}},
		{"dead events", signalSQL[store.SignalQueryDeadEvents], nil, []string{"events_disposition (disposition=?)"}},
		{"mismatch", signalSQL[store.SignalQueryMismatch], nil, []string{"effects_mismatch"}},
		{"compensation", signalSQL[store.SignalQueryCompensation], nil, []string{"effects_compensation (state=?)"}},
	} {
		rows, err := s.reader.Query(`EXPLAIN QUERY PLAN `+c.sql, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var plan strings.Builder
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan.WriteString(detail + "\n")
		}
		rows.Close()
		got := plan.String()
		t.Logf("%s:\n%s", c.name, got)
		for _, u := range c.use {
			if !strings.Contains(got, u) {
				t.Errorf("%s: plan\n%s\nwant it to use %q", c.name, got, u)
			}
		}
		// A co-routine is a subquery's rows (the lag query's first 100
		// lagging entities), not a table: scanning it is fine.
		coroutines := map[string]bool{}
		for _, line := range strings.Split(got, "\n") {
			if name, ok := strings.CutPrefix(strings.TrimSpace(line), "CO-ROUTINE "); ok {
				coroutines[name] = true
			}
		}
		for _, line := range strings.Split(got, "\n") {
			if coroutines[strings.TrimPrefix(strings.TrimSpace(line), "SCAN ")] {
				continue
			}
			if strings.HasPrefix(line, "SCAN ") && !strings.Contains(line, "USING") && !strings.Contains(line, "(subquery") {
				t.Errorf("%s: plan\n%s\nreads a table in full: %q", c.name, got, line)
			}
		}
	}
}

// queryPlan is the plan SQLite chooses for q, one step a line, and the
// same without the steps of correlated scalar subqueries: an effect's
// later source events are read per effect row by one, a handful of rows,
// so what a test wants avoided (a sort of the page) is looked for in the
// rest of the plan.
func queryPlan(t *testing.T, s *Store, name, q string, args ...any) (plan, outer string) {
	t.Helper()
	rows, err := s.reader.Query(`EXPLAIN QUERY PLAN `+q, args...)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer rows.Close()
	var all, rest strings.Builder
	sub := map[int]bool{} // the nodes of correlated scalar subqueries
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		all.WriteString(detail + "\n")
		if sub[parent] || strings.HasPrefix(detail, "CORRELATED SCALAR SUBQUERY") {
			sub[id] = true
			continue
		}
		rest.WriteString(detail + "\n")
	}
	return all.String(), rest.String()
}

// A job that arrives while the shared write transaction runs joins it
// before the commit, an inbox group too: the two share one commit (one
// fsync) instead of the newcomer waiting for this commit and then paying
// its own. Before, the inbox group waited for the writer connection and
// committed alone.
func TestLateJobsJoinTheRunningWriteTransaction(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "j.db"))
	ctx := context.Background()
	sub := func(id string) *store.InboxCommitParams {
		return &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
			Source: "stripe", EventID: id, Type: "invoice.paid", ReceivedAt: time.Unix(1, 0), Body: []byte(`{}`)}}}}}
	}
	// The inbox prepares its statements on the writer at its first
	// commit: done here, before the writer is held.
	if _, err := s.InboxCommit(ctx, sub("evt_first")); err != nil {
		t.Fatalf("first inbox commit: %v", err)
	}
	var mu sync.Mutex
	var commits []int
	s.committed = func(n int) { mu.Lock(); commits = append(commits, n); mu.Unlock() }

	running, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	free := func() { releaseOnce.Do(func() { close(release) }) }
	defer free()
	held := make(chan error, 1)
	go func() {
		held <- s.inTx(ctx, func(context.Context, *wtx) error { close(running); <-release; return nil })
	}()
	<-running
	inbox := make(chan error, 1)
	go func() { _, err := s.InboxCommit(ctx, sub("evt_late")); inbox <- err }()
	for i := 0; len(s.jobs) == 0; i++ {
		if i > 10_000_000 {
			t.Fatal("the inbox group never queued for the shared write transaction")
		}
		runtime.Gosched()
	}
	free()
	if err := <-held; err != nil {
		t.Fatalf("held job: %v", err)
	}
	if err := <-inbox; err != nil {
		t.Fatalf("late inbox commit: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(commits) != 1 || commits[0] != 2 {
		t.Fatalf("commits of the held job and the late inbox group: %v, want one commit of 2 jobs", commits)
	}
	if ev, err := s.EventList(ctx, &store.EventListParams{EventID: "evt_late"}); err != nil || len(ev.Events) != 1 {
		t.Fatalf("late event stored: %v %v", ev, err)
	}
}

// One event's deliveries are read through the event's unique (source,
// event_id) and deliveries_event, never by scanning deliveries: the
// console's event page and replay ask for them by the pair, and no index
// of deliveries holds the pair (0017 dropped it for the receiver's sake).
func TestDeliveryListReadsThroughTheEvent(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "deliveries.db"))
	for _, p := range []*store.DeliveryListParams{
		{Source: "stripe", EventID: "evt_1", Limit: 1},
		{Source: "stripe", EventID: "evt_1", AfterID: 7, Limit: 100, BodyPrefix: 64},
	} {
		q, args := deliveryListQuery(p)
		plan, _ := queryPlan(t, s, "delivery list", q, args...)
		for _, want := range []string{"SEARCH deliveries USING INDEX deliveries_event (event_pk=? AND rowid>?)",
			"SEARCH events USING COVERING INDEX sqlite_autoindex_events_1 (source=? AND event_id=?)"} {
			if !strings.Contains(plan, want) {
				t.Errorf("%+v: plan\n%s\nwant %q", p, plan, want)
			}
		}
		if strings.Contains(plan, "SCAN") || strings.Contains(plan, "TEMP B-TREE") {
			t.Errorf("%+v: plan\n%s\nscans or sorts", p, plan)
		}
	}
}

// An effect inserted claimed looks, once, for what the claim would take
// first at its destination through effects_due_destination, and for an
// older version in flight through effects_entity: index searches,
// whatever the ledger holds, never a scan of effects.
func TestInsertClaimedEffectPlan(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "insert-claimed.db"))
	args := make([]any, strings.Count(insertClaimedEffectSQL, "?"))
	for i := range args {
		args[i] = 1
	}
	plan, _ := queryPlan(t, s, "insert claimed", insertClaimedEffectSQL, args...)
	t.Logf("plan:\n%s", plan)
	for _, want := range []string{"SEARCH f USING INDEX effects_due_destination (destination=? AND next_attempt_at<?)",
		"SEARCH o USING INDEX effects_entity (flow=? AND entity=? AND effect=? AND state=?)"} {
		if !strings.Contains(plan, want) {
			t.Errorf("plan\n%s\nwant %q", plan, want)
		}
	}
	for _, line := range strings.Split(plan, "\n") {
		if strings.Contains(line, "SCAN") && strings.Contains(line, "effects") {
			t.Errorf("plan\n%s\nscans effects: %q", plan, line)
		}
	}
	// The insert reads the conditions' answer six times: they must run
	// once, not once for each.
	if n := strings.Count(plan, "effects_due_destination"); n != 1 {
		t.Errorf("plan\n%s\nlooks for due effects %d times, want once", plan, n)
	}
}
