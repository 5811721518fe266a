package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/postgres"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// Operator verbs on a host whose clock is ten minutes ahead record the
// database's time on PostgreSQL, and the host's own on SQLite.
func TestOperatorVerbsTellTimeByTheDatabase(t *testing.T) {
	ctx := context.Background()
	const skew = 10 * time.Minute
	env := &Env{LookupEnv: func(k string) (string, bool) {
		if k == clockSkewEnv {
			return skew.String(), true
		}
		return "", false
	}}
	near := func(a, b time.Time) bool { d := a.Sub(b); return d < 2*time.Second && d > -2*time.Second }

	lite, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer lite.Close()
	if got, want := storeNow(ctx, env, lite), time.Now().Add(skew); !near(got, want) {
		t.Errorf("SQLite: %v, want the host clock %v", got, want)
	}

	pg, err := postgres.Open(ctx, pgtest.ServerURL(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	db, err := pg.DatabaseNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := storeNow(ctx, env, pg); !near(got, db) {
		t.Errorf("PostgreSQL: %v, want the database's %v, not the host's %v", got, db, time.Now().Add(skew))
	}
}
