// Package storetest is the conformance suite every store driver passes, run
// against a real database: a SQLite file and a PostgreSQL server. It tests
// the contract in package store, never a driver's internals.
package storetest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// Opener returns a migrated, empty store for one test; the opener registers
// its own cleanup. Reopen (optional) opens another handle on the same
// database, to check durability across handles and concurrent migration.
type Opener struct {
	Name   string
	Open   func(t *testing.T) store.Store
	Reopen func(t *testing.T, s store.Store) store.Store
	// Tamper (optional) runs one statement on the store's database behind
	// the contract's back, to plant what the store never writes: the
	// invariant check's tests need violations to find. query is SQL both
	// dialects read, with ? placeholders; time.Time args are stored as the
	// driver stores times. guard names the constraint the driver lifts
	// first (one of the Guard constants; "" for none).
	Tamper func(t *testing.T, s store.Store, guard, query string, args ...any)
	// Fresh opens a store on a new database without migrating it, for
	// the schema check (SchemaPending) that verbs run before they touch a
	// store; Tamper must accept it.
	Fresh func(t *testing.T) store.Store
}

// The constraints Tamper can lift to plant a violation.
const (
	GuardNone = ""
	// GuardEffectEvent: effects.source_event_pk references events.
	GuardEffectEvent = "effect_event_fk"
	// GuardEffectState: effects.state is one of the effect states.
	GuardEffectState = "effect_state_check"
	// GuardEpisodeKey: effects.episode_key is unique.
	GuardEpisodeKey = "episode_key_unique"
)

// t0 is a fixed instant: the store never reads a clock, so tests never do.
var t0 = time.Date(2026, 11, 3, 9, 30, 15, 123456000, time.UTC)

