package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// The stage breakdown reads the stamps the ledger itself writes: an
// event taken through receive, routing, an entity claim, processing, an
// effect claim and a call at known times comes back with exactly those
// times, on both drivers (the claims stamp claimed_at in their own
// update).
func TestReadStampsFromTheLedger(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		stampsRoundTrip(t, "sqlite", "sqlite:"+filepath.Join(t.TempDir(), "stamps.db"))
	})
	t.Run("postgres", func(t *testing.T) {
		stampsRoundTrip(t, "postgres", pgtest.NewDatabase(t))
	})
}

func stampsRoundTrip(t *testing.T, driver, url string) {
	ctx := context.Background()
	st, err := storeopen.Open(ctx, url)
	if err != nil {
		t.Fatalf("open %s: %v", driver, err)
	}
	defer st.Close()
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	t0 := time.UnixMicro(1_700_000_000_000_000).UTC()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "req-1", Source: "stripe", EventID: "evt_1", Type: "invoice.paid", Entity: "in_1",
		ReceivedAt: t0, Body: []byte(`{"id":"evt_1"}`)}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("InboxCommit: %v %+v", err, res)
	}
	pk := res[0].Items[0].EventPK
	if err := st.EventRoute(ctx, &store.EventRouteParams{Now: at(1), Decisions: []*store.RouteDecision{{EventPK: pk,
		Routes: []store.Route{{Flow: "invoices", Entity: "in_1", OrderKey: "k1"}}}}}); err != nil {
		t.Fatalf("EventRoute: %v", err)
	}
	leases, err := st.EntityClaim(ctx, &store.EntityClaimParams{Owner: "w", Now: at(3), LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(leases) != 1 {
		t.Fatalf("EntityClaim: %v %d leases", err, len(leases))
	}
	items, err := st.WorkListPending(ctx, &store.WorkListPendingParams{Flow: "invoices", Entity: "in_1"})
	if err != nil || len(items) != 1 {
		t.Fatalf("WorkListPending: %v %d items", err, len(items))
	}
	if _, err := st.FlowApply(ctx, &store.FlowApplyParams{Lease: leases[0], Now: at(4), WorkID: items[0].ID, EventPK: pk, Actor: "w",
		ReleaseIfDrained: true, Version: "r1", VersionSort: "0000000001", Ordered: true, State: []byte(`{}`),
		Effects: []*store.EffectInsert{{EpisodeKey: "invoices:in_1:r1:pay", Effect: "pay", Destination: "loopback", Request: []byte(`{}`)}}}); err != nil {
		t.Fatalf("FlowApply: %v", err)
	}
	claims, err := st.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: at(6), LeaseFor: time.Minute, Limit: 10, MaxRedrives: 3})
	if err != nil || len(claims) != 1 {
		t.Fatalf("EffectClaim: %v %d claims", err, len(claims))
	}
	if err := st.EffectSettle(ctx, &store.EffectSettleParams{EffectID: claims[0].ID, Token: claims[0].Token, Now: at(9), Actor: "d",
		State: store.EffectDone, AddAttempt: true, Attempt: &store.Attempt{StartedAt: at(7), Duration: 1500 * time.Microsecond, Status: 200}}); err != nil {
		t.Fatalf("EffectSettle: %v", err)
	}
	rows, err := readStamps(ctx, driver, url)
	if err != nil {
		t.Fatal(err)
	}
	us := func(ms int) int64 { return at(ms).UnixMicro() }
	want := stampRow{eventID: "evt_1", received: us(0), routed: us(1), claimed: us(3), applied: us(4), created: us(4),
		leased: us(6), called: us(7), callUS: 1500, settled: us(9)}
	if len(rows) != 1 || rows[0] != want {
		t.Fatalf("stamps %+v, want %+v", rows, want)
	}
}

