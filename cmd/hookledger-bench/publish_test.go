package main

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The closed loop issues exactly the count asked for, whatever the number
// of clients, and counts failures apart from successes.
func TestDriveClosedLoopCount(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	res := driveClosedLoop(context.Background(), 7, 100, 0, func(_ *http.Client, seq int) (time.Duration, error) {
		mu.Lock()
		seen[seq]++
		mu.Unlock()
		if seq%10 == 3 {
			return 0, errors.New("refused")
		}
		return time.Millisecond, nil
	})
	if res.ok != 90 || res.failed != 10 || res.firstErr != "refused" || len(res.lat) != 90 {
		t.Fatalf("ok %d failed %d first %q samples %d, want 90, 10, refused, 90", res.ok, res.failed, res.firstErr, len(res.lat))
	}
	for seq := range 100 {
		if seen[seq] != 1 {
			t.Fatalf("request %d sent %d times, want once", seq, seen[seq])
		}
	}
}

// The open loop issues exactly the count asked for, each request once,
// and counts failures apart from successes.
func TestDrivePacedCount(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	res := drivePaced(context.Background(), 100000, 50, func(_ *http.Client, seq int) (time.Duration, error) {
		mu.Lock()
		seen[seq]++
		mu.Unlock()
		if seq%10 == 3 {
			return 0, errors.New("refused")
		}
		return time.Millisecond, nil
	})
	if res.ok != 45 || res.failed != 5 || len(res.lat) != 45 {
		t.Fatalf("ok %d failed %d samples %d, want 45, 5, 45", res.ok, res.failed, len(res.lat))
	}
	for seq := range 50 {
		if seen[seq] != 1 {
			t.Fatalf("request %d sent %d times, want once", seq, seen[seq])
		}
	}
}

// The publish benchmark's writer line divides each loop's writer time by
// its own count, and from their ratio says how far publishing whole can
// go beside the inbound path while the writer is busy throughout.
func TestPublishWriterLine(t *testing.T) {
	r := &publishResult{
		baseline:      &closedLoop{ok: 20000},
		pub:           &closedLoop{ok: 2000},
		inboundWriter: writerSpan{m: goMem{writerBusy: 4.9}, took: 5 * time.Second},
		publishWriter: writerSpan{m: goMem{writerBusy: 4.8}, took: 6 * time.Second},
	}
	want := "SQLite writer: 245 us per inbound webhook (busy 0.98 of its loop); 2400 us per message accepted and delivered to its 10 endpoints " +
		"(busy 0.80 of the loop and its fan-out), 9.8 webhooks' worth: with the writer busy throughout, publishing whole reaches at most 0.10 " +
		"of the inbound rate (the goals ask for 0.45: 0.5 accepted, 0.9 of that delivered)"
	if got := publishWriterLine(r, 10); got != want {
		t.Errorf("publishWriterLine:\n got %q\nwant %q", got, want)
	}
	if got := publishWriterLine(&publishResult{baseline: r.baseline, pub: r.pub}, 10); got != "" {
		t.Errorf("no writer time (PostgreSQL), yet a line: %q", got)
	}
	r.publishWriter.err = errors.New("GET /metrics answered 401 Unauthorized")
	if got := publishWriterLine(r, 10); !strings.Contains(got, "not read") || !strings.Contains(got, "401") {
		t.Errorf("a failed read is not said: %q", got)
	}
}

// The publish benchmark's CPU line divides each loop's CPU, part by part,
// by its own count, and sets the processors over a message's cost against
// the inbound rate; the database's part shows only where it was read.
func TestPublishCPULine(t *testing.T) {
	r := &publishResult{
		target:   targetPostgres,
		baseline: &closedLoop{ok: 10000, elapsed: 4 * time.Second},
		pub:      &closedLoop{ok: 1000, elapsed: 2 * time.Second},
		inboundCPU: cpuSpan{server: 3 * time.Second, backends: 4 * time.Second, self: 1 * time.Second, backendsSeen: 3,
			took: 5 * time.Second},
		publishCPU: cpuSpan{server: 2 * time.Second, backends: 5 * time.Second, self: 3 * time.Second, backendsSeen: 4,
			took: 6 * time.Second},
	}
	want := "CPU: 0.80 ms per inbound webhook (serve 0.30 + PostgreSQL 0.40 + load generator 0.10; 0.80 of the CPUs over the loop); " +
		"10.00 ms per message accepted and delivered to its 10 endpoints (serve 2.00 + PostgreSQL 5.00 + load generator and receiver 3.00; " +
		"0.83 of the CPUs over the loop), 12.5 webhooks' worth: were the 2 CPUs the only limit, publishing whole would reach at most 0.08 " +
		"of the inbound rate (the goals ask for 0.45: at most 1.78 ms per message)"
	if got := publishCPULine(r, 10, 2); got != want {
		t.Errorf("publishCPULine:\n got %q\nwant %q", got, want)
	}
	sq := *r
	sq.target = targetSQLite
	sq.inboundCPU.backends, sq.inboundCPU.backendsSeen = 0, 0
	if got := publishCPULine(&sq, 10, 2); !strings.HasPrefix(got, "CPU: 0.40 ms per inbound webhook (serve 0.30 + PostgreSQL - + load generator 0.10;") {
		t.Errorf("no backends read, yet a database part: %q", got)
	}
	if got := publishCPULine(&sq, 10, 2); strings.Contains(got, "not read") {
		t.Errorf("SQLite has no backends to read, yet the line says they were not read: %q", got)
	}
	sq.target = targetPostgres
	if got := publishCPULine(&sq, 10, 2); !strings.HasSuffix(got, "their CPU is not in these figures") {
		t.Errorf("PostgreSQL's backends unread, and the line does not say so: %q", got)
	}
	if got := publishCPULine(&publishResult{baseline: r.baseline, pub: r.pub}, 10, 2); got != "" {
		t.Errorf("no CPU measured, yet a line: %q", got)
	}
	r.publishCPU.err = errors.New("read CPU time: no such process")
	if got := publishCPULine(r, 10, 2); !strings.Contains(got, "not read") || !strings.Contains(got, "no such process") {
		t.Errorf("a failed read is not said: %q", got)
	}
}