// Exercise runs every conformance test against the driver.
func Exercise(t *testing.T, o Opener) {
	t.Logf("store conformance suite: driver %s", o.Name)
	tests := []struct {
		name string
		fn   func(t *testing.T, o Opener)
	}{
		{"MigrateIsIdempotent", testMigrateIdempotent},
		{"SchemaPending", testSchemaPending},
		{"ProbeWrite", testProbeWrite},
		{"InboxCommitNewAndDuplicate", testInboxNewAndDuplicate},
		{"InboxCommitKeepsBytesAndTimes", testInboxKeepsBytesAndTimes},
		{"DeliveryListBodyPrefix", testDeliveryListBodyPrefix},
		{"EffectListWithoutRequest", testEffectListWithoutRequest},
		{"InboxCommitIsolatesFailedSubmission", testInboxIsolatesFailure},
		{"InboxCommitConcurrentSameEvent", testInboxConcurrentSameEvent},
		{"InboxCommitAuditRides", testInboxAuditRides},
		{"InboxCommitEventTwiceInGroup", testInboxEventTwiceInGroup},
		{"InboxCommitUnroutedAuditRows", testInboxUnroutedAuditRows},
		{"InboxCommitRoutedGroupInOrder", testInboxRoutedGroupInOrder},
		{"EventListPagesAndFilters", testEventListPaging},
		{"EventListFilters", testEventListFilters},
		{"AuditInsertAndList", testAudit},
		{"AuditListFilters", testAuditListFilters},
		{"StatsRecentAndParked", testStats},
		{"DurableAcrossHandles", testDurableAcrossHandles},
		{"CanceledContextCommitsNothing", testCanceledContext},
		{"PipelineRouteUnrouted", testRouteUnrouted},
		{"PipelineRouteTwiceNoDuplicateWork", testRouteTwice},
		{"PipelineRouteNextDisjointPages", testRouteNextDisjoint},
		{"PipelineRouteNextLeases", testRouteNextLeases},
		{"PipelineRouteNextSettles", testRouteNextSettles},
		{"PipelineRouteNextIncompleteDecisions", testRouteNextIncomplete},
		{"PipelineRouteStored", testRouteStored},
		{"PipelineRouteFailedDeadLetters", testRouteFailed},
		{"PipelineRouteUnstorableDeadLetters", testRouteUnstorable},
		{"PipelineClaimExclusive", testClaimExclusive},
		{"PipelineClaimSlots", testClaimSlots},
		{"PipelineClaimNotBefore", testClaimNotBefore},
		{"PipelineClaimFirstReadyFirst", testClaimFirstReadyFirst},
		{"PipelineApplyReleasesDrained", testApplyReleasesDrained},
		{"PipelineClaimConcurrent", testClaimConcurrent},
		{"PipelineFencing", testFencing},
		{"PipelineRevisionGuard", testRevisionGuard},
		{"PipelineEqualJSON", testEqualJSON},
		{"PipelineApplyBatch", testApplyBatch},
		{"PipelineDossierLateRevision", testDossierLateRevision},
		{"EntityHistoryBusinessOrder", testEntityHistory},
		{"PipelineHashVersions", testHashVersions},
		{"PipelineSupersede", testSupersede},
		{"LedgerEffectNewer", testEffectNewer},
		{"PipelineSupersedeRetryWait", testSupersedeRetryWait},
		{"LedgerClaimWaitsForOlderInFlight", testClaimWaitsForOlderInFlight},
		{"PipelineSkippedEffectsAudited", testSkippedEffects},
		{"PipelineEffectLedger", testEffectLedger},
		{"PipelineLoopGuard", testLoopGuard},
		{"PipelineAggregateMultiFlow", testAggregateMultiFlow},
		{"PipelineReplay", testReplay},
		{"PipelineReplayEpisodeExisting", testReplayEpisodeExisting},
		{"PipelineEffectSourceEvents", testEffectSourceEvents},
		{"PipelineReplayKeepsDeadLetter", testReplayKeepsDeadLetter},
		{"PipelineReplayInBatches", testReplayInBatches},
		{"PipelineWorkListPendingOrder", testWorkListPendingOrder},
		{"PipelineRoutableContentType", testRoutableContentType},
		{"PipelineTraceContext", testTraceContext},
		{"PipelineWorkCount", testWorkCount},
		{"PipelineFlowApplyIdempotent", testFlowApplyIdempotent},
		{"PipelineProjectionGet", testProjectionGetAbsent},
		{"PipelineConcurrentSettle", testConcurrentSettle},
		{"PipelineCrossedBatches", testCrossedBatches},
		{"PipelineApplyGroup", testApplyGroup},
		{"PipelineApplyGroupClaim", testApplyGroupClaim},
		{"PipelineTwoProcesses", testTwoProcesses},
		{"LedgerClaimDueKinds", testLedgerClaimDueKinds},
		{"LedgerClaimOrder", testLedgerClaimOrder},
		{"LedgerClaimDestinations", testLedgerClaimDestinations},
		{"LedgerClaimGroup", testLedgerClaimGroup},
		{"LedgerClaimConcurrent", testLedgerClaimConcurrent},
		{"LedgerFencing", testLedgerFencing},
		{"LedgerRedrive", testLedgerRedrive},
		{"LedgerAttemptNumbersAcrossRestarts", testAttemptNumbersAcrossRestarts},
		{"LedgerAbandonedCallCounted", testLedgerAbandonedCallCounted},
		{"LedgerSettleEvidence", testLedgerSettleEvidence},
		{"LedgerSettleGroup", testLedgerSettleGroup},
		{"LedgerSettleSeenAsFenced", testSettleSeenAsFenced},
		{"LedgerSettleSeenGuards", testSettleSeenGuards},
		{"LedgerRelease", testLedgerRelease},
		{"LedgerOperate", testLedgerOperate},
		{"EventResolve", testEventResolve},
		{"EventResolvePendingReplay", testEventResolvePendingReplay},
		{"LedgerSettleOwner", testSettleOwner},
		{"LedgerExceptionOwnerStamped", testExceptionOwnerStamped},
		{"ExceptionList", testExceptionList},
		{"LedgerGetAndList", testLedgerGetAndList},
		{"LedgerListFilters", testEffectListFilters},
		{"OutcomesDeadlineEscalate", testDeadlineEscalate},
		{"OutcomesCompensate", testCompensate},
		{"OutcomesVerifyNext", testVerifyNext},
		{"OutcomesMismatch", testMismatch},
		{"OutcomesConcurrent", testOutcomesConcurrent},
		{"InvariantCheckClean", testInvariantCheckClean},
		{"InvariantCheckEventPending", testInvariantEventPending},
		{"InvariantCheckEpisodeKeyOnce", testInvariantEpisodeKeyOnce},
		{"InvariantCheckEpisodeKeyTombstone", testInvariantEpisodeKeyTombstone},
		{"InvariantCheckDoneEvidence", testInvariantDoneEvidence},
		{"InvariantCheckProjectionVersion", testInvariantProjectionVersion},
		{"InvariantCheckProjectionNewer", testInvariantProjectionNewer},
		{"InvariantCheckEffectEvent", testInvariantEffectEvent},
		{"InvariantCheckEffectState", testInvariantEffectState},
		{"InvariantCheckLimit", testInvariantCheckLimit},
		{"SignalsEmpty", testSignalsEmpty},
		{"SignalRevisionLag", testSignalRevisionLag},
		{"SignalUnfinishedEvents", testSignalUnfinishedEvents},
		{"SignalDeadlineRisk", testSignalDeadlineRisk},
		{"SignalUnknownOutcomes", testSignalUnknownOutcomes},
		{"SignalKeyConflicts", testSignalKeyConflicts},
		{"SignalDeadLetters", testSignalDeadLetters},
		{"SignalLoopBlocks", testSignalLoopBlocks},
		{"SignalCompensation", testSignalCompensation},
		{"SignalMismatchAndEscalation", testSignalMismatchAndEscalation},
		{"SignalHistory", testSignalHistory},
		{"SignalRegistry", testSignalRegistry},
		{"RetentionPrune", testRetentionPrune},
		{"RetentionNothingConfigured", testRetentionNothingConfigured},
		{"RetentionEffects", testRetentionEffects},
		{"RetentionEffectStates", testRetentionEffectStates},
		{"RetentionPublished", testRetentionPublished},
		{"RetentionRacesApply", testRetentionRacesApply},
		{"EndpointPutGetList", testEndpointPutGetList},
		{"EndpointSetState", testEndpointSetState},
		{"MessagePublishFanOut", testMessagePublishFanOut},
		{"MessagePublishWideFanOut", testMessagePublishWideFanOut},
		{"MessagePublishReplay", testMessagePublishReplay},
		{"MessagePublishConcurrent", testMessagePublishConcurrent},
		{"MessagePublishGroup", testMessagePublishGroup},
		{"MessagePublishHandsOff", testMessagePublishHandsOff},
		{"ApplyGroupInsertsClaimed", testApplyGroupInsertsClaimed},
		{"MessagePublishConcurrentKeys", testMessagePublishConcurrentKeys},
		{"IdempotencyPrune", testIdempotencyPrune},
		{"EffectsDueNow", testEffectsDueNow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, o) })
	}
}

