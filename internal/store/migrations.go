package store

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// Migration is one versioned schema step, read from a driver's embedded
// NNNN_name.sql files.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// loadMigrations reads every *.sql file in dir of fsys (a driver's
// embedded migrations), ordered by the version number that starts its
// name.
func loadMigrations(fsys fs.FS, dir string) ([]Migration, error) {
	fsys, err := fs.Sub(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	var out []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive version number and '_'", name)
		}
		if prev, dup := seen[v]; dup {
			return nil, fmt.Errorf("migrations %s and %s share version %d", prev, name, v)
		}
		seen[v] = name
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// pendingMigrations names the migrations whose version applied does not
// hold, in order: all of them for a database without a schema.
func pendingMigrations(migs []Migration, applied map[int]bool) []string {
	var pending []string
	for _, m := range migs {
		if !applied[m.Version] {
			pending = append(pending, m.Name)
		}
	}
	return pending
}

// MigrationTx is the statements of migrating, in one transaction of the
// driver's that also keeps a second process from migrating at the same
// moment.
type MigrationTx interface {
	// MigrationsApplied returns the versions schema_migrations records
	// (the driver creates the table first when it has none).
	MigrationsApplied(ctx context.Context) (map[int]bool, error)
	// MigrationApply runs m's SQL and records its version.
	MigrationApply(ctx context.Context, m Migration) error
}

// Migrate applies, in order, the migrations of fsys (a driver's embedded
// migrations/*.sql) that tx's database has not applied, and names them.
func Migrate(ctx context.Context, fsys fs.FS, tx MigrationTx) ([]string, error) {
	migs, err := loadMigrations(fsys, "migrations")
	if err != nil {
		return nil, err
	}
	applied, err := tx.MigrationsApplied(ctx)
	if err != nil {
		return nil, fmt.Errorf("read versions: %w", err)
	}
	var done []string
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		if err := tx.MigrationApply(ctx, m); err != nil {
			return nil, fmt.Errorf("apply %s: %w", m.Name, err)
		}
		done = append(done, m.Name)
	}
	return done, nil
}

// SchemaPending names the migrations of fsys whose versions applied does
// not return (none for a database without a schema), and applies none.
func SchemaPending(ctx context.Context, fsys fs.FS, applied func(ctx context.Context) (map[int]bool, error)) ([]string, error) {
	migs, err := loadMigrations(fsys, "migrations")
	if err != nil {
		return nil, err
	}
	versions, err := applied(ctx)
	if err != nil {
		return nil, err
	}
	return pendingMigrations(migs, versions), nil
}
