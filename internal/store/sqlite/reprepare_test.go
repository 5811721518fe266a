package sqlite

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/hookledger/hookledger/internal/store"
)

// compilesOnWriter counts the statements of kind action (AuthSelect:
// SELECTs, AuthSavepoint: savepoints) the writer connection compiles from
// now on: SQLite consults a connection's authorizer while it compiles a
// statement, never while it runs one, so a statement served from the
// cache adds nothing and one prepared again adds one.
func compilesOnWriter(t *testing.T, s *Store, action sqlite.AuthorizerActionCode) *atomic.Int64 {
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
		return a.RegisterAuthorizer(func(got sqlite.AuthorizerActionCode, _, _, _, _ string) sqlite.AuthorizerReturnCode {
			if got == action {
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
	compiles := compilesOnWriter(t, s, sqlite.AuthSelect)
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

// Every job that shares a write transaction with others runs under a
// savepoint of its own: SAVEPOINT before it and RELEASE after, two
// statements per job on the one writer. They come from the writer's
// statement cache like the jobs' own statements; compiled per job, they
// were parsed and planned two times for every write.
func TestJobSavepointsAreNotCompiledPerJob(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "savepoints.db"))
	var shared atomic.Int64 // jobs that ran in a transaction with others
	s.committed = func(jobs int) {
		if jobs > 1 {
			shared.Add(int64(jobs))
		}
	}
	now := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	// Writers at once, until some shared a transaction: the jobs queue
	// while one transaction runs and join the next together.
	round := func() {
		const writers, each = 8, 40
		done := make(chan error, writers)
		for w := range writers {
			go func() {
				var err error
				for i := range each {
					if err = s.ProbeWrite(ctx, now.Add(time.Duration(w*each+i)*time.Microsecond)); err != nil {
						break
					}
				}
				done <- err
			}()
		}
		for range writers {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
	round()
	compiles := compilesOnWriter(t, s, sqlite.AuthSavepoint)
	round() // registering the authorizer expired every statement: compiled once more
	first, before := compiles.Load(), shared.Load()
	for range 3 {
		round()
	}
	if shared.Load() == before {
		t.Fatal("no job shared a transaction: the test counts nothing")
	}
	if got := compiles.Load() - first; got != 0 {
		t.Fatalf("%d jobs in shared transactions compiled %d savepoint statements, want none: they come from the cache",
			shared.Load()-before, got)
	}
}

// The entity claim's texts are made once per size class: every limit a
// caller may pass finds the text limitSQL would give it.
func TestEntityLeaseTextForEveryLimit(t *testing.T) {
	for n := -1; n <= 1100; n++ {
		if got, want := entityLeaseSQL(n), entityLeaseText(store.ClampLimit(n)); got != want {
			t.Fatalf("limit %d: the claim reads up to %q, want %q", n, limitOf(got), limitOf(want))
		}
	}
}

// limitOf is a statement's LIMIT clause, for a readable failure.
func limitOf(q string) string {
	if i := strings.Index(q, " LIMIT "); i >= 0 {
		return strings.Fields(q[i:])[1]
	}
	return "none"
}
