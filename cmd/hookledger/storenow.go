package main

import (
	"context"
	"time"
)

// databaseClock is offered by a store whose database's clock the serve
// processes follow (PostgreSQL).
type databaseClock interface {
	DatabaseNow(ctx context.Context) (time.Time, error)
}

// storeNow is the time an operator verb records in the store or judges ages
// by. On PostgreSQL it is the database's clock, which every serve process
// follows (docs/architecture.md, "The database's clock"): a retry an
// operator schedules "now" from a host whose clock runs behind would wait
// that long, and audit rows from a host ahead would be stamped in the
// future. Elsewhere it is this host's clock (shifted by the
// HOOKLEDGER_TEST_CLOCK_SKEW test aid, like serve's). When the database
// cannot be read the host's clock is returned: the store call that follows
// fails the same way and says why. st is a store, or the admin API client
// of --server, whose server stamps its own (database) time.
func storeNow(ctx context.Context, env *Env, st any) time.Time {
	if db, ok := st.(databaseClock); ok {
		if at, err := db.DatabaseNow(ctx); err == nil {
			return at
		}
	}
	if host, err := hostClock(env); err == nil {
		return host.Now().UTC()
	}
	return time.Now().UTC()
}
