package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestChooseTargets(t *testing.T) {
	known := []string{"noop", "sqlite", "postgres"}
	for _, tc := range []struct {
		list, pg string
		want     []string
		err      string
	}{
		{"", "", []string{"noop", "sqlite"}, ""},
		{"", "postgres://x", []string{"noop", "sqlite", "postgres"}, ""},
		{" sqlite , noop", "", []string{"sqlite", "noop"}, ""},
		{"postgres", "", nil, "postgres needs --postgres URL"},
		{"sqlite,mysql", "", nil, `unknown "mysql" (noop, sqlite, postgres)`},
	} {
		defaults := []string{"noop", "sqlite"}
		got, err := chooseTargets(tc.list, defaults, known, tc.pg)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %q", tc.list, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q with %q: %v %v, want %v", tc.list, tc.pg, got, err, tc.want)
		}
		if !slices.Equal(defaults, []string{"noop", "sqlite"}) {
			t.Fatalf("defaults changed to %v", defaults)
		}
	}
}

// Every body the floor acknowledges is in its file, framed, whole.
func TestFloorRingKeepsWhatItAcknowledges(t *testing.T) {
	path := filepath.Join(t.TempDir(), "floor.ring")
	ring, err := newFloorRing(path)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ring.append([]byte(fmt.Sprintf("body-%03d-%s", i, strings.Repeat("x", i)))); err != nil {
				t.Errorf("append %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if err := ring.close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for off := 0; off < len(data); {
		size, k := binary.Uvarint(data[off:])
		if k <= 0 || size == 0 {
			break // the zeroed rest of the ring
		}
		off += k
		seen[string(data[off:off+int(size)])] = true
		off += int(size)
	}
	for i := range n {
		if b := fmt.Sprintf("body-%03d-%s", i, strings.Repeat("x", i)); !seen[b] {
			t.Fatalf("acknowledged body %d is not in the ring (%d framed bodies found)", i, len(seen))
		}
	}
}

func TestChooseE2ETargets(t *testing.T) {
	for _, tc := range []struct {
		list, pg string
		want     []string
		err      string
	}{
		{"", "", []string{"sqlite"}, ""},
		{"", "postgres://x", []string{"sqlite", "pg1", "pg2"}, ""},
		{"pg2, sqlite", "postgres://x", []string{"pg2", "sqlite"}, ""},
		{"pg1", "", nil, "pg1 needs --postgres URL"},
		{"sqlite,pg3", "postgres://x", nil, `unknown "pg3" (sqlite, pg1, pg2)`},
		{"pg1,pg1", "postgres://x", nil, `"pg1" given twice`},
	} {
		got, err := chooseE2ETargets(tc.list, tc.pg)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%q: error %v, want %q", tc.list, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%q with %q: %v %v, want %v", tc.list, tc.pg, got, err, tc.want)
		}
	}
}

// Transaction control is told from work by the statement's first word, as
// pg_stat_statements normalizes it.
func TestIsTxControl(t *testing.T) {
	for q, want := range map[string]bool{
		"begin":                              true,
		"BEGIN ISOLATION LEVEL SERIALIZABLE": true,
		"commit":                             true,
		"SAVEPOINT sp1":                      true,
		"release savepoint sp1":              true,
		"  rollback;":                        true,
		"SELECT 1":                           false,
		"INSERT INTO audit VALUES ($1)":      false,
		"":                                   false,
	} {
		if got := isTxControl(q); got != want {
			t.Errorf("isTxControl(%q) = %v, want %v", q, got, want)
		}
	}
}

// The CPU time read from /proc grows as this process works.
func TestReadCPU(t *testing.T) {
	before, err := readCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := before + 50*time.Millisecond
	for i := 0; ; i++ {
		now, err := readCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if now >= deadline {
			return
		}
		if i > 50_000_000 {
			t.Fatalf("CPU time stayed at %s after a busy loop (started at %s)", now, before)
		}
	}
}
