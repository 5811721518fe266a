package postgres

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storetest"
)

// guardConstraints are the constraints storetest's guards name, as
// PostgreSQL names them. Each test has a database of its own, so dropping
// one touches no other test.
var guardConstraints = map[string]string{
	storetest.GuardEffectEvent: "effects_source_event_pk_fkey",
	storetest.GuardEffectState: "effects_state_check",
	storetest.GuardEpisodeKey:  "effects_episode_key_key",
}

// tamper is storetest's Tamper for this driver.
func tamper(t *testing.T, s store.Store, guard, query string, args ...any) {
	t.Helper()
	ctx := context.Background()
	pool := s.(*handle).pool
	if guard != storetest.GuardNone {
		name, ok := guardConstraints[guard]
		if !ok {
			t.Fatalf("tamper: unknown guard %q", guard)
		}
		if _, err := pool.Exec(ctx, `ALTER TABLE effects DROP CONSTRAINT IF EXISTS `+name); err != nil {
			t.Fatalf("tamper: drop %s: %v", name, err)
		}
	}
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(r)
	}
	if _, err := pool.Exec(ctx, b.String(), args...); err != nil {
		t.Fatalf("tamper: %s: %v", query, err)
	}
}
