package sqlite

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
)

func TestSchemaPending(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "s.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pending, err := s.SchemaPending(ctx)
	if err != nil || len(pending) == 0 || pending[0] != "0001_inbox" {
		t.Fatalf("empty database: pending %v, %v; want every migration", pending, err)
	}
	// Checking applies nothing.
	again, err := s.SchemaPending(ctx)
	if err != nil || !slices.Equal(again, pending) {
		t.Fatalf("second check: %v, %v; want %v", again, err, pending)
	}
	applied, err := s.Migrate(ctx)
	if err != nil || !slices.Equal(applied, pending) {
		t.Fatalf("migrate applied %v, %v; want %v", applied, err, pending)
	}
	if pending, err := s.SchemaPending(ctx); err != nil || len(pending) != 0 {
		t.Fatalf("after migrate: pending %v, %v", pending, err)
	}
	// A schema behind the binary: the newest migration is missing.
	if _, err := s.writer.ExecContext(ctx, `DELETE FROM schema_migrations WHERE version = (SELECT max(version) FROM schema_migrations)`); err != nil {
		t.Fatal(err)
	}
	if pending, err := s.SchemaPending(ctx); err != nil || len(pending) != 1 || pending[0] != applied[len(applied)-1] {
		t.Fatalf("behind: pending %v, %v; want [%s]", pending, err, applied[len(applied)-1])
	}
}
