package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/storetest"
)

type handle struct {
	*Store
	url string
}

func open(t *testing.T, url string) *handle {
	t.Helper()
	s, err := Open(context.Background(), url, 8)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return &handle{Store: s, url: url}
}

func TestConformance(t *testing.T) {
	pgtest.ServerURL(t)
	storetest.Exercise(t, storetest.Opener{
		Name:   "postgres",
		Open:   func(t *testing.T) store.Store { return open(t, pgtest.NewDatabase(t)) },
		Reopen: func(t *testing.T, s store.Store) store.Store { return open(t, s.(*handle).url) },
		Tamper: tamper,
		Fresh: func(t *testing.T) store.Store {
			url := pgtest.NewDatabase(t)
			s, err := Open(context.Background(), url, 2)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return &handle{Store: s, url: url}
		},
	})
}

// Two processes starting at once must both come up with one schema.
func TestConcurrentMigrate(t *testing.T) {
	url := pgtest.NewDatabase(t)
	const n = 4
	var wg sync.WaitGroup
	applied := make([][]string, n)
	errs := make([]error, n)
	for i := range n {
		s, err := Open(context.Background(), url, 2)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = s.Migrate(context.Background())
		}()
	}
	wg.Wait()
	total := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("migrate %d: %v", i, errs[i])
		}
		total += len(applied[i])
	}
	want, _ := Open(context.Background(), url, 1)
	defer want.Close()
	var versions int
	if err := want.pool.QueryRow(context.Background(), `SELECT count(*) FROM schema_migrations`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if total != versions || versions == 0 {
		t.Fatalf("applied %d migrations across processes, schema has %d: each must be applied exactly once", total, versions)
	}
}

func TestUniqueViolationByCode(t *testing.T) {
	s := open(t, pgtest.NewDatabase(t))
	_, err := s.pool.Exec(context.Background(), `INSERT INTO schema_migrations (version, name) VALUES (1, 'again')`)
	if err == nil {
		t.Fatal("duplicate version inserted")
	}
	if !errors.Is(dbErrors.Wrap("insert", err), store.ErrConflict) {
		t.Fatalf("unique violation not classified as conflict: %v", err)
	}
	_, err = s.pool.Exec(context.Background(), `INSERT INTO nosuchtable VALUES (1)`)
	if err == nil || errors.Is(dbErrors.Wrap("insert", err), store.ErrConflict) {
		t.Fatalf("other errors must not be conflicts: %v", err)
	}
}

func TestOpenErrorHidesPassword(t *testing.T) {
	_, err := Open(context.Background(), "postgres://u:s3cretpw@host:notaport/db", 1)
	if err == nil {
		t.Fatal("bad URL accepted")
	}
	if got := err.Error(); strings.Contains(got, "s3cretpw") {
		t.Fatalf("error leaks the password: %s", got)
	}
}
