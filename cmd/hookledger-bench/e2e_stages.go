package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
)

// stampRow is one event's way through the pipeline, as the ledger stamped
// it (unix microseconds; 0 where the ledger has no stamp). Each stage
// records the time it took the event up (the Now it was given), so the
// commit of a stage falls in the wait of the next one.
type stampRow struct {
	eventID  string
	received int64 // events.received_at: the receiver read the request
	routed   int64 // work.created_at: the router took the event's page
	claimed  int64 // entities.claimed_at: the processor leased the entity
	applied  int64 // work.done_at: the item was settled (its page prepared)
	created  int64 // effects.created_at: the effect's row was written
	leased   int64 // effects.claimed_at: the delivery worker claimed it
	called   int64 // effect_attempts.started_at: the first call started
	callUS   int64 // effect_attempts.duration_us
	settled  int64 // effects.updated_at: the call's settle
}

// stage is one stage of the breakdown: the time an event waited for it
// and the time it spent in it, from two pairs of stamps.
type stage struct {
	name, wait, work string // the legend of each measure
	waitOf, workOf   func(r *stampRow, ackUS int64) (time.Duration, bool)
}

func span(from, to int64) (time.Duration, bool) {
	if from <= 0 || to <= 0 {
		return 0, false
	}
	return time.Duration(to-from) * time.Microsecond, true
}

// e2eStages are the stages an event goes through after its
// acknowledgement, in order.
var e2eStages = []stage{
	{name: "receive", wait: "request read -> acknowledged: the inbox's group commit", work: "",
		waitOf: func(r *stampRow, ack int64) (time.Duration, bool) { return span(r.received, ack) }},
	{name: "route", wait: "acknowledged -> the router takes its page", work: "",
		waitOf: func(r *stampRow, ack int64) (time.Duration, bool) { return span(ack, r.routed) }},
	{name: "process", wait: "routed -> entity claimed (0 when the routing take leased it)", work: "entity claimed -> item settled (in the routing transaction for a small page, then its commit; else the processor's listing, preparing and settle)",
		waitOf: func(r *stampRow, _ int64) (time.Duration, bool) { return span(r.routed, r.claimed) },
		workOf: func(r *stampRow, _ int64) (time.Duration, bool) { return span(r.claimed, r.applied) }},
	{name: "claim", wait: "item settled -> effect claimed (in the same transaction when routing or a settle's group claims for the worker)", work: "",
		waitOf: func(r *stampRow, _ int64) (time.Duration, bool) { return span(r.applied, r.leased) }},
	{name: "call", wait: "effect claimed -> call started (the commit of the transaction that claimed it, bulkhead, rate)", work: "call started -> answered",
		waitOf: func(r *stampRow, _ int64) (time.Duration, bool) { return span(r.leased, r.called) },
		workOf: func(r *stampRow, _ int64) (time.Duration, bool) {
			if r.called <= 0 {
				return 0, false
			}
			return time.Duration(r.callUS) * time.Microsecond, true
		}},
}

// stageStats are the percentiles of one stage over a run.
type stageStats struct {
	wait, work latencies
}

// breakdown computes each stage's waits and works over the rows of
// acknowledged events; ack gives an event's acknowledgement time (unix
// microseconds) as the sender saw it, 0 when unknown.
func breakdown(rows []stampRow, ack func(id string) int64) []stageStats {
	out := make([]stageStats, len(e2eStages))
	for i := range rows {
		r := &rows[i]
		a := ack(r.eventID)
		for j, s := range e2eStages {
			if d, ok := s.waitOf(r, a); ok {
				out[j].wait = append(out[j].wait, d)
			}
			if s.workOf != nil {
				if d, ok := s.workOf(r, a); ok {
					out[j].work = append(out[j].work, d)
				}
			}
		}
	}
	for j := range out {
		out[j].wait = mergeLatencies([]latencies{out[j].wait})
		out[j].work = mergeLatencies([]latencies{out[j].work})
	}
	return out
}

// stampSQL selects every event's stamps, its first pass and its effect's
// first call; us spells a time column as unix microseconds.
func stampSQL(us func(col string) string) string {
	return `SELECT e.event_id, ` + strings.Join([]string{
		us("e.received_at"), us("w.created_at"), us("n.claimed_at"), us("w.done_at"),
		us("f.created_at"), us("f.claimed_at"), us("a.started_at"), "coalesce(a.duration_us, 0)", us("f.updated_at"),
	}, ", ") + `
		FROM events e
		JOIN work w ON w.event_pk = e.pk AND w.replay_id = 0
		JOIN entities n ON n.flow = w.flow AND n.entity = w.entity
		JOIN effects f ON f.source_event_pk = e.pk
		LEFT JOIN effect_attempts a ON a.effect_id = f.id AND a.number = 1`
}

