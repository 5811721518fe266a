package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestApplyGroupOneTransaction: a group of valid pages settles in one
// transaction, not by the fallback that settles each page alone (which
// gives the same answers, so the conformance case cannot tell them
// apart); so does a group of the effects' settles.
func TestApplyGroupOneTransaction(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	const n = 8
	var entities []string
	for i := range n {
		entities = append(entities, fmt.Sprintf("o%d", i))
	}
	receiveAndRoute(t, h, at, entities)
	leases, err := h.EntityClaim(ctx, &store.EntityClaimParams{Owner: "w", Now: at, LeaseFor: time.Minute, Limit: n})
	if err != nil || len(leases) != n {
		t.Fatalf("claimed %d: %v", len(leases), err)
	}
	var group [][]*store.FlowApplyParams
	for _, l := range leases {
		ws, err := h.WorkListPending(ctx, &store.WorkListPendingParams{Flow: l.Flow, Entity: l.Entity})
		if err != nil || len(ws) != 1 {
			t.Fatalf("pending of %s: %d, %v", l.Entity, len(ws), err)
		}
		group = append(group, []*store.FlowApplyParams{{Lease: l, Now: at, WorkID: ws[0].ID, EventPK: ws[0].Event.PK, Actor: "w",
			Version: "r1", VersionSort: "1", Ordered: true, State: []byte(`{}`), ReleaseIfDrained: true,
			Effects: []*store.EffectInsert{{EpisodeKey: "k-" + l.Entity, Effect: "sync", Destination: "d", Request: []byte(`{}`)}}}})
	}
	outs := h.FlowApplyGroup(ctx, group)
	for i, o := range outs {
		if o.Err != nil || len(o.Results) != 1 || o.Results[0].Disposition != store.DispositionApplied ||
			o.Results[0].EffectsInserted != 1 || !o.Results[0].Released {
			t.Fatalf("submission %d: %+v %v", i, o.Results, o.Err)
		}
	}
	if got, _ := h.GroupsAlone(); got != 0 {
		t.Fatalf("the group was settled page by page (%d fallbacks), want one transaction", got)
	}
	if n, err := h.WorkCount(ctx); err != nil || n != 0 {
		t.Fatalf("WorkCount = %d, %v", n, err)
	}

	// The effects' settles, one of them under a lost lease, also go as
	// one transaction.
	claimed, err := h.EffectClaim(ctx, &store.EffectClaimParams{Owner: "d", Now: at, LeaseFor: time.Minute, Limit: n})
	if err != nil || len(claimed) != n {
		t.Fatalf("claimed %d effects: %v", len(claimed), err)
	}
	var settles []*store.EffectSettleParams
	for i, c := range claimed {
		p := &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: at, Actor: "d", State: store.EffectDone,
			AddAttempt: true, Attempt: &store.Attempt{StartedAt: at, Status: 200}}
		if i == 0 {
			p.Token = "lost"
		}
		settles = append(settles, p)
	}
	for i, err := range h.EffectSettleGroup(ctx, settles) {
		if (i == 0) != errors.Is(err, store.ErrLeaseLost) || (i > 0 && err != nil) {
			t.Fatalf("settle %d: %v", i, err)
		}
	}
	if _, got := h.GroupsAlone(); got != 0 {
		t.Fatalf("the settles went one by one (%d fallbacks), want one transaction", got)
	}
	var done int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM effects WHERE state = 'done' AND attempts = 1
		AND id IN (SELECT effect_id FROM effect_attempts WHERE number = 1 AND status = 200)`).Scan(&done); err != nil || done != n-1 {
		t.Fatalf("%d effects done with their attempt (%v), want %d", done, err, n-1)
	}
}

// TestApplyGroupHeldEffects: a group's effect inserts go as one statement
// and answer as they would one by one. Two pages of other entities share
// an episode key (a key built from the customer, not the order): exactly
// one inserts it and the other finds its request. A page of two revisions
// of one entity supersedes the first revision's effect with the second's:
// the supersede step sees the insert held before it. A key the ledger
// already holds is found. None of it takes the fallback.
func TestApplyGroupHeldEffects(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	pks := receiveAndRoute(t, h, at, []string{"o1", "o2", "o3", "o3", "o4"})
	// The ledger already holds o4's key, with the same request spelled
	// otherwise: found, and no conflict.
	if _, err := h.pool.Exec(ctx, `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at)
		VALUES ('key-o4', 'orders', 'o4', 'r0', '0', 'sync', 'd', 'done', '{ "entity" : "o4" }', $1, '', 0, $2, $2)`,
		pks[4], at); err != nil {
		t.Fatal(err)
	}
	leases, err := h.EntityClaim(ctx, &store.EntityClaimParams{Owner: "w", Now: at, LeaseFor: time.Minute, Limit: 10})
	if err != nil || len(leases) != 4 {
		t.Fatalf("claimed %d: %v", len(leases), err)
	}
	keyOf := map[string][]string{ // the episode keys of each entity's events
		"o1": {"cus-1"}, "o2": {"cus-1"}, "o3": {"key-o3-r1", "key-o3-r2"}, "o4": {"key-o4"},
	}
	var group [][]*store.FlowApplyParams
	for _, l := range leases {
		ws, err := h.WorkListPending(ctx, &store.WorkListPendingParams{Flow: l.Flow, Entity: l.Entity})
		if err != nil || len(ws) != len(keyOf[l.Entity]) {
			t.Fatalf("pending of %s: %d, %v", l.Entity, len(ws), err)
		}
		var page []*store.FlowApplyParams
		for i, w := range ws {
			v := fmt.Sprintf("r%d", i+1)
			page = append(page, &store.FlowApplyParams{Lease: l, Now: at, WorkID: w.ID, EventPK: w.Event.PK, Actor: "w",
				Version: v, VersionSort: v, Ordered: true, State: []byte(`{}`), ReleaseIfDrained: true,
				Effects: []*store.EffectInsert{{EpisodeKey: keyOf[l.Entity][i], Effect: "sync", Destination: "d",
					Request: []byte(`{"entity":"` + l.Entity + `"}`)}}})
		}
		group = append(group, page)
	}
	outs := h.FlowApplyGroup(ctx, group)
	if got, _ := h.GroupsAlone(); got != 0 {
		t.Fatalf("the group was settled page by page (%d fallbacks), want one transaction", got)
	}
	inserted := map[string]int{}
	for i, o := range outs {
		if o.Err != nil || len(o.Results) != len(group[i]) {
			t.Fatalf("page %d: %+v %v", i, o.Results, o.Err)
		}
		entity := group[i][0].Lease.Entity
		for j, r := range o.Results {
			if r.Disposition != store.DispositionApplied {
				t.Fatalf("%s event %d: %+v", entity, j, r)
			}
			inserted[entity] += r.EffectsInserted
			if entity == "o3" && j == 1 && r.Superseded != 1 {
				t.Errorf("o3's second revision superseded %d effects, want its first revision's", r.Superseded)
			}
		}
	}
	if inserted["o1"]+inserted["o2"] != 1 || inserted["o3"] != 2 || inserted["o4"] != 0 {
		t.Fatalf("effects inserted per entity %v: want one of o1/o2, both of o3, none of o4", inserted)
	}
	var states []string
	rows, err := h.pool.Query(ctx, `SELECT episode_key || '=' || state FROM effects ORDER BY episode_key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		states = append(states, s)
	}
	rows.Close()
	want := "cus-1=approved key-o3-r1=superseded key-o3-r2=approved key-o4=done"
	if got := strings.Join(states, " "); got != want {
		t.Fatalf("effects %q, want %q", got, want)
	}
	// The page that found cus-1 taken sent another request (o1 against
	// o2): a key built from too little, recorded as a conflict.
	conflicts, err := h.AuditList(ctx, &store.AuditListParams{Action: store.ActionKeyConflict})
	if err != nil || len(conflicts) != 1 || conflicts[0].Entity == "o4" {
		for _, c := range conflicts {
			t.Logf("conflict: %+v", *c)
		}
		t.Fatalf("%d key conflicts, %v: want one, for the page that lost cus-1", len(conflicts), err)
	}
}

