package main

import (
	"fmt"
	"net/url"
	"strings"
	"time"
)

// cpuSpan is what one loop of the publish benchmark cost the machine's
// processors: the server process, the database's backends (PostgreSQL on
// this machine only) and this process (the clients, and in the publish
// loop the endpoints' receiver), over took. On a machine whose processors
// all three share, a loop that takes them all is bound by their sum per
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

// measureCPU runs do and reads the CPU time the server process pid, the
// backends of database db ("" for none) and this process used meanwhile.
// The backends are sampled every second, so that one a pool closes during
// the loop still counts up to its last reading.
func measureCPU(pid int, db string, do func()) cpuSpan {
	var backends *backendCPU
	if db != "" {
		backends = newBackendCPU(db)
		backends.sample()
	}
	serverBefore, err := readCPU(pid)
	selfBefore := selfCPU()
	began := time.Now()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if backends != nil {
					backends.sample()
				}
			}
		}
	}()
	do()
	close(stop)
	<-stopped
	span := cpuSpan{took: time.Since(began), self: selfCPU() - selfBefore, err: err}
	if backends != nil {
		backends.sample()
		span.backends, span.backendsSeen = backends.total()
	}
	if err == nil {
		var after time.Duration
		after, span.err = readCPU(pid)
		span.server = after - serverBefore
	}
	return span
}

// databaseOf is the database a PostgreSQL store URL names.
func databaseOf(storeURL string) string {
	u, err := url.Parse(storeURL)
	if err != nil {
		return ""
	}
	return strings.TrimPrefix(u.Path, "/")
}

// publishCPULine is the machine's CPU per inbound webhook of the baseline
// and per message of the closed loop (accepted, then delivered to every
// endpoint), each split into its parts, and what that sets: were the
// processors the only limit, messages delivered whole could not come
// faster than the CPUs over their cost, which it gives as a share of the
// inbound rate beside the goals' 0.5 accepted and 0.9 of that delivered,
// with the cost per message those goals would need. "" when a loop did
// nothing; the reason when a read failed.
func publishCPULine(r *publishResult, endpoints, ncpu int) string {
	for _, c := range []cpuSpan{r.inboundCPU, r.publishCPU} {
		if c.err != nil {
			return "CPU not read: " + c.err.Error()
		}
	}
	in, pub := r.inboundCPU, r.publishCPU
	if r.baseline == nil || r.baseline.ok == 0 || r.pub == nil || r.pub.ok == 0 || in.took <= 0 || pub.took <= 0 || ncpu < 1 {
		return ""
	}
	perMs := func(d time.Duration, n int64) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
	parts := func(c cpuSpan, n int64, self string) string {
		db := "-"
		if c.backendsSeen > 0 {
			db = fmt.Sprintf("%.2f", perMs(c.backends, n))
		}
		return fmt.Sprintf("serve %.2f + PostgreSQL %s + %s %.2f; %.2f of the CPUs over the loop",
			perMs(c.server, n), db, self, perMs(c.self, n), c.total().Seconds()/(float64(ncpu)*c.took.Seconds()))
	}
	perHook, perMsg := perMs(in.total(), r.baseline.ok), perMs(pub.total(), r.pub.ok)
	goal := goalPublishVsInbound * goalFanoutKeepsUp
	bound := float64(ncpu) * 1000 / perMsg / r.baseline.rate()
	line := fmt.Sprintf("CPU: %.2f ms per inbound webhook (%s); %.2f ms per message accepted and delivered to its %d endpoints (%s), %.1f webhooks' worth: "+
		"were the %d CPUs the only limit, publishing whole would reach at most %.2f of the inbound rate (the goals ask for %.2f: at most %.2f ms per message)",
		perHook, parts(in, r.baseline.ok, "load generator"), perMsg, endpoints, parts(pub, r.pub.ok, "load generator and receiver"), perMsg/perHook,
		ncpu, bound, goal, float64(ncpu)*1000/(goal*r.baseline.rate()))
	if r.target == targetPostgres && (in.backendsSeen == 0 || pub.backendsSeen == 0) {
		// The bound then leaves out the database's work: it holds for
		// this machine only.
		line += "; the database's backends were not read (PostgreSQL is not on this machine, or its process titles are off): their CPU is not in these figures"
	}
	return line
}
