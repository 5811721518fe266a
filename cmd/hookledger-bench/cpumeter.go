package main

import (
	"syscall"
	"time"
)

// cpuMeter reads the CPU time a receive cell costs while it is measured:
// the server process, its database's backends when PostgreSQL runs on
// this machine, and this process (the load generator). Per request, these
// say what bounds a target when the processors are the limit: the
// machine's CPUs over the server's and the client's time per request.
type cpuMeter struct {
	pid int
	pg  *backendCPU // nil: no database backends to count

	server0, self0 time.Duration
}

func (m *cpuMeter) start() {
	if m == nil {
		return
	}
	m.server0, _ = readCPU(m.pid)
	m.self0 = selfCPU()
	if m.pg != nil {
		m.pg.sample()
	}
}

// stop returns the server's CPU time (with its backends') and this
// process's since start; a nil meter measured nothing.
func (m *cpuMeter) stop() (server, client time.Duration) {
	if m == nil {
		return 0, 0
	}
	if c, err := readCPU(m.pid); err == nil {
		server = c - m.server0
	}
	if m.pg != nil {
		m.pg.sample()
		pg, _ := m.pg.total()
		server += pg
	}
	return server, selfCPU() - m.self0
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