// receiveAndRoute stores one event per element of entities (e0, e1, ...,
// in that order) and routes each to flow orders for its entity, with
// order keys rising in the same order; it returns the events' pks.
func receiveAndRoute(t *testing.T, h *handle, at time.Time, entities []string) []int64 {
	t.Helper()
	ctx := context.Background()
	var subs []*store.Submission
	for i, entity := range entities {
		subs = append(subs, &store.Submission{Deliveries: []*store.DeliveryInput{{
			RequestID: fmt.Sprintf("r%d", i), Source: "shop", EventID: fmt.Sprintf("e%d", i), Type: "order.updated",
			Entity: entity, ReceivedAt: at, Headers: map[string]string{}, Body: []byte(`{}`)}}})
	}
	out, err := h.InboxCommit(ctx, &store.InboxCommitParams{Submissions: subs})
	if err != nil {
		t.Fatal(err)
	}
	route := &store.EventRouteParams{Now: at}
	pks := make([]int64, len(out))
	for i, o := range out {
		pks[i] = o.Items[0].EventPK
		route.Decisions = append(route.Decisions, &store.RouteDecision{EventPK: pks[i],
			Routes: []store.Route{{Flow: "orders", Entity: entities[i], OrderKey: fmt.Sprintf("k%d", i)}}})
	}
	if err := h.EventRoute(ctx, route); err != nil {
		t.Fatal(err)
	}
	return pks
}

// TestHeldSupersedeSeesHeldInsert: the driver keeps the order of the
// statements it holds on the ApplyTx contract alone. A supersede step of
// an entity and name whose insert is still held sends the insert first,
// even with no supersede step held beside it (the rules in apply.go
// always supersede before they insert, which TestApplyGroupHeldEffects
// covers).
func TestHeldSupersedeSeesHeldInsert(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	pks := receiveAndRoute(t, h, at, []string{"o1"})
	tx, err := h.beginPipe(ctx, pipePlanSQL)
	if err != nil {
		t.Fatal(err)
	}
	a := txn{t: tx}
	row := &store.ApplyRow{Flow: "orders", Entity: "o1", EventPK: pks[0]}
	var ins store.InsertOutcome
	if err := a.InsertEffect(ctx, row, &store.FlowApplyParams{Version: "r1", VersionSort: "1", Now: at},
		&store.EffectInsert{EpisodeKey: "k-r1", Effect: "sync", Destination: "d", Request: []byte(`{}`)}, nil, &ins); err != nil {
		t.Fatal(err)
	}
	var sup []store.SupersededEffect
	if err := a.SupersedeOlder(ctx, row, "sync", &store.FlowApplyParams{Version: "r2", VersionSort: "2", Ordered: true, Now: at}, &sup); err != nil {
		t.Fatal(err)
	}
	if err := tx.commit(ctx); err != nil {
		t.Fatal(err)
	}
	if !ins.Inserted || len(sup) != 1 || sup[0].EpisodeKey != "k-r1" {
		t.Fatalf("inserted %v, superseded %+v: want r1's effect inserted, then superseded", ins.Inserted, sup)
	}
}