func delivery(source, eventID string, i int) *store.DeliveryInput {
	return &store.DeliveryInput{
		RequestID:  fmt.Sprintf("req-%s-%d", eventID, i),
		Source:     source,
		EventID:    eventID,
		Type:       "customer.subscription.updated",
		Entity:     "sub_" + eventID,
		Account:    "acct_1",
		OccurredAt: t0.Add(-time.Minute),
		ReceivedAt: t0.Add(time.Duration(i) * time.Second),
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       []byte(`{"id":"` + eventID + `"}`),
	}
}

func commit(t *testing.T, s store.Store, subs ...*store.Submission) []store.SubmissionResult {
	t.Helper()
	res, err := s.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: subs})
	if err != nil {
		t.Fatalf("InboxCommit: %v", err)
	}
	if len(res) != len(subs) {
		t.Fatalf("InboxCommit returned %d results for %d submissions", len(res), len(subs))
	}
	return res
}

func one(ds ...*store.DeliveryInput) *store.Submission { return &store.Submission{Deliveries: ds} }

func events(t *testing.T, s store.Store, p *store.EventListParams) []*store.Event {
	t.Helper()
	r, err := s.EventList(context.Background(), p)
	if err != nil {
		t.Fatalf("EventList: %v", err)
	}
	return r.Events
}

// schemaChecker is a store's schema check: the migrations its database
// lacks, applying none.
type schemaChecker interface {
	SchemaPending(ctx context.Context) ([]string, error)
}

// A new database lacks every migration; checking applies nothing; after
// Migrate none is pending; a schema behind the binary lacks its newest.
func testSchemaPending(t *testing.T, o Opener) {
	if o.Fresh == nil || o.Tamper == nil {
		t.Fatalf("driver %s: the schema check needs Fresh and Tamper", o.Name)
	}
	ctx := context.Background()
	s := o.Fresh(t)
	sc, ok := s.(schemaChecker)
	if !ok {
		t.Fatalf("driver %s has no SchemaPending", o.Name)
	}
	pending, err := sc.SchemaPending(ctx)
	if err != nil || len(pending) == 0 || pending[0] != "0001_inbox" {
		t.Fatalf("empty database: pending %v, %v; want every migration", pending, err)
	}
	again, err := sc.SchemaPending(ctx)
	if err != nil || !slices.Equal(again, pending) {
		t.Fatalf("second check: %v, %v; want %v (checking must apply nothing)", again, err, pending)
	}
	applied, err := s.Migrate(ctx)
	if err != nil || !slices.Equal(applied, pending) {
		t.Fatalf("migrate applied %v, %v; want %v", applied, err, pending)
	}
	if pending, err := sc.SchemaPending(ctx); err != nil || len(pending) != 0 {
		t.Fatalf("after migrate: pending %v, %v", pending, err)
	}
	o.Tamper(t, s, GuardNone, `DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)`)
	if pending, err := sc.SchemaPending(ctx); err != nil || len(pending) != 1 || pending[0] != applied[len(applied)-1] {
		t.Fatalf("behind: pending %v, %v; want [%s]", pending, err, applied[len(applied)-1])
	}
}

