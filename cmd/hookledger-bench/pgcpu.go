package main

import (
	"fmt"
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
//
// Beside the CPU it counts the backends' wake-ups: the times each one
// blocked and was woken again (its voluntary context switches), waiting
// for the client's next round trip, for its commit's flush to disk or
// for a lock. At a light load the round trips among them, more than the
// rows, are what the backends' CPU fell with: a backend woken from idle
// runs cold (docs/benchmarks-history.md, "Run AJ").
type backendCPU struct {
	db string
	// read is the CPU time and wake-ups of a pid, or false when it is
	// gone (readBackend, swapped out in tests).
	read func(pid int) (procUse, bool)
	// list is the pids whose title names db (backendPIDs, swapped out in
	// tests).
	list func(db string) []int

	mu      sync.Mutex
	started bool
	base    map[int]procUse // at the start, or zero for a backend seen later
	last    map[int]procUse
}

// procUse is what a process has used since it started.
type procUse struct {
	cpu     time.Duration
	wakeups int64 // voluntary context switches
}

func newBackendCPU(db string) *backendCPU {
	return &backendCPU{
		db: db,
		read: func(pid int) (procUse, bool) {
			u, err := readBackend(pid)
			return u, err == nil
		},
		list: backendPIDs,
		base: map[int]procUse{},
		last: map[int]procUse{},
	}
}

// readBackend reads a process's CPU time and wake-ups from /proc.
func readBackend(pid int) (procUse, error) {
	c, err := readCPU(pid)
	if err != nil {
		return procUse{}, err
	}
	w, err := readWakeups(pid)
	if err != nil {
		return procUse{}, err
	}
	return procUse{cpu: c, wakeups: w}, nil
}

// readWakeups is a process's voluntary context switches, from
// /proc/PID/status: each is a time it blocked until something woke it.
func readWakeups(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read wake-ups: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "voluntary_ctxt_switches:"); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("read wake-ups: /proc/%d/status: %w", pid, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("read wake-ups: no voluntary_ctxt_switches in /proc/%d/status", pid)
}

// sample reads every backend of the database; the first call is the
// start.
func (b *backendCPU) sample() {
	pids := b.list(b.db)
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pid := range pids {
		u, ok := b.read(pid)
		if !ok {
			continue
		}
		if _, seen := b.base[pid]; !seen {
			b.base[pid] = procUse{}
			if !b.started {
				b.base[pid] = u
			}
		}
		b.last[pid] = u
	}
	b.started = true
}

// total is the CPU time the backends used since the start, and how many
// were seen (0: PostgreSQL is not on this machine, or not visible).
func (b *backendCPU) total() (time.Duration, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var sum time.Duration
	for pid, u := range b.last {
		sum += u.cpu - b.base[pid].cpu
	}
	return sum, len(b.last)
}

// wakeups is how many times the backends were woken since the start.
func (b *backendCPU) wakeups() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	var sum int64
	for pid, u := range b.last {
		sum += u.wakeups - b.base[pid].wakeups
	}
	return sum
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
