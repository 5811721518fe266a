package main

import (
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// cpuMeter reads the CPU time a cell costs while it is measured: the
// server process, its database's backends when PostgreSQL runs on this
// machine, and this process (the load generator, and whatever receiver it
// runs). Per request, these say what bounds a target when the processors
// are the limit: the machine's CPUs over the server's and the client's
// time per request.
type cpuMeter struct {
	pid int
	pg  *backendCPU // nil: no database backends to count

	server0, self0 time.Duration
	err            error // reading the server's CPU at the start
	began          time.Time
}

// newCPUMeter meters server process pid and, on PostgreSQL, the backends
// of the store's database.
func newCPUMeter(pid int, cs *cellStore) *cpuMeter {
	m := &cpuMeter{pid: pid}
	if cs != nil && cs.driver == targetPostgres {
		if db, err := databaseOf(cs.URL); err == nil {
			m.pg = newBackendCPU(db)
		}
	}
	return m
}

func (m *cpuMeter) start() {
	if m == nil {
		return
	}
	m.server0, m.err = readCPU(m.pid)
	m.self0 = selfCPU()
	if m.pg != nil {
		m.pg.sample()
	}
	m.began = time.Now()
}

// span is what the cell cost since start, part by part.
func (m *cpuMeter) span() cpuSpan {
	s := cpuSpan{took: time.Since(m.began), self: selfCPU() - m.self0, err: m.err}
	if s.err == nil {
		var c time.Duration
		if c, s.err = readCPU(m.pid); s.err == nil {
			s.server = c - m.server0
		}
	}
	if m.pg != nil {
		m.pg.sample()
		s.backends, s.backendsSeen = m.pg.total()
	}
	return s
}

// stop returns the server's CPU time (with its backends') and this
// process's since start; a nil meter measured nothing.
func (m *cpuMeter) stop() (server, client time.Duration) {
	if m == nil {
		return 0, 0
	}
	s := m.span()
	return s.server + s.backends, s.self
}

// cpuSpan is what one measured stretch cost the machine's processors:
// the server process, the database's backends (PostgreSQL on this machine
// only) and this process, over took. On a machine whose processors all
// three share, a loop that takes them all is bound by their sum per
// request, whatever the store does with its time.
type cpuSpan struct {
	server, backends, self time.Duration
	// backendsSeen is how many backends were read: 0 on SQLite, or where
	// PostgreSQL runs on another machine.
	backendsSeen int
	took         time.Duration
	err          error
}

func (c cpuSpan) total() time.Duration { return c.server + c.backends + c.self }

// databaseOf is the database a PostgreSQL store URL names: the third word
// of its backends' process titles.
func databaseOf(storeURL string) (string, error) {
	u, err := url.Parse(storeURL)
	if err != nil {
		return "", fmt.Errorf("parse store URL: %w", err)
	}
	return strings.TrimPrefix(u.Path, "/"), nil
}

// msPer is a CPU time spread over n, in milliseconds.
func msPer(d time.Duration, n int64) float64 {
	return float64(d) / float64(time.Millisecond) / float64(n)
}

// selfCPU is the user and system time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// perRequest is a CPU time spread over n requests, in microseconds.
func perRequest(d time.Duration, n int64) float64 {
	if n <= 0 {
		return 0
	}
	return float64(d.Microseconds()) / float64(n)
}
