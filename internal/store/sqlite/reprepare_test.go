package sqlite

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/hookledger/hookledger/internal/store"
)

// compilesOnWriter counts the SELECT statements the writer connection
// compiles from now on: SQLite consults a connection's authorizer while it
// compiles a statement, never while it runs one, so a statement served
// from the cache adds nothing and one prepared again adds one.
func compilesOnWriter(t *testing.T, s *Store) *atomic.Int64 {
	t.Helper()
	ctx := context.Background()
	conn, err := s.writer.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var n atomic.Int64
	err = conn.Raw(func(dc any) error {
		a, ok := dc.(sqlite.AuthorizerRegisterer)
		if !ok {
			t.Fatalf("the driver's connection %T has no authorizer", dc)
		}
		return a.RegisterAuthorizer(func(action sqlite.AuthorizerActionCode, _, _, _, _ string) sqlite.AuthorizerReturnCode {
			if action == sqlite.AuthSelect {
				n.Add(1)
			}
			return sqlite.AuthorizerOK
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return &n
}

// A claim's limit follows the worker's free slots and changes from one
// claim to the next. SQLite compiles a statement again whenever the value
// bound to its LIMIT changes (its planner weighs small limits), so a bound
// limit cost a parse and a plan on nearly every claim; a literal one,
// rounded up to a power of two, is compiled once per size class.
func TestClaimsAreNotCompiledPerLimit(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "claims.db"))
	now := time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)
	// Every size class once, so that the counted rounds below find each
	// statement compiled.
	limits := []int{64, 63, 61, 54, 50, 33, 64, 40, 57}
	claim := func() {
		for _, n := range limits {
			now = now.Add(time.Millisecond)
			if _, err := s.EffectClaim(ctx, &store.EffectClaimParams{Owner: "w", Now: now, LeaseFor: time.Minute, Limit: n,
				Destinations: []string{"crm"}, MaxRedrives: 3}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.EntityClaim(ctx, &store.EntityClaimParams{Owner: "p", Now: now, LeaseFor: time.Minute, Limit: n}); err != nil {
				t.Fatal(err)
			}
		}
	}
	claim()
	compiles := compilesOnWriter(t, s)
	claim() // registering the authorizer expired every statement: compiled once more
	first := compiles.Load()
	for range 3 {
		claim()
	}
	if got := compiles.Load() - first; got != 0 {
		t.Fatalf("%d claims with changing limits compiled %d statements, want none: the limit is bound, not literal",
			3*2*len(limits), got)
	}
	if first == 0 {
		t.Fatal("the authorizer counted no compile: the test counts nothing")
	}
}
