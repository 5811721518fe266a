package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/hookledger/hookledger/internal/store"
)

// OpenReadOnly opens the existing database file at path for a verb that
// only reads it (status, check, effects list): it creates no file or
// directory, sets no pragma that writes and applies no migration, so it
// reads a copy in a read-only directory or a file without write
// permission. A file that is not there is an error wrapping
// fs.ErrNotExist. Every write through the store fails.
func OpenReadOnly(ctx context.Context, path string) (*Store, error) {
	if err := Exists(path); err != nil {
		return nil, err
	}
	w, err := openReadOnlyPool(ctx, path, 1)
	if err != nil {
		return nil, err
	}
	r, err := openReadOnlyPool(ctx, path, 4)
	if err != nil {
		w.Close()
		return nil, err
	}
	s := &Store{path: path, writer: w, reader: r, batchDeadline: defaultBatchDeadline}
	s.Rules = store.NewRules(s)
	s.startBatcher()
	return s, nil
}

// explainOpen turns a failure to open the database for writing into
// plain words when the cause is the file system: SQLite says "unable to
// open database file" or "attempt to write a readonly database" whatever
// the cause, and a directory the user cannot write is the usual one (the
// database needs its -wal and -shm files beside it).
func explainOpen(path string, err error) error {
	if path == ":memory:" {
		return fmt.Errorf("open sqlite %s: %w", path, err)
	}
	dir := filepath.Dir(path)
	f, cerr := os.CreateTemp(dir, ".hookledger-write-check-*")
	if cerr != nil {
		// SQLite's own words add nothing to the cause found here.
		return fmt.Errorf("open sqlite %s: cannot create files in the directory %s (%w): the database and its -wal and -shm "+
			"files are written there; make it writable for this user, or point store: elsewhere "+
			"(status and check read a read-only copy)", path, dir, cause(cerr))
	}
	name := f.Name()
	f.Close()
	os.Remove(name)
	if w, werr := os.OpenFile(path, os.O_WRONLY, 0); werr != nil && !errors.Is(werr, fs.ErrNotExist) {
		return fmt.Errorf("open sqlite %s: the file cannot be written by this user (%w): serve and migrate write it; "+
			"status and check read a read-only copy", path, cause(werr))
	} else if werr == nil {
		w.Close()
	}
	return fmt.Errorf("open sqlite %s: %w", path, err)
}

// cause is the operating system's reason inside a path error.
func cause(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

// Exists returns nil when there is a file at path, an error wrapping
// fs.ErrNotExist that names the path when there is none, and the error of
// a path that cannot be looked at.
func Exists(path string) error {
	_, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return &noDatabaseError{path: path}
	case err != nil:
		return fmt.Errorf("open sqlite %s: %w", path, err)
	}
	return nil
}

// noDatabaseError says which file is missing; errors.Is(err,
// fs.ErrNotExist) tells it apart.
type noDatabaseError struct{ path string }

func (e *noDatabaseError) Error() string        { return "no database at " + e.path }
func (e *noDatabaseError) Is(target error) bool { return target == fs.ErrNotExist }

// openReadOnlyPool opens a pool of read-only connections and reads the
// schema once, which is when SQLite needs the WAL's shared-memory file.
// mode=ro still creates that file (and the -wal) beside the database when
// the directory allows it, and reads the ones a running server keeps. In a
// directory this user cannot write, with no -wal file (no process has the
// database open for writing, and every commit is in the file itself),
// SQLite cannot create them and answers SQLITE_CANTOPEN or one of the
// SQLITE_READONLY codes: the file is then opened immutable, which reads it
// without any shared memory.
func openReadOnlyPool(ctx context.Context, path string, conns int) (*sql.DB, error) {
	db, err := readOnlyPool(ctx, path, conns, false)
	if err == nil || !needsSharedMemory(err) {
		return db, err
	}
	if _, statErr := os.Stat(path + "-wal"); !errors.Is(statErr, fs.ErrNotExist) {
		return nil, fmt.Errorf("open sqlite %s read-only: %w", path, err)
	}
	return readOnlyPool(ctx, path, conns, true)
}

func readOnlyPool(ctx context.Context, path string, conns int, immutable bool) (*sql.DB, error) {
	q := url.Values{}
	q.Set("mode", "ro")
	if immutable {
		q.Set("immutable", "1")
	}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "query_only(ON)")
	db, err := sql.Open("sqlite", "file:"+filepath.ToSlash(path)+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s read-only: %w", path, err)
	}
	db.SetMaxOpenConns(conns)
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&n); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s read-only: %w", path, err)
	}
	return db, nil
}

// needsSharedMemory reports the errors of a read that could not create
// the files beside the database: "unable to open database file" or
// "attempt to write a readonly database", whatever their extended code.
func needsSharedMemory(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY:
		return true
	}
	return false
}
