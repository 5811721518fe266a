package sqlite

import (
	"context"
	"fmt"
)

// Options change how a database is opened. They exist for tests and the
// deterministic simulation only: production opens with Open, whose
// durability settings are not negotiable.
type Options struct {
	// NoSync sets synchronous=OFF on the writer connection: commits are not
	// fsynced, so a power loss may lose acknowledged writes. Thousands of
	// short-lived simulation databases need no durability, and fsync would
	// otherwise dominate their run time.
	NoSync bool
	// Faults, when set, is asked before each statement of a write
	// transaction runs (every statement of the shared write transaction's
	// callers, of InboxCommit's submissions, of replays and of operator
	// actions) with the statement's SQL; an error it returns fails that
	// statement, unrun, as if the database had failed it. The simulation
	// injects such failures to check that each caller's writes roll back
	// whole. It is called on the writer's goroutines, concurrently with
	// the store's callers.
	Faults func(query string) error
}

// OpenWithOptions opens like Open, then applies opts. For tests and
// simulation only (see Options).
func OpenWithOptions(ctx context.Context, path string, opts Options) (*Store, error) {
	s, err := Open(ctx, path)
	if err != nil {
		return nil, err
	}
	// Set before any write: the first job handed to the writer loop
	// orders this write before every read of it there.
	s.faults = opts.Faults
	if opts.NoSync {
		// The writer pool holds exactly one connection that never expires,
		// so a pragma set on it lasts for the life of the store. Were the
		// connection ever replaced, the new one would be opened with Open's
		// synchronous=FULL: slower, never less safe.
		if _, err := s.writer.ExecContext(ctx, `PRAGMA synchronous = OFF`); err != nil {
			s.Close()
			return nil, fmt.Errorf("open sqlite %s: synchronous=OFF: %w", path, err)
		}
	}
	return s, nil
}
