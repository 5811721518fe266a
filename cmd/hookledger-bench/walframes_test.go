package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The window counts the frames committed while it is open, and only
// those, and names the table or index of each: a table written in each
// of five commits, its index, and the events table that counts the
// window's events.
func TestWALWindowCountsFramesByBtree(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "w.db")
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		`PRAGMA wal_autocheckpoint = 0`,
		`CREATE TABLE events (pk INTEGER PRIMARY KEY, v TEXT)`,
		`CREATE TABLE notes (id INTEGER PRIMARY KEY, k TEXT)`,
		`CREATE INDEX notes_k ON notes (k)`,
		`INSERT INTO events (v) VALUES ('before the window')`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	w, err := openWALWindow(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO events (v) VALUES (?)`, fmt.Sprint(i, j)); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO notes (k) VALUES (?)`, fmt.Sprint("k", i)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := w.stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.events != 15 || got.commits != 5 {
		t.Fatalf("events %d, commits %d; want 15 events in 5 commits", got.events, got.commits)
	}
	sum := 0
	for _, n := range got.byBtree {
		sum += n
	}
	if sum != got.frames {
		t.Errorf("frames %d, by btree %v adds up to %d", got.frames, got.byBtree, sum)
	}
	// Each commit writes the last page of each table and of the index
	// once; the database header page may come on top.
	for _, name := range []string{"events", "notes", "notes_k"} {
		if got.byBtree[name] != 5 {
			t.Errorf("%s: %d frames, want one in each of the 5 commits (by btree %v)", name, got.byBtree[name], got.byBtree)
		}
	}
	var out bytes.Buffer
	got.print(&out, "sqlite", time.Second, 10)
	if !strings.Contains(out.String(), "15 events") || !strings.Contains(out.String(), "notes_k") {
		t.Errorf("print:\n%s", out.String())
	}
}