// readStamps reads every event's stamps from a target's store after its
// servers stopped.
func readStamps(ctx context.Context, driver, storeURL string) ([]stampRow, error) {
	var out []stampRow
	scan := func(sc func(...any) error) error {
		var r stampRow
		if err := sc(&r.eventID, &r.received, &r.routed, &r.claimed, &r.applied, &r.created, &r.leased, &r.called, &r.callUS, &r.settled); err != nil {
			return fmt.Errorf("read stage stamps: %w", err)
		}
		out = append(out, r)
		return nil
	}
	switch driver {
	case "sqlite":
		db, err := sql.Open("sqlite", "file:"+strings.TrimPrefix(storeURL, "sqlite:")+"?mode=ro&_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, fmt.Errorf("read stage stamps: %w", err)
		}
		defer db.Close()
		rows, err := db.QueryContext(ctx, stampSQL(func(c string) string { return "coalesce(" + c + ", 0)" }))
		if err != nil {
			return nil, fmt.Errorf("read stage stamps: %w", err)
		}
		defer rows.Close()
		if err := scanAll(rows, scan); err != nil {
			return nil, err
		}
		return out, nil
	case "postgres":
		conn, err := pgx.Connect(ctx, singleConnURL(storeURL))
		if err != nil {
			return nil, fmt.Errorf("read stage stamps: %w", err)
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, stampSQL(func(c string) string {
			return "CASE WHEN " + c + " IS NULL OR " + c + " = '-infinity' THEN 0 ELSE (extract(epoch FROM " + c + ") * 1000000)::bigint END"
		}))
		if err != nil {
			return nil, fmt.Errorf("read stage stamps: %w", err)
		}
		defer rows.Close()
		if err := scanAll(rows, scan); err != nil {
			return nil, err
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown driver %q", driver)
}

// scanAll hands every row to scan; database/sql's and pgx's rows both fit.
func scanAll(rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}, scan func(func(dest ...any) error) error) error {
	for rows.Next() {
		if err := scan(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}

// printE2EStages prints, per target, where an event's time went between
// its acknowledgement and its call.
func printE2EStages(w io.Writer, results []*e2eResult) {
	shown := false
	for _, r := range results {
		shown = shown || r.stages != nil
	}
	if !shown {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Where the time goes, per stage, from the ledger's own stamps (ms; each stage stamps the moment it takes an event up,")
	fmt.Fprintln(w, "so a stage's commit is in the next stage's wait; receive's end is the acknowledgement the sender saw):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "target\tstage\twait p50\twait p99\twork p50\twork p99\t\n")
	for _, r := range results {
		if r.stages == nil {
			continue
		}
		for j, s := range e2eStages {
			st := r.stages[j]
			work50, work99 := "-", "-"
			if s.workOf != nil {
				work50, work99 = ms(st.work.pct(0.5)), ms(st.work.pct(0.99))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", r.target, s.name, ms(st.wait.pct(0.5)), ms(st.wait.pct(0.99)), work50, work99)
		}
	}
	tw.Flush()
	for _, s := range e2eStages {
		fmt.Fprintf(w, "  %s: wait = %s", s.name, s.wait)
		if s.work != "" {
			fmt.Fprintf(w, "; work = %s", s.work)
		}
		fmt.Fprintln(w)
	}
}

// Goals of the pipeline's capacity and latency on SQLite: effects done
// per second when overloaded against the ingest probe's durable acks of
// the same run, and the latency at half of that capacity.
const (
	capacityGoal = 0.5
	p50Goal      = 10 * time.Millisecond
	p99Goal      = 25 * time.Millisecond
)

// saturated reports whether the target fell behind the send rate, so that
// its whole-run rate is its capacity: it needed more than a second to
// drain, or most sends were late.
func (r *e2eResult) saturated() bool {
	return r.drainedIn > time.Second || r.late*2 > r.scheduled
}

// serverCPU is the serve processes' CPU time, summed.
func (r *e2eResult) serverCPU() time.Duration {
	var sum time.Duration
	for _, c := range r.cpu {
		sum += c
	}
	return sum
}

// cpuPerEffect is the serve processes' CPU time per effect done.
func (r *e2eResult) cpuPerEffect() time.Duration {
	return r.serverCPU() / time.Duration(max(r.done(), 1))
}

// printE2ECapacity prints, per target, its capacity beside the door's
// acks alone with the goal (SQLite) and beside the ingest probe's, the
// CPU and writer time each effect cost; or, for a target that kept up,
// its latency beside the latency goals.
func printE2ECapacity(w io.Writer, run *e2eRunInfo, results []*e2eResult) {
	fmt.Fprintln(w)
	for _, r := range results {
		if !r.saturated() {
			fmt.Fprintf(w, "%s kept up with %.0f/s: p50 %s ms (goal <= %s at half the capacity: %s), p99 %s ms (goal <= %s: %s); CPU %.2f ms per effect\n",
				r.target, rate(r.acked, r.sendFor), ms(r.lat.pct(0.5)), ms(p50Goal), metOrNot(float64(p50Goal), float64(r.lat.pct(0.5))),
				ms(r.lat.pct(0.99)), ms(p99Goal), metOrNot(float64(p99Goal), float64(r.lat.pct(0.99))), float64(r.cpuPerEffect())/float64(time.Millisecond))
			if line := cpuShare(runtime.NumCPU(), r); line != "" {
				fmt.Fprintln(w, "  "+line)
			}
			if line := writerLine(r); line != "" {
				fmt.Fprintln(w, "  "+line)
			}
			continue
		}
		var versus []string
		door := r.goalDoor()
		if door != nil {
			ratio := r.wholeRate() / door.rate()
			versus = append(versus, fmt.Sprintf("%.2f x the door's %.0f durable acks/s alone (goal >= %.1f: %s)",
				ratio, door.rate(), capacityGoal, metOrNot(ratio, capacityGoal)))
		}
		if run.probeRate > 0 {
			versus = append(versus, fmt.Sprintf("%.2f x the ingest probe's %.0f acks/s (its pipeline behind it)", r.wholeRate()/run.probeRate, run.probeRate))
		}
		if len(versus) == 0 {
			versus = append(versus, "no door or ingest probe in this run: no ratio")
		}
		fmt.Fprintf(w, "%s capacity (saturated): %.0f effects/s over the whole run = %s; CPU %.2f ms per effect done (serve, user+system)\n",
			r.target, r.wholeRate(), strings.Join(versus, "; "), float64(r.cpuPerEffect())/float64(time.Millisecond))
		if line := cpuBound(runtime.NumCPU(), run, r); line != "" {
			fmt.Fprintln(w, "  "+line)
		}
		if line := writerLine(r); line != "" {
			fmt.Fprintln(w, "  "+line)
		}
		if line := writerBound(r, door); line != "" {
			fmt.Fprintln(w, "  "+line)
		}
	}
}

// writerLine is the share of the run (sending and draining) SQLite's one
// writer spent on write transactions, and of that the share committing,
// from the servers' own counters; "" where the store exports none. A
// share near 1 says the writer, not the processors, held the target back.
func writerLine(r *e2eResult) string {
	span := (r.sendFor + r.drainedIn).Seconds()
	if r.memErr != nil || r.mem.writerBusy <= 0 || span <= 0 {
		return ""
	}
	return fmt.Sprintf("SQLite writer: busy %.2f of the run (%.1f of %.1f s, sending and draining), %.2f of that committing (WAL writes, fsync, checkpoints)",
		r.mem.writerBusy/span, r.mem.writerBusy, span, r.mem.writerCommit/r.mem.writerBusy)
}

// writerPerEffect is the SQLite writer's time per effect done, in
// microseconds; false where the servers exported none or nothing was
// done.
func (r *e2eResult) writerPerEffect() (float64, bool) {
	if r.memErr != nil || r.mem.writerBusy <= 0 || r.done() == 0 {
		return 0, false
	}
	return r.mem.writerBusy * 1e6 / float64(r.done()), true
}

// goalDoor is the door probe r's capacity is set against (goal 2): its
// round's, for SQLite targets only (the goal is SQLite's), and only a
// probe that acknowledged something.
func (r *e2eResult) goalDoor() *receiveResult {
	base, _, _ := strings.Cut(r.target, "@")
	if base != e2eSQLite || r.door == nil || r.door.rate() <= 0 {
		return nil
	}
	return r.door
}

// writerBound is goal 2 in the writer's time: the SQLite writer's time
// per effect done beside the door's per request alone. Where both are
// bound by the one writer, capacity over the door's rate is about the
// inverse of their ratio, so the goal needs at most 1/capacityGoal of the
// door's writer time per effect. "" without both figures.
func writerBound(r *e2eResult, door *receiveResult) string {
	if door == nil {
		return ""
	}
	perEffect, ok := r.writerPerEffect()
	perAck, dok := door.writerPerRequest()
	if !ok || !dok {
		return ""
	}
	return fmt.Sprintf("SQLite writer: %.0f us per effect done, the door's %.0f us per request alone (busy %.2f of its probe): "+
		"where both are bound by the writer, capacity over the door's rate is about %.2f (goal >= %.1f needs at most %.0f us per effect)",
		perEffect, perAck, door.writerBusy/door.elapsed.Seconds(), perAck/perEffect, capacityGoal, perAck/capacityGoal)
}

// cpuShare is, for a target that kept up, the processors its rate took:
// the serve processes', the database's backends' where they were
// measured (PostgreSQL on this machine) and this process's (the sender
// and the destination) CPU time per acknowledged webhook, and that cost
// times the rate sent, in CPUs. The times run from the start of sending
// until the servers stopped, draining and stopping included, so a run of
// a few seconds overstates them. Near all of the machine's, the latency
// measured is a queue for processors, not the pipeline's own; a
// PostgreSQL target at the rate SQLite is sent can take them all on two.
// "" when nothing was acknowledged.
func cpuShare(ncpu int, r *e2eResult) string {
	if r.acked == 0 || r.sendFor <= 0 || ncpu < 1 {
		return ""
	}
	perMs := func(d time.Duration) float64 { return msPer(d, r.acked) }
	parts := []string{fmt.Sprintf("serve %.2f", perMs(r.serverCPU()))}
	total := perMs(r.serverCPU())
	if pg, ok := r.pgCPUPerAck(); ok {
		parts = append(parts, fmt.Sprintf("PostgreSQL %.2f", pg))
		total += pg
	}
	parts = append(parts, fmt.Sprintf("load generator and destination %.2f", perMs(r.clientCPU)))
	total += perMs(r.clientCPU)
	sent := rate(r.acked, r.sendFor)
	return fmt.Sprintf("CPUs, from sending until stopped: %s = %.2f ms per webhook, %.2f of the %d CPUs at %.0f/s",
		strings.Join(parts, " + "), total, total*sent/1000, ncpu, sent)
}

// ackCPU is the CPU time n acknowledgements cost: the server process's
// and this process's (the load generator's).
type ackCPU struct {
	server, client time.Duration
	n              int64
}

// cpuBound is the arithmetic that bounds a saturated target when the
// machine's processors are the limit: the serve processes and this
// process (the sender and the destination) share them, so effects per
// second cannot exceed the CPUs over the CPU time both spend per effect.
// Against the door probe of the same run (SQLite) it gives the highest
// ratio those CPUs allow at this cost, and the cost per effect the
// capacity goal would need; beside each probe, what one of its
// acknowledgements cost. "" when nothing was done.
func cpuBound(ncpu int, run *e2eRunInfo, r *e2eResult) string {
	done := r.done()
	if done == 0 || ncpu < 1 {
		return ""
	}
	server, client := msPer(r.serverCPU(), int64(done)), msPer(r.clientCPU, int64(done))
	total := server + client
	if total <= 0 {
		return ""
	}
	bound := float64(ncpu) * 1000 / total
	line := fmt.Sprintf("CPU bound: serve %.2f + load generator and destination %.2f = %.2f ms per effect; were the %d CPUs the only limit, at most %.0f effects/s (measured %.0f, %.2f of that)",
		server, client, total, ncpu, bound, r.wholeRate(), r.wholeRate()/bound)
	if door := r.goalDoor(); door != nil {
		line += fmt.Sprintf("; that is %.2f of the door's %.0f acks/s alone (goal >= %.1f needs at most %.2f ms per effect)",
			bound/door.rate(), door.rate(), capacityGoal, float64(ncpu)*1000/(capacityGoal*door.rate()))
		if door.sent > 0 {
			ds, dc := msPer(door.serverCPU, door.sent), msPer(door.clientCPU, door.sent)
			line += fmt.Sprintf("; an acknowledgement at the door cost %.2f + %.2f = %.2f ms, an effect %.1f times that", ds, dc, ds+dc, total/(ds+dc))
		}
	}
	if p := run.probeCPU; p.n > 0 {
		ps, pc := msPer(p.server, p.n), msPer(p.client, p.n)
		line += fmt.Sprintf("; an acknowledgement of the ingest probe cost %.2f + %.2f = %.2f ms (the pipeline behind it included), an effect %.1f times that",
			ps, pc, ps+pc, total/(ps+pc))
	}
	return line
}
