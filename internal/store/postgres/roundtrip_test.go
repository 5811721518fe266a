package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestLoneWebhookRoutingRoundTrips: routing a lone webhook's page, with
// its entity leased, its work listed and settled in the same transaction,
// costs four round trips: the take; the enqueue with the lease, which
// reads the entity's work in the same statement, and what the settle's
// ReadGroup reads (leaseAheadSQL, ahead.go); the settle's writes; its
// audit rows with COMMIT. It took seven when the enqueue waited for its
// answer alone and the leased work was listed by a statement of its own,
// and five while the settle's fence was a round trip of its own; every
// round trip is a wake-up of the server and of PostgreSQL
// (docs/benchmarks-history.md, "Run AF").
func TestLoneWebhookRoutingRoundTrips(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	receiveLone(t, h, at)
	var listed []*store.WorkItem
	page, trips, err := routeLone(h, at, func(l *store.Lease, it *store.WorkItem) []*store.FlowApplyParams {
		listed = append(listed, it)
		return []*store.FlowApplyParams{{Lease: l, WorkID: it.ID, EventPK: it.Event.PK, Now: at,
			Version: "1", VersionSort: "1", State: []byte(`{}`), ReleaseIfDrained: true}}
	})
	if err != nil || page.Events != 1 || len(page.Leases) != 1 || len(page.Settled) != 1 || page.Settled[0].Err != nil {
		t.Fatalf("EventRouteNext = %+v, %v; want the event routed, its entity leased and its item settled", page, err)
	}
	if len(listed) != 1 || listed[0].Event.EventID != "evt_1" || string(listed[0].Event.Body) != `{"n":1}` ||
		listed[0].Flow != "orders" || listed[0].Entity != "o-1" || listed[0].OrderKey != "evt_1" || !listed[0].Event.ReceivedAt.Equal(at) {
		t.Fatalf("the lease carried %+v, want evt_1's item with its event and body", listed)
	}
	if res := page.Settled[0].Results[0]; res.Disposition != store.DispositionApplied || !res.Released {
		t.Fatalf("settled %+v, want applied with the lease freed", res)
	}
	if trips != 4 {
		t.Fatalf("routing a lone webhook took %d round trips, want 4", trips)
	}
}