func testMigrateIdempotent(t *testing.T, o Opener) {
	s := o.Open(t)
	applied, err := s.Migrate(context.Background())
	if err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if len(applied) != 0 {
		t.Fatalf("second Migrate applied %v, want nothing", applied)
	}
	if err := s.Ping(context.Background()); err != nil {
		t.Fatalf("Ping: %v", err)
	}
}

func testInboxNewAndDuplicate(t *testing.T, o Opener) {
	s := o.Open(t)
	res := commit(t, s,
		one(delivery("stripe", "evt_1", 0)),
		one(delivery("stripe", "evt_2", 0)),
		// The same event id from another source is another event.
		one(delivery("crm", "evt_1", 0)),
	)
	for i, r := range res {
		if r.Err != nil || len(r.Items) != 1 || r.Items[0].Duplicate {
			t.Fatalf("submission %d: %+v, want one new delivery", i, r)
		}
	}
	// A retry of evt_1, and the same event twice inside one submission.
	res = commit(t, s,
		one(delivery("stripe", "evt_1", 1)),
		one(delivery("stripe", "evt_3", 0), delivery("stripe", "evt_3", 1)),
	)
	if r := res[0]; r.Err != nil || !r.Items[0].Duplicate {
		t.Fatalf("retry of evt_1: %+v, want duplicate", r)
	}
	if r := res[1]; r.Err != nil || r.Items[0].Duplicate || !r.Items[1].Duplicate {
		t.Fatalf("evt_3 twice in one submission: %+v, want new then duplicate", r)
	}
	if res[0].Items[0].EventPK == 0 || res[1].Items[0].EventPK != res[1].Items[1].EventPK {
		t.Fatalf("event pks: %+v", res)
	}
	ev := events(t, s, &store.EventListParams{Source: "stripe", EventID: "evt_1"})
	if len(ev) != 1 || ev[0].Deliveries != 2 || ev[0].Disposition != store.DispositionAccepted {
		t.Fatalf("stripe/evt_1 = %+v, want one event with 2 deliveries, accepted", ev)
	}
	if !ev[0].ReceivedAt.Equal(t0) {
		t.Errorf("received_at = %v, want the first receipt %v", ev[0].ReceivedAt, t0)
	}
	ds, err := s.DeliveryList(context.Background(), &store.DeliveryListParams{Source: "stripe", EventID: "evt_1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].RequestID == ds[1].RequestID || ds[0].EventPK != ev[0].PK {
		t.Fatalf("deliveries of evt_1 = %+v, want two attempts of one event", ds)
	}
	if all := events(t, s, &store.EventListParams{}); len(all) != 4 {
		t.Fatalf("%d events, want 4", len(all))
	}
}

// A list that asks for a body prefix gets each body's first bytes
// exactly (bytes, not characters) and every body's whole size, so a page
// reads a fixed amount per delivery; without it, the bodies whole.
func testDeliveryListBodyPrefix(t *testing.T, o Opener) {
	s := o.Open(t)
	big := bytes.Repeat([]byte("\u00e9\x00\xff{\"a\":[["), 20000)
	bodies := map[string][]byte{"evt_big": big, "evt_small": []byte(`{"id":"s"}`), "evt_empty": nil}
	for id, b := range bodies {
		d := delivery("stripe", id, 0)
		d.Body = b
		commit(t, s, one(d))
	}
	for _, prefix := range []int{0, 1000, len(big), len(big) + 1} {
		for id, body := range bodies {
			ds, err := s.DeliveryList(context.Background(), &store.DeliveryListParams{Source: "stripe", EventID: id, BodyPrefix: prefix})
			if err != nil || len(ds) != 1 {
				t.Fatalf("DeliveryList %s, prefix %d: %v %v", id, prefix, ds, err)
			}
			want := body
			if prefix > 0 && len(body) > prefix {
				want = body[:prefix]
			}
			if !bytes.Equal(ds[0].Body, want) || ds[0].BodySize != len(body) {
				t.Errorf("%s with prefix %d: %d bytes (equal %v), size %d; want the first %d bytes and size %d",
					id, prefix, len(ds[0].Body), bytes.Equal(ds[0].Body, want), ds[0].BodySize, len(want), len(body))
			}
		}
	}
}

func testInboxKeepsBytesAndTimes(t *testing.T, o Opener) {
	s := o.Open(t)
	body := []byte("{\"a\":\"\\u00e9\"}\x00\xff\xfe raw \r\n")
	d := delivery("stripe", "evt_bytes", 0)
	d.Body = body
	d.Headers = map[string]string{"Stripe-Account": "acct_1", "User-Agent": "Stripe/1.0"}
	d.BatchIndex = 7
	noTime := delivery("stripe", "evt_notime", 0)
	noTime.OccurredAt = time.Time{}
	noTime.Body = nil
	commit(t, s, one(d, noTime))
	ds, err := s.DeliveryList(context.Background(), &store.DeliveryListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 {
		t.Fatalf("%d deliveries, want 2", len(ds))
	}
	got := ds[0]
	if !bytes.Equal(got.Body, body) {
		t.Errorf("body = %q, want the exact bytes %q", got.Body, body)
	}
	if got.Headers["Stripe-Account"] != "acct_1" || len(got.Headers) != 2 {
		t.Errorf("headers = %v", got.Headers)
	}
	if got.BatchIndex != 7 || got.Type != d.Type || got.Entity != d.Entity || got.Account != d.Account {
		t.Errorf("fields = %+v", got)
	}
	if !got.OccurredAt.Equal(d.OccurredAt) || !got.ReceivedAt.Equal(d.ReceivedAt) {
		t.Errorf("times = %v/%v, want %v/%v (microsecond precision)", got.OccurredAt, got.ReceivedAt, d.OccurredAt, d.ReceivedAt)
	}
	if got.OccurredAt.Location() != time.UTC {
		t.Errorf("times must come back in UTC")
	}
	if !ds[1].OccurredAt.IsZero() || len(ds[1].Body) != 0 {
		t.Errorf("unknown occurred_at must stay unknown, empty body empty: %+v", ds[1])
	}
	ev := events(t, s, &store.EventListParams{EventID: "evt_notime"})
	if len(ev) != 1 || !ev[0].OccurredAt.IsZero() {
		t.Errorf("event without occurred_at = %+v", ev)
	}
}

func testInboxIsolatesFailure(t *testing.T, o Opener) {
	s := o.Open(t)
	bad := delivery("stripe", "", 0) // an event must have an id
	res := commit(t, s,
		one(delivery("stripe", "evt_a", 0)),
		one(delivery("stripe", "evt_b", 0), bad),
		one(delivery("stripe", "evt_c", 0)),
	)
	if res[0].Err != nil || res[2].Err != nil {
		t.Fatalf("good submissions failed: %v / %v", res[0].Err, res[2].Err)
	}
	if res[1].Err == nil {
		t.Fatalf("submission with an empty event id succeeded")
	}
	got := map[string]bool{}
	for _, e := range events(t, s, &store.EventListParams{}) {
		got[e.EventID] = true
	}
	if !got["evt_a"] || !got["evt_c"] || got["evt_b"] || len(got) != 2 {
		t.Fatalf("stored events %v: want evt_a and evt_c only (the failed submission is all or nothing)", got)
	}
	ds, err := s.DeliveryList(context.Background(), &store.DeliveryListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 {
		t.Fatalf("%d deliveries, want 2", len(ds))
	}
}

func testInboxConcurrentSameEvent(t *testing.T, o Opener) {
	s := o.Open(t)
	const n = 24
	var wg sync.WaitGroup
	results := make([]store.SubmissionResult, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.InboxCommit(context.Background(), &store.InboxCommitParams{
				Submissions: []*store.Submission{one(delivery("stripe", "evt_race", i))},
			})
			errs[i] = err
			if err == nil {
				results[i] = r[0]
			}
		}()
	}
	wg.Wait()
	fresh := 0
	for i := range n {
		if errs[i] != nil || results[i].Err != nil {
			t.Fatalf("commit %d: %v %v", i, errs[i], results[i].Err)
		}
		if !results[i].Items[0].Duplicate {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d commits saw the event as new, want exactly 1", fresh)
	}
	ev := events(t, s, &store.EventListParams{EventID: "evt_race"})
	if len(ev) != 1 || ev[0].Deliveries != n {
		t.Fatalf("evt_race = %+v, want one event with %d deliveries", ev, n)
	}
}

func testInboxAuditRides(t *testing.T, o Opener) {
	s := o.Open(t)
	sub := one(delivery("stripe", "evt_x", 0))
	sub.Audit = []*store.AuditInsertParams{{At: t0, Actor: "receiver", Action: "received", Source: "stripe", EventID: "evt_x", Detail: "ok"}}
	failing := one(delivery("stripe", "", 0))
	failing.Audit = []*store.AuditInsertParams{{At: t0, Actor: "receiver", Action: "received", Source: "stripe", EventID: "never", Detail: "x"}}
	commit(t, s, sub, failing)
	rows, err := s.AuditList(context.Background(), &store.AuditListParams{Action: "received"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].EventID != "evt_x" {
		t.Fatalf("audit rows %+v: want only the committed submission's row", rows)
	}
	// A group that fails nowhere writes its audit rows too.
	alone := one(delivery("stripe", "evt_y", 0))
	alone.Audit = []*store.AuditInsertParams{{At: t0, Actor: "receiver", Action: "received", Source: "stripe", EventID: "evt_y", Detail: "ok"}}
	commit(t, s, alone)
	rows, err = s.AuditList(context.Background(), &store.AuditListParams{Action: "received", EventID: "evt_y", Source: "stripe"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("audit rows of evt_y %+v: want the row its submission carried", rows)
	}
}

// testInboxEventTwiceInGroup: a sender's retry that lands in the same
// group commit as the original is a duplicate of it, whichever submission
// carries it, and the event's deliveries keep the group's order.
func testInboxEventTwiceInGroup(t *testing.T, o Opener) {
	s := o.Open(t)
	commit(t, s, one(delivery("stripe", "evt_old", 0)))
	first, retry := delivery("stripe", "evt_g", 0), delivery("stripe", "evt_g", 1)
	first.Unrouted, retry.Unrouted = true, true
	first.Headers = map[string]string{"Attempt": "1"}
	retry.Headers = map[string]string{"Attempt": "2"}
	retry.Body = []byte(`{"id":"evt_g","retry":true}`)
	res := commit(t, s,
		one(first),
		one(delivery("stripe", "evt_old", 1), delivery("stripe", "evt_new", 0)),
		one(retry),
	)
	want := [][]bool{{false}, {true, false}, {true}}
	for i, r := range res {
		if r.Err != nil || len(r.Items) != len(want[i]) {
			t.Fatalf("submission %d: %+v", i, r)
		}
		for j, dup := range want[i] {
			if r.Items[j].Duplicate != dup {
				t.Errorf("submission %d item %d: duplicate %v, want %v", i, j, r.Items[j].Duplicate, dup)
			}
		}
	}
	if res[0].Items[0].EventPK != res[2].Items[0].EventPK || res[0].Items[0].DeliveryID >= res[2].Items[0].DeliveryID {
		t.Fatalf("evt_g outcomes %+v / %+v: want one event, the first delivery's id lower", res[0].Items[0], res[2].Items[0])
	}
	ev := events(t, s, &store.EventListParams{EventID: "evt_g"})
	if len(ev) != 1 || ev[0].Deliveries != 2 || ev[0].Disposition != store.DispositionUnrouted || !ev[0].ReceivedAt.Equal(first.ReceivedAt) {
		t.Fatalf("evt_g = %+v, want one unrouted event with 2 deliveries received at the first's time", ev)
	}
	if old := events(t, s, &store.EventListParams{EventID: "evt_old"}); len(old) != 1 || old[0].Deliveries != 2 {
		t.Fatalf("evt_old = %+v, want 2 deliveries", old)
	}
	ds, err := s.DeliveryList(context.Background(), &store.DeliveryListParams{Source: "stripe", EventID: "evt_g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 || ds[0].ID != res[0].Items[0].DeliveryID || ds[1].ID != res[2].Items[0].DeliveryID ||
		ds[0].Headers["Attempt"] != "1" || ds[1].Headers["Attempt"] != "2" || string(ds[1].Body) != string(retry.Body) {
		t.Fatalf("deliveries of evt_g = %+v, want each attempt under the id its outcome named, in group order", ds)
	}
	rows, err := s.AuditList(context.Background(), &store.AuditListParams{Action: "disposition"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].EventID != "evt_g" {
		t.Fatalf("disposition audit rows %+v: want one, for the first receipt of evt_g", rows)
	}
}

// testInboxUnroutedAuditRows: an event received unrouted gets one audit
// row (store.UnroutedAudit), written with its first receipt; a retry
// writes none, whether it comes in the same group or a later one, and a
// group's rows keep the order its events arrived in, whatever else the
// group stores.
func testInboxUnroutedAuditRows(t *testing.T, o Opener) {
	s := o.Open(t)
	unrouted := func(id string, i int) *store.DeliveryInput {
		d := delivery("stripe", id, i)
		d.Type, d.Entity, d.Unrouted = "charge.refunded."+id, "ch_"+id, true
		return d
	}
	before := unrouted("evt_u_before", 0)
	commit(t, s, one(before))
	group := []*store.DeliveryInput{unrouted("evt_u_b", 1), delivery("stripe", "evt_routed", 2), unrouted("evt_u_before", 3),
		unrouted("evt_u_a", 4), unrouted("evt_u_b", 5)}
	res := commit(t, s, one(group[0]), one(group[1], group[2]), one(group[3]), one(group[4]))
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("submission %d: %v", i, r.Err)
		}
	}
	rows, err := s.AuditList(context.Background(), &store.AuditListParams{Action: "disposition"})
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(rows, func(a, b *store.AuditEntry) int { return cmp.Compare(a.ID, b.ID) })
	want := []*store.AuditInsertParams{store.UnroutedAudit(before), store.UnroutedAudit(group[0]), store.UnroutedAudit(group[3])}
	if len(rows) != len(want) {
		t.Fatalf("%d disposition audit rows %+v, want %d: one for each unrouted event's first receipt", len(rows), rows, len(want))
	}
	for i, w := range want {
		g := rows[i].AuditInsertParams
		if !g.At.Equal(w.At) || g.Actor != w.Actor || g.Action != w.Action || g.Source != w.Source || g.EventID != w.EventID ||
			g.Entity != w.Entity || g.Detail != w.Detail {
			t.Errorf("disposition audit row %d = %+v, want %+v", i, g, *w)
		}
	}
}

// testInboxRoutedGroupInOrder: a group of routed deliveries, which
// writes no audit rows (PostgreSQL stores it in one statement), gives
// each delivery an id in the order the deliveries arrived, keeps each
// attempt's headers and body under that id, queues each new event for
// routing once, and counts a retry inside the group as a duplicate.
func testInboxRoutedGroupInOrder(t *testing.T, o Opener) {
	s := o.Open(t)
	commit(t, s, one(delivery("stripe", "evt_old", 0)))
	var subs []*store.Submission
	for i := range 6 {
		d := delivery("stripe", fmt.Sprintf("evt_%d", i%3), i/3)
		d.Headers = map[string]string{"Attempt": fmt.Sprint(i)}
		d.Body = []byte(fmt.Sprintf(`{"n":%d}`, i))
		subs = append(subs, one(d))
	}
	subs = append(subs, one(delivery("stripe", "evt_old", 1)))
	res := commit(t, s, subs...)
	var last int64
	for i, r := range res {
		if r.Err != nil || len(r.Items) != 1 {
			t.Fatalf("submission %d: %+v", i, r)
		}
		it := r.Items[0]
		if want := i >= 3; it.Duplicate != want {
			t.Errorf("submission %d: duplicate %v, want %v", i, it.Duplicate, want)
		}
		if it.DeliveryID <= last {
			t.Errorf("submission %d: delivery id %d after %d, want ids in arrival order", i, it.DeliveryID, last)
		}
		last = it.DeliveryID
		if i < 3 && res[i+3].Items[0].EventPK != it.EventPK {
			t.Errorf("evt_%d: event pks %d and %d, want one event", i, it.EventPK, res[i+3].Items[0].EventPK)
		}
	}
	for i := range 3 {
		id := fmt.Sprintf("evt_%d", i)
		ds, err := s.DeliveryList(context.Background(), &store.DeliveryListParams{Source: "stripe", EventID: id})
		if err != nil || len(ds) != 2 {
			t.Fatalf("deliveries of %s: %+v, %v; want 2", id, ds, err)
		}
		for j, d := range ds {
			n := i + 3*j
			if d.ID != res[n].Items[0].DeliveryID || d.EventPK != res[n].Items[0].EventPK || d.Headers["Attempt"] != fmt.Sprint(n) ||
				string(d.Body) != fmt.Sprintf(`{"n":%d}`, n) {
				t.Errorf("delivery %d of %s = %+v, want submission %d's attempt under its outcome's id", j, id, d, n)
			}
		}
	}
	if ev := events(t, s, &store.EventListParams{EventID: "evt_old"}); len(ev) != 1 || ev[0].Deliveries != 2 {
		t.Fatalf("evt_old = %+v, want 2 deliveries", ev)
	}
	waiting, err := s.EventListUnrouted(context.Background(), &store.EventListUnroutedParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range waiting {
		ids = append(ids, e.EventID)
	}
	if want := []string{"evt_old", "evt_0", "evt_1", "evt_2"}; !slices.Equal(ids, want) {
		t.Fatalf("events waiting for routing %v, want %v: each new event once", ids, want)
	}
}

func testEventListPaging(t *testing.T, o Opener) {
	s := o.Open(t)
	var subs []*store.Submission
	for i := range 25 {
		src := "stripe"
		if i%5 == 0 {
			src = "crm"
		}
		subs = append(subs, one(delivery(src, fmt.Sprintf("evt_%02d", i), 0)))
	}
	commit(t, s, subs...)
	var seen []string
	after := int64(0)
	pages := 0
	for {
		r, err := s.EventList(context.Background(), &store.EventListParams{Source: "stripe", AfterPK: after, Limit: 7})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, e := range r.Events {
			if e.Source != "stripe" {
				t.Fatalf("filter leaked %+v", e)
			}
			seen = append(seen, e.EventID)
		}
		if r.NextAfterPK == 0 {
			break
		}
		after = r.NextAfterPK
	}
	if len(seen) != 20 || pages != 3 {
		t.Fatalf("paged %d stripe events in %d pages, want 20 in 3", len(seen), pages)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			t.Fatalf("events out of order: %v", seen)
		}
	}
}

func testAudit(t *testing.T, o Opener) {
	s := o.Open(t)
	ctx := context.Background()
	for i, action := range []string{"tenant_mismatch", "disposition", "tenant_mismatch"} {
		if _, err := s.AuditInsert(ctx, &store.AuditInsertParams{
			At: t0.Add(time.Duration(i) * time.Second), Actor: "receiver", Action: action,
			Source: "stripe", EventID: fmt.Sprint("evt_", i), Detail: "payload names acct_9",
		}); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := s.AuditList(ctx, &store.AuditListParams{Action: "tenant_mismatch"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].EventID != "evt_0" || rows[1].EventID != "evt_2" || !rows[1].At.Equal(t0.Add(2*time.Second)) {
		t.Fatalf("audit rows = %+v", rows)
	}
	rest, err := s.AuditList(ctx, &store.AuditListParams{AfterID: rows[0].ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(rest) != 2 {
		t.Fatalf("after first row: %d rows, want 2", len(rest))
	}
}

func testDurableAcrossHandles(t *testing.T, o Opener) {
	if o.Reopen == nil {
		t.Skip("driver offers no second handle")
	}
	s := o.Open(t)
	commit(t, s, one(delivery("stripe", "evt_durable", 0)))
	s2 := o.Reopen(t, s)
	if applied, err := s2.Migrate(context.Background()); err != nil || len(applied) != 0 {
		t.Fatalf("Migrate on second handle: %v %v", applied, err)
	}
	if ev := events(t, s2, &store.EventListParams{EventID: "evt_durable"}); len(ev) != 1 {
		t.Fatalf("second handle sees %d events, want 1", len(ev))
	}
}

func testCanceledContext(t *testing.T, o Opener) {
	s := o.Open(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{one(delivery("stripe", "evt_cancel", 0))}})
	if err == nil {
		t.Fatal("InboxCommit with a canceled context reported success")
	}
	if !errors.Is(err, context.Canceled) && !errors.Is(err, store.ErrUnavailable) {
		t.Logf("error (acceptable as long as nothing is stored): %v", err)
	}
	if ev := events(t, s, &store.EventListParams{EventID: "evt_cancel"}); len(ev) != 0 {
		t.Fatalf("a failed commit stored %d events", len(ev))
	}
}

// testProbeWrite: the readiness probe commits, again and again, and from a
// second handle on the same database.
func testProbeWrite(t *testing.T, o Opener) {
	s := o.Open(t)
	ctx := context.Background()
	for i := range 3 {
		if err := s.ProbeWrite(ctx, t0.Add(time.Duration(i)*time.Second)); err != nil {
			t.Fatalf("ProbeWrite %d: %v", i, err)
		}
	}
	if o.Reopen != nil {
		if err := o.Reopen(t, s).ProbeWrite(ctx, t0.Add(time.Minute)); err != nil {
			t.Fatalf("ProbeWrite from a second handle: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.ProbeWrite(ctx, t0); err == nil {
		t.Fatal("ProbeWrite with a canceled context succeeded, want an error")
	}
}
