package sqlite

import (
	"context"
	"fmt"

	"github.com/hookledger/hookledger/internal/store"
)

// SchemaPending names the embedded migrations this database has not
// applied, all of them when it has no schema, and applies none: verbs that
// only read or operate on the store refuse to run against a missing or
// older schema instead of migrating it behind the operator's back.
func (s *Store) SchemaPending(ctx context.Context) ([]string, error) {
	migs, err := store.LoadMigrations(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("check sqlite schema: %w", err)
	}
	applied := map[int]bool{}
	err = s.readTx(ctx, func(tx *wtx) error {
		var tables int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'`).
			Scan(&tables); err != nil || tables == 0 {
			return err
		}
		return txn{tx}.each(ctx, `SELECT version FROM schema_migrations`, nil, func(sc scanner) error {
			var v int
			err := sc.Scan(&v)
			applied[v] = true
			return err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("check sqlite schema: %w", err)
	}
	return store.PendingMigrations(migs, applied), nil
}