// The open loop's CPU per message is the server's and the database's,
// never the load generator's, and "-" where the database was not read.
func TestPacedCPU(t *testing.T) {
	r := &publishResult{target: targetPostgres, paced: &closedLoop{ok: 500},
		pacedCPU: cpuSpan{server: 2 * time.Second, backends: 3 * time.Second, self: 7 * time.Second, backendsSeen: 2}}
	if got := pacedCPU(r); got != "10.00" {
		t.Errorf("pacedCPU = %q, want 10.00", got)
	}
	r.pacedCPU.backendsSeen = 0
	if got := pacedCPU(r); got != "-" {
		t.Errorf("PostgreSQL's backends unread: pacedCPU = %q, want -", got)
	}
	r.target, r.pacedCPU.backends = targetSQLite, 0
	if got := pacedCPU(r); got != "4.00" {
		t.Errorf("SQLite: pacedCPU = %q, want 4.00", got)
	}
	r.pacedCPU.err = errors.New("read CPU time: no such process")
	if got := pacedCPU(r); got != "-" {
		t.Errorf("a failed read: pacedCPU = %q, want -", got)
	}
	// An open loop at --paced-rate is not at half the capacity: its p99
	// is no goal's figure.
	r.pacedLat = latencies{3 * time.Millisecond}
	if _, ok := r.pacedP99(); !ok {
		t.Error("the open loop at half capacity has no p99")
	}
	r.pacedFixed = true
	if p99, ok := r.pacedP99(); ok {
		t.Errorf("an open loop at --paced-rate judged as half capacity: p99 %s", p99)
	}
}

// databaseOf names the database of a store URL, the backends' title.
func TestDatabaseOf(t *testing.T) {
	if got, err := databaseOf("postgres://u@127.0.0.1:5432/hl_bench_abc?sslmode=disable"); err != nil || got != "hl_bench_abc" {
		t.Errorf("databaseOf = %q, %v, want hl_bench_abc", got, err)
	}
}

// Over several rounds, each target's row comes from its round of median
// publishing, PostgreSQL beside SQLite is the median of the rounds' own
// ratios (not the ratio of two medians from different rounds), and the
// account covers every round.
func TestSummarizePublishTakesTheMedianRound(t *testing.T) {
	res := func(target string, perSecond int64, missing int) *publishResult {
		return &publishResult{target: target, pub: &closedLoop{ok: perSecond, elapsed: time.Second},
			baseline: &closedLoop{ok: 1000, elapsed: time.Second}, missing: missing, drained: true}
	}
	rounds := [][]*publishResult{
		{res(targetSQLite, 900, 0), res(targetPostgres, 400, 0)}, // 0.44
		{res(targetSQLite, 700, 0), res(targetPostgres, 420, 0)}, // 0.60
		{res(targetSQLite, 800, 1), res(targetPostgres, 380, 0)}, // 0.475
	}
	sum := summarizePublish(rounds)
	if len(sum.results) != 2 || sum.results[0] != rounds[2][0] || sum.results[1] != rounds[0][1] {
		t.Fatalf("median rounds: %+v, want SQLite's third and PostgreSQL's first", sum.results)
	}
	if len(sum.ratios) != 3 || sum.pgOverSQLite != 0.475 {
		t.Fatalf("PostgreSQL over SQLite: %v of %v, want the median ratio 0.475 of three", sum.pgOverSQLite, sum.ratios)
	}
	if sum.accepted != 900+400+700+420+800+380 || sum.lost != 1 || !sum.drained {
		t.Fatalf("account: %d accepted, %d lost, drained %v", sum.accepted, sum.lost, sum.drained)
	}
	hs := publishHeadlines(&publishFlags{endpoints: 10, maxInFlight: 16, rounds: 3}, sum)
	var got []string
	for _, h := range hs {
		got = append(got, h.figure+" = "+h.value)
	}
	all := strings.Join(got, "\n")
	for _, want := range []string{"SQLite: POST /api/v1/messages with an Idempotency-Key (round of median publishing, of 3) = 800 requests/s",
		"PostgreSQL publishing beside SQLite's (median of 3 rounds) = 0.47 of SQLite's requests/s",
		"= 3,600 accepted, 1 missing or not at every endpoint"} {
		if !strings.Contains(all, want) {
			t.Errorf("headlines lack %q:\n%s", want, all)
		}
	}
	one := summarizePublish(rounds[:1])
	if one.results[0] != rounds[0][0] || one.pgOverSQLite != 400.0/900 {
		t.Fatalf("one round: %+v", one)
	}
}

// --paced-rate is a finite rate not below 0: NaN, an infinity or a
// negative rate is a usage error before anything runs.
func TestPublishPacedRateChecked(t *testing.T) {
	for _, v := range []string{"NaN", "+Inf", "-1"} {
		var out, errs strings.Builder
		if code := runPublish(context.Background(), &out, &errs, []string{"--paced-rate", v}); code != exitUsage {
			t.Errorf("--paced-rate %s: exit %d, want %d", v, code, exitUsage)
		}
		if !strings.Contains(errs.String(), "--paced-rate a finite rate") {
			t.Errorf("--paced-rate %s: %q does not name the flag", v, errs.String())
		}
	}
}
