package main

import (
	"fmt"
)

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
	parts := func(c cpuSpan, n int64, self string) string {
		db := "-"
		if c.backendsSeen > 0 {
			db = fmt.Sprintf("%.2f", msPer(c.backends, n))
		}
		return fmt.Sprintf("serve %.2f + PostgreSQL %s + %s %.2f; %.2f of the CPUs over the loop",
			msPer(c.server, n), db, self, msPer(c.self, n), c.total().Seconds()/(float64(ncpu)*c.took.Seconds()))
	}
	perHook, perMsg := msPer(in.total(), r.baseline.ok), msPer(pub.total(), r.pub.ok)
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

// pacedCPU is what a message of the open loop cost the server and the
// database's backends, its deliveries included: "-" when the meter
// failed, or on PostgreSQL when its backends could not be read (the
// figure would leave the database out).
func pacedCPU(r *publishResult) string {
	c := r.pacedCPU
	if r.paced == nil || r.paced.ok == 0 || c.err != nil || r.target == targetPostgres && c.backendsSeen == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", msPer(c.server+c.backends, int64(r.paced.ok)))
}
