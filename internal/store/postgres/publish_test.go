package postgres

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestPublishGroupsHoldKeysInKeyOrder: two groups of publishes sharing
// idempotency keys wait for one another in key order and never deadlock.
// A third transaction holds key c uncommitted. The first group (keys b, c
// and a, in that order) writes b and waits for c; the second (a, then b)
// then starts. Written in the order given, the second would hold a and
// wait for b while the first, once c is free, waits for a: PostgreSQL
// aborts one of them, and its group is published message by message.
// Written in key order, the first group holds a and b before it waits,
// the second waits for a, and the second's messages replay the first's.
func TestPublishGroupsHoldKeysInKeyOrder(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabase(t))
	ctx := context.Background()
	at := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	msg := func(id, key string) *store.MessagePublishParams {
		return &store.MessagePublishParams{ID: id, Key: key, Fingerprint: "fp-" + id, KeyExpiresAt: at.Add(time.Hour),
			Type: "a.b", Payload: []byte(`{"id":"` + id + `"}`), Actor: "api:key_1", Now: at}
	}
	blocker, err := h.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx) //nolint:errcheck // rolled back below
	if _, err := blocker.Exec(ctx, `INSERT INTO idempotency_keys (key, fingerprint, message_id, created_at, expires_at)
		VALUES ('kc', 'fp', 'msg_x', $1, $2)`, at, at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	waiting := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			var got int
			if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got); err != nil {
				t.Fatal(err)
			}
			if got == n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d publishes waiting on a lock, want %d", got, n)
			}
		}
	}
	var first, second []store.PublishAnswer
	var wg sync.WaitGroup
	wg.Go(func() {
		first = h.MessagePublishGroup(ctx, []*store.MessagePublishParams{msg("m1", "kb"), msg("m2", "kc"), msg("m3", "ka")})
	})
	waiting(1)
	wg.Go(func() {
		second = h.MessagePublishGroup(ctx, []*store.MessagePublishParams{msg("m4", "ka"), msg("m5", "kb")})
	})
	waiting(2)
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := h.PublishesAlone(); n != 0 {
		t.Fatalf("%d groups published message by message: the groups deadlocked", n)
	}
	for i, id := range []string{"m1", "m2", "m3"} {
		if a := first[i]; a.Err != nil || a.Result.ID != id || a.Result.Replayed {
			t.Fatalf("first group, answer %d: %+v %v", i, a.Result, a.Err)
		}
	}
	for i, id := range []string{"m3", "m1"} {
		if a := second[i]; a.Err != nil || a.Result.ID != id || !a.Result.Replayed {
			t.Fatalf("second group, answer %d: %+v %v, want a replay of %s", i, a.Result, a.Err, id)
		}
	}
}
