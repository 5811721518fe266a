package main

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// backendCPU follows the CPU time of one database's backends, when
// PostgreSQL runs on this machine: the processes whose title is
// "postgres: USER DATABASE ..." (PostgreSQL sets it, update_process_title
// being on by default). Two processes on one database cost the machine
// more than one; the statements and rows they ask for are the same, so
// only the backends' own CPU shows where (docs/benchmarks-history.md,
// "Delivery claims behind a burst"). The servers' connections live for
// the whole run, so sampling every few seconds sees each of them; a
// backend first seen after the start connected after it and counts from
// zero. Shared processes (WAL writer, checkpointer, autovacuum) are not
// counted.
type backendCPU struct {
	db string
	// read is the CPU time of a pid, or false when it is gone
	// (readCPU, swapped out in tests).
	read func(pid int) (time.Duration, bool)
	// list is the pids whose title names db (backendPIDs, swapped out in
	// tests).
	list func(db string) []int

	mu      sync.Mutex
	started bool
	base    map[int]time.Duration // at the start, or 0 for a backend seen later
	last    map[int]time.Duration
}

func newBackendCPU(db string) *backendCPU {
	return &backendCPU{
		db: db,
		read: func(pid int) (time.Duration, bool) {
			c, err := readCPU(pid)
			return c, err == nil
		},
		list: backendPIDs,
		base: map[int]time.Duration{},
		last: map[int]time.Duration{},
	}
}

// sample reads every backend of the database; the first call is the
// start.
func (b *backendCPU) sample() {
	pids := b.list(b.db)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pid := range pids {
		c, ok := b.read(pid)
		if !ok {
			continue
		}
		if _, seen := b.base[pid]; !seen {
			b.base[pid] = 0
			if !b.started {
				b.base[pid] = c
			}
		}
		b.last[pid] = c
	}
	b.started = true
}

// total is the CPU time the backends used since the start, and how many
// were seen (0: PostgreSQL is not on this machine, or not visible).
func (b *backendCPU) total() (time.Duration, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var sum time.Duration
	for pid, c := range b.last {
		sum += c - b.base[pid]
	}
	return sum, len(b.last)
}

// backendPIDs lists the processes whose title is a backend of db.
func backendPIDs(db string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		title, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && isBackendOf(string(title), db) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// isBackendOf tells whether a process title (its /proc cmdline, NUL or
// space separated) is "postgres: USER DB ...".
func isBackendOf(title, db string) bool {
	f := strings.Fields(strings.ReplaceAll(title, "\x00", " "))
	return len(f) >= 3 && f[0] == "postgres:" && f[2] == db
}