// The table counters are the target database's own: an event received
// into a fresh store shows as an insert into events and into deliveries
// once the store's connections have closed (a backend reports its
// counters as it leaves), and an insert of the admin database's own
// does not.
func TestTableCountersFromTheStore(t *testing.T) {
	ctx := context.Background()
	admin := pgtest.ServerURL(t)
	url := pgtest.NewDatabase(t)
	st, err := storeopen.Open(ctx, url)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	stats, err := newPGStats(ctx, admin, url, false)
	if err != nil {
		t.Fatal(err)
	}
	base, err := stats.readWithTables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if base.tables["events"].indexes < 2 {
		t.Fatalf("events has %d indexes, want its primary key and more", base.tables["events"].indexes)
	}
	res, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "req-1", Source: "stripe", EventID: "evt_1", Type: "invoice.paid", Entity: "in_1",
		ReceivedAt: time.Now().UTC(), Body: []byte(`{"id":"evt_1"}`)}}}}})
	if err != nil || res[0].Err != nil {
		t.Fatalf("InboxCommit: %v %+v", err, res)
	}
	st.Close()
	var got []pgTable
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		end, err := stats.readWithTables(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got = end.tableDelta(base); len(got) >= 2 {
			break
		}
	}
	by := map[string]pgTable{}
	for _, tb := range got {
		by[tb.name] = tb
	}
	if by["events"].ins != 1 || by["deliveries"].ins != 1 {
		t.Fatalf("events %+v, deliveries %+v; want one insert each (all: %+v)", by["events"], by["deliveries"], got)
	}
	if by["events"].indexBuffers == 0 {
		t.Errorf("events: no index buffers counted for an insert: %+v", by["events"])
	}
}

// The floor measures the target database's own backend: it makes the
// calls its rate and window ask for, reads the backend's CPU for each of
// its two loops, and drops the table its commits wrote to.
func TestPGFloorMeasuresTheBackend(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	f, err := measurePGFloor(ctx, url, 200, 500*time.Millisecond)
	if errors.Is(err, errNotLocal) {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the test PostgreSQL must run on this machine under CI: %v", err)
		}
		t.Skipf("SKIPPED: %v: the floor reads its backend's CPU from /proc", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("floor at %.0f/s: round trip %s, commit %s, %d calls each", f.rate, f.roundTrip, f.commit, f.calls)
	if f.calls != 100 || f.rate != 200 {
		t.Errorf("calls %d at %.0f/s, want 100 at 200/s", f.calls, f.rate)
	}
	if f.roundTrip <= 0 || f.commit <= 0 {
		t.Errorf("round trip %s, commit %s: want the backend's CPU for each", f.roundTrip, f.commit)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var left bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('hookledger_bench_floor') IS NOT NULL").Scan(&left); err != nil || left {
		t.Errorf("the floor's table is left behind (%v)", err)
	}

	// Per measured call: a reader that counts the rows the commits left,
	// a millisecond each, reads exactly one millisecond a call, the
	// warm-up's calls left out.
	if _, err := conn.Exec(ctx, "CREATE TABLE hookledger_bench_floor (id bigserial PRIMARY KEY, v int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	counter, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer counter.Close(ctx)
	rows := func() (time.Duration, error) {
		var n int64
		err := counter.QueryRow(ctx, "SELECT count(*) FROM hookledger_bench_floor").Scan(&n)
		return time.Duration(n) * time.Millisecond, err
	}
	per, err := floorCPU(ctx, conn, rows, floorInsertSQL, 1000, 60)
	if err != nil || per != time.Millisecond {
		t.Errorf("per call %s (%v), want 1ms: one per measured commit", per, err)
	}
}

// A real backend of the target's database is found by its title and its
// wake-ups counted: every lone round trip the client waits for wakes it
// at least once.
func TestBackendWakeupsOfARealBackend(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	db, err := databaseOf(url)
	if err != nil {
		t.Fatal(err)
	}
	b := newBackendCPU(db)
	b.sample()
	if _, n := b.total(); n == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the test PostgreSQL must run on this machine under CI: no backend of %s in /proc", db)
		}
		t.Skipf("SKIPPED: no backend of %s in /proc: PostgreSQL runs elsewhere", db)
	}
	const trips = 20
	for i := range trips {
		// A pause first, so the backend is idle and blocks before each.
		time.Sleep(2 * time.Millisecond)
		if _, err := conn.Exec(ctx, "SELECT $1::int", i); err != nil {
			t.Fatal(err)
		}
	}
	b.sample()
	if got := b.wakeups(); got < trips {
		t.Errorf("%d wake-ups over %d lone round trips, want at least one each", got, trips)
	}
}