// TestRoutingReadAhead: what routing's lease reads ahead for its settle
// holds the settle's events locked from the lease on, and a settle the
// read cannot answer for reads as it always did. A settle naming a lease
// token the entity does not hold gets no answer from the read ahead (which
// saw the entity leased) but the fence's: the lease is lost, and nothing
// is settled.
func TestRoutingReadAhead(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	pk := receiveLone(t, h, at)

	// Another transaction cannot lock the event while the settle is
	// prepared: the lease's round trip locked it.
	var lockErr error
	page, _, err := routeLone(h, at, func(l *store.Lease, it *store.WorkItem) []*store.FlowApplyParams {
		_, lockErr = h.pool.Exec(ctx, `SELECT 1 FROM events WHERE pk = $1 FOR NO KEY UPDATE NOWAIT`, it.Event.PK)
		forged := *l
		forged.Token = "router:not-the-lease"
		return []*store.FlowApplyParams{{Lease: &forged, WorkID: it.ID, EventPK: it.Event.PK, Now: at,
			Version: "1", VersionSort: "1", State: []byte(`{}`), ReleaseIfDrained: true}}
	})
	var pgErr *pgconn.PgError
	if !errors.As(lockErr, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("locking the event beside the settle: %v, want lock_not_available (55P03)", lockErr)
	}
	if err != nil || len(page.Settled) != 1 || !errors.Is(page.Settled[0].Err, store.ErrLeaseLost) {
		t.Fatalf("EventRouteNext = %+v, %v; want the settle under a forged token to lose its lease", page, err)
	}
	var done int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM work WHERE event_pk = $1 AND done_at IS NOT NULL`, pk).Scan(&done); err != nil || done != 0 {
		t.Fatalf("settled work rows = %d, %v; want none", done, err)
	}
}

// TestInboxRoundTrips: a group is stored in one round trip (BEGIN, the
// events with their deliveries, COMMIT), an event received unrouted too:
// the statement writes its audit row itself where the event is new
// (inboxUnroutedAuditCTE). It took two when the row waited for the
// statement's answer. Only audit rows a submission carries wait for it.
func TestInboxRoundTrips(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	before := h.pipeTrips.Load()
	receiveLone(t, h, at)
	if trips := h.pipeTrips.Load() - before; trips != 1 {
		t.Errorf("a lone webhook took %d round trips, want 1", trips)
	}
	// A group of two events of one source and a retry: one round trip
	// still, and never the careful way, which would store it too.
	before = h.pipeTrips.Load()
	var subs []*store.Submission
	for i, id := range []string{"evt_a", "evt_b", "evt_a"} {
		subs = append(subs, &store.Submission{Deliveries: []*store.DeliveryInput{{RequestID: fmt.Sprintf("g-%d", i), Source: "shop",
			EventID: id, Type: "order.updated", Entity: "o-" + id, ReceivedAt: at, Body: []byte(`{}`)}}})
	}
	out, err := h.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: subs})
	if err != nil || out[0].Items[0].Duplicate || out[1].Items[0].Duplicate || !out[2].Items[0].Duplicate {
		t.Fatalf("InboxCommit = %+v, %v; want two new deliveries and a duplicate", out, err)
	}
	if trips, careful := h.pipeTrips.Load()-before, h.inboxCareful.Load(); trips != 1 || careful != 0 {
		t.Errorf("a group took %d round trips and %d careful writes, want 1 and 0", trips, careful)
	}
	before = h.pipeTrips.Load()
	out, err = h.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r-2", Source: "shop", EventID: "evt_2", Type: "order.updated", Entity: "o-2",
		ReceivedAt: at, Body: []byte(`{"n":2}`), Unrouted: true}}}}})
	if err != nil || out[0].Err != nil || out[0].Items[0].Duplicate {
		t.Fatalf("InboxCommit = %+v, %v; want one new delivery", out, err)
	}
	if trips := h.pipeTrips.Load() - before; trips != 1 {
		t.Errorf("an unrouted webhook took %d round trips, want 1", trips)
	}
	before = h.pipeTrips.Load()
	out, err = h.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: []*store.Submission{{
		Deliveries: []*store.DeliveryInput{{RequestID: "r-3", Source: "shop", EventID: "evt_3", Type: "order.updated", Entity: "o-3",
			ReceivedAt: at, Body: []byte(`{"n":3}`), Unrouted: true}},
		Audit: []*store.AuditInsertParams{{At: at, Actor: "receiver", Action: "received", Source: "shop", EventID: "evt_3"}}}}})
	if err != nil || out[0].Err != nil || out[0].Items[0].Duplicate {
		t.Fatalf("InboxCommit = %+v, %v; want one new delivery", out, err)
	}
	if trips := h.pipeTrips.Load() - before; trips != 2 {
		t.Errorf("a webhook carrying an audit row took %d round trips, want 2", trips)
	}
	rows, err := h.AuditList(context.Background(), &store.AuditListParams{EventID: "evt_3"})
	if err != nil || len(rows) != 2 || rows[0].Action != "received" || rows[1].Action != "disposition" || rows[0].ID > rows[1].ID {
		t.Fatalf("audit rows of evt_3 = %+v, %v; want the submission's own, then the unrouted event's", rows, err)
	}
}

// routeLone routes the waiting events at at, each to flow orders and its
// own entity, leasing their entities and settling in the routing
// transaction what settle makes of each listed item; it answers the page
// and the round trips the routing took.
func routeLone(h *handle, at time.Time, settle func(l *store.Lease, it *store.WorkItem) []*store.FlowApplyParams) (store.RoutedPage, int64, error) {
	before := h.pipeTrips.Load()
	page, err := h.EventRouteNext(context.Background(), &store.EventRouteNextParams{Limit: 10, Now: at, SettleMax: 1,
		Decide: func(evs []*store.RoutableEvent) []*store.RouteDecision {
			ds := make([]*store.RouteDecision, len(evs))
			for i, e := range evs {
				ds[i] = &store.RouteDecision{EventPK: e.PK, Routes: []store.Route{{Flow: "orders", Entity: e.Entity, OrderKey: e.EventID}}}
			}
			return ds
		},
		Claim: &store.EntityClaimParams{Owner: "router", Now: at, LeaseFor: time.Minute, Limit: 4, List: 50},
		Settle: func(_ context.Context, leases []*store.Lease) store.RouteSettle {
			var subs [][]*store.FlowApplyParams
			for _, l := range leases {
				for _, it := range l.Pending {
					subs = append(subs, settle(l, it))
				}
			}
			return store.RouteSettle{Subs: subs}
		}})
	return page, h.pipeTrips.Load() - before, err
}

// receiveLone stores one webhook, evt_1 of entity o-1, received at at,
// and answers its event's pk.
func receiveLone(t *testing.T, h *handle, at time.Time) int64 {
	t.Helper()
	out, err := h.InboxCommit(context.Background(), &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r-1", Source: "shop", EventID: "evt_1", Type: "order.updated", Entity: "o-1",
		ReceivedAt: at, Body: []byte(`{"n":1}`)}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return out[0].Items[0].EventPK
}

// claimedEffects makes n approved effects of one event, each on an entity
// of its own, and claims them all at at for a minute.
func claimedEffects(t *testing.T, h *handle, at time.Time, n int) []*store.ClaimedEffect {
	t.Helper()
	ctx := context.Background()
	pk := receiveLone(t, h, at)
	if _, err := h.pool.Exec(ctx, `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination, state,
			request, source_event_pk, causation_id, hop, created_at, updated_at)
		SELECT 'orders:o-' || g || ':r1:sync', 'orders', 'o-' || g, 'r1', '0000000001', 'sync', 'crm', 'approved', '{}',
			$3::bigint, '', 0, $1, $1
		FROM generate_series(1, $2::int) g`, at, n, pk); err != nil {
		t.Fatal(err)
	}
	cs, err := h.EffectClaim(ctx, &store.EffectClaimParams{Owner: "w1", Now: at, LeaseFor: time.Minute, Limit: n, MaxRedrives: 3})
	if err != nil || len(cs) != n {
		t.Fatalf("claimed %d effects, %v; want %d", len(cs), err, n)
	}
	return cs
}

// TestSettleByClaimRoundTrips: a call's settle that carries what its
// claim saw costs one round trip, BEGIN, the guarded statement
// (settleSeenSQL) and COMMIT sent together, and so does a group of them;
// one without costs two, the fence and then the writes with COMMIT.
func TestSettleByClaimRoundTrips(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	cs := claimedEffects(t, h, at, 5)
	settle := func(c *store.ClaimedEffect, seen bool) *store.EffectSettleParams {
		p := &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: at.Add(time.Second), Actor: "delivery",
			State: store.EffectDone, AddAttempt: true, Attempt: &store.Attempt{Status: 200}, DestinationRef: "deal"}
		if seen {
			p.Claimed = c.Fenced()
		}
		return p
	}
	for _, c := range []struct {
		name  string
		ps    []*store.EffectSettleParams
		trips int64
	}{
		{"one settle by its claim", []*store.EffectSettleParams{settle(cs[0], true)}, 1},
		{"a group by their claims", []*store.EffectSettleParams{settle(cs[1], true), settle(cs[2], true), settle(cs[3], true)}, 1},
		{"one settle fenced", []*store.EffectSettleParams{settle(cs[4], false)}, 2},
	} {
		before := h.pipeTrips.Load()
		for i, err := range h.EffectSettleGroup(ctx, c.ps) {
			if err != nil {
				t.Fatalf("%s: settle %d: %v", c.name, i, err)
			}
		}
		if trips := h.pipeTrips.Load() - before; trips != c.trips {
			t.Errorf("%s took %d round trips, want %d", c.name, trips, c.trips)
		}
	}
	for _, c := range cs {
		g, err := h.EffectGet(ctx, c.ID)
		if err != nil || g.State != store.EffectDone || g.Attempts != 1 || g.Calls != 1 || g.DestinationRef != "deal" {
			t.Fatalf("effect %d = %+v, %v; want done after one call", c.ID, g, err)
		}
		if as, err := h.AttemptList(ctx, c.ID); err != nil || len(as) != 1 || as[0].Number != 1 || as[0].Status != 200 {
			t.Fatalf("attempts of effect %d = %+v, %v; want call 1", c.ID, as, err)
		}
	}
	if rows, err := h.AuditList(ctx, &store.AuditListParams{Action: "effect_done", Limit: 10}); err != nil || len(rows) != 5 {
		t.Fatalf("effect_done audit rows = %d, %v; want 5", len(rows), err)
	}
}

// TestSettleByClaimGuards: each column the guarded settle compares with
// its claim's view, changed alone after the claim, sends the settle the
// fenced way (a third round trip), which settles the effect as it then
// stands, or answers ErrLeaseLost when the lease no longer holds. Nothing
// in the product changes these columns of an effect in flight but another
// claim, which changes several at once; each is staged alone here, so
// that every comparison of the guard is shown to matter.
func TestSettleByClaimGuards(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	now := at.Add(time.Second)
	type ledger struct {
		effect   *store.Effect
		attempts []*store.Attempt
		audit    *store.AuditEntry
	}
	cases := []struct {
		name  string
		stage string // $1 is the effect's id
		lost  bool
		check func(l ledger) bool
	}{
		{"nothing changed", ``, false, func(l ledger) bool { return l.effect.Owner == "team-crm" }},
		{"lease token", `UPDATE effects SET lease_token = 'w2:other' WHERE id = $1`, true, nil},
		{"state", `UPDATE effects SET state = 'retry_wait' WHERE id = $1`, true, nil},
		{"lease end", `UPDATE effects SET lease_until = '2026-11-03T12:00:01Z' WHERE id = $1`, true, nil},
		{"owner", `UPDATE effects SET owner = 'bob' WHERE id = $1`, false, func(l ledger) bool { return l.effect.Owner == "bob" }},
		{"attempts", `UPDATE effects SET attempts = 2 WHERE id = $1`, false, func(l ledger) bool { return l.effect.Attempts == 3 }},
		{"calls", `UPDATE effects SET calls = 3 WHERE id = $1`, false, func(l ledger) bool {
			return l.effect.Calls == 4 && len(l.attempts) == 1 && l.attempts[0].Number == 4
		}},
		{"restart mark", `UPDATE effects SET restart = 're-drive' WHERE id = $1`, false, func(l ledger) bool {
			return len(l.attempts) == 1 && l.attempts[0].Restart == store.RestartRedrive
		}},
		{"episode key", `UPDATE effects SET episode_key = 'moved:' || id WHERE id = $1`, false, func(l ledger) bool {
			return l.audit != nil && strings.HasPrefix(l.audit.Detail, "moved:")
		}},
		{"entity", `UPDATE effects SET entity = 'o-moved-' || id WHERE id = $1`, false, func(l ledger) bool {
			return l.audit != nil && strings.HasPrefix(l.audit.Entity, "o-moved-")
		}},
	}
	cs := claimedEffects(t, h, at, len(cases))
	for i, c := range cases {
		cl := cs[i]
		if c.stage != "" {
			if _, err := h.pool.Exec(ctx, c.stage, cl.ID); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		before := h.pipeTrips.Load()
		err := h.EffectSettle(ctx, &store.EffectSettleParams{EffectID: cl.ID, Token: cl.Token, Now: now, Actor: "delivery",
			State: store.EffectDead, AddAttempt: true, Attempt: &store.Attempt{Status: 422}, Class: store.ClassPermanent,
			Reason: "422 from destination", Owner: "team-crm", Claimed: cl.Fenced()})
		trips := h.pipeTrips.Load() - before
		// The guarded settle's one, then the fenced settle's two: its
		// fence, and the writes with COMMIT, or a ROLLBACK (not counted:
		// it is not pipelined) when the lease was lost.
		want := int64(3)
		switch {
		case c.stage == "":
			want = 1
		case c.lost:
			want = 2
		}
		if trips != want {
			t.Errorf("%s: %d round trips, want %d", c.name, trips, want)
		}
		if c.lost {
			if !errors.Is(err, store.ErrLeaseLost) {
				t.Errorf("%s: settle = %v, want ErrLeaseLost", c.name, err)
			}
			if as, err := h.AttemptList(ctx, cl.ID); err != nil || len(as) != 0 {
				t.Errorf("%s: a lost settle recorded attempts %+v, %v", c.name, as, err)
			}
			rows, err := h.AuditList(ctx, &store.AuditListParams{Action: "effect_dead", Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				if strings.HasPrefix(r.Detail, cl.EpisodeKey+":") {
					t.Errorf("%s: a lost settle wrote the audit row %+v", c.name, r)
				}
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: settle: %v", c.name, err)
		}
		var l ledger
		if l.effect, err = h.EffectGet(ctx, cl.ID); err != nil || l.effect.State != store.EffectDead {
			t.Fatalf("%s: effect = %+v, %v; want dead", c.name, l.effect, err)
		}
		if l.attempts, err = h.AttemptList(ctx, cl.ID); err != nil {
			t.Fatal(err)
		}
		rows, err := h.AuditList(ctx, &store.AuditListParams{Action: "effect_dead", Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			if strings.HasPrefix(r.Detail, l.effect.EpisodeKey+":") {
				l.audit = r
			}
		}
		if !c.check(l) {
			t.Errorf("%s: settled as %+v, attempts %+v, audit %+v: not as the effect stood", c.name, l.effect, l.attempts, l.audit)
		}
	}
}

// TestPublishGroupRoundTrips: a group of new publishes is three round
// trips: the keys' hold, with the endpoints read beside it
// (store.EndpointSpecsAhead); the messages' events and deliveries; their
// effects and audit rows with COMMIT. The endpoints took a round trip of
// their own before.
func TestPublishGroupRoundTrips(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	if _, err := h.EndpointPut(ctx, &store.EndpointPutParams{ID: "ep_a", Origin: store.OriginAPI, Enabled: true, Actor: "api:key_1", Now: at,
		Spec: store.EndpointSpec{URL: "https://a.example/hook", Types: []string{"invoice.*"}, Secrets: []store.EndpointSecret{{ID: "sec_1",
			Kind: store.SecretHMAC, Key: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", CreatedAt: at}}}}); err != nil {
		t.Fatal(err)
	}
	msg := func(id, typ string) *store.MessagePublishParams {
		return &store.MessagePublishParams{ID: id, Key: "k-" + id, Fingerprint: "fp-" + id, KeyExpiresAt: at.Add(time.Hour),
			Type: typ, Payload: []byte(`{"id":"` + id + `"}`), Actor: "api:key_1", Now: at}
	}
	before := h.pipeTrips.Load()
	got := h.MessagePublishGroup(ctx, []*store.MessagePublishParams{msg("m1", "invoice.paid"), msg("m2", "customer.created")})
	trips := h.pipeTrips.Load() - before
	for i, want := range [][]string{{"ep_a"}, {}} {
		if a := got[i]; a.Err != nil || a.Result.Replayed || !slices.Equal(a.Result.Endpoints, want) {
			t.Fatalf("answer %d = %+v, %v; want a new message to endpoints %v", i, a.Result, a.Err, want)
		}
	}
	if trips != 3 {
		t.Errorf("a group of two publishes took %d round trips, want 3", trips)
	}
}
