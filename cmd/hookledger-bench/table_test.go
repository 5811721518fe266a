package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 7: "7", 999.4: "999", 999.6: "1,000", 12563: "12,563", 1234567.8: "1,234,568", -4321: "-4,321", -0.2: "0",
	} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

// A table is one markdown row per headline between the marks that
// scripts/bench.sh looks for, with a pipe in a figure escaped and an empty
// cell shown as a dash.
func TestPrintHeadlines(t *testing.T) {
	var b bytes.Buffer
	printHeadlines(&b, "commit", []headline{
		{figure: "a | b", value: "1 commits/s", baseline: "", ratio: "0.50", goal: "met"},
	})
	want := "\n<!-- hookledger-bench table: commit -->\n" +
		"| figure | value | same-run baseline | ratio | goal |\n" +
		"|---|---|---|---|---|\n" +
		`| a \| b | 1 commits/s | – | 0.50 | met |` + "\n" +
		"<!-- end of table -->\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}
}

// The receive table judges the product's targets at the smallest client
// count against the durable floor of the same run (0.8 of it for SQLite,
// 0.5 for PostgreSQL, p99 within 25 ms for both), and counts the
// acknowledged events missing from every hookledger cell.
func TestReceiveHeadlines(t *testing.T) {
	cell := func(target string, clients int, reqs int64, p99 time.Duration, acked, missing int) *receiveResult {
		return &receiveResult{target: target, clients: clients, sent: reqs, elapsed: time.Second,
			lat: latencies{p99 / 2, p99}, storeAccounts: target == targetSQLite || target == targetPostgres,
			acked: acked, missing: missing, serverCPU: time.Duration(reqs) * 100 * time.Microsecond}
	}
	f := &receiveFlags{clients: []int{32, 128}, goalRatio: 0.8, goalRatioPG: 0.5, goalP99: 25 * time.Millisecond}
	rows := receiveHeadlines(f, []*receiveResult{
		cell(targetNoop, 32, 10000, time.Millisecond, 0, 0),
		cell(targetFloor, 32, 5000, 2*time.Millisecond, 0, 0),
		cell(targetSQLite, 32, 2500, 20*time.Millisecond, 2500, 0),
		cell(targetPostgres, 32, 2600, 30*time.Millisecond, 2600, 0),
		cell(targetSQLite, 128, 3000, 40*time.Millisecond, 3000, 1),
	})
	if len(rows) != 5 {
		t.Fatalf("%d rows, want floor, sqlite twice, postgres and the account: %+v", len(rows), rows)
	}
	sq := rows[1]
	if sq.figure != "SQLite, 32 clients" || sq.value != "2,500 req/s, p99 20.0 ms; server CPU 100 us/request" ||
		sq.ratio != "0.25 of no-op, 0.50 of floor" || sq.goal != ">= 0.80 of floor: not met; p99 <= 25ms: met" {
		t.Errorf("sqlite at 32 clients: %+v", sq)
	}
	if pg := rows[2]; pg.goal != ">= 0.50 of floor: met; p99 <= 25ms: not met" {
		t.Errorf("postgres at 32 clients: %+v", pg)
	}
	if rows[3].goal != "" {
		t.Errorf("the target is judged at the smallest client count only: %+v", rows[3])
	}
	if acc := rows[4]; acc.value != "1 of 8,100 acknowledged, over 3 cells" || acc.goal != "none: not met" {
		t.Errorf("account: %+v", acc)
	}
}

// Each goal line names the ratio to the floor with the goal beside it,
// and what the processors alone would allow: the floor's CPU per request
// (server and client) over the target's.
func TestReceiveGoals(t *testing.T) {
	cell := func(target string, reqs int64, server, client time.Duration) *receiveResult {
		return &receiveResult{target: target, clients: 32, sent: reqs, elapsed: time.Second,
			lat: latencies{5 * time.Millisecond}, serverCPU: server, clientCPU: client}
	}
	f := &receiveFlags{clients: []int{32}, goalRatio: 0.8, goalRatioPG: 0.5, goalP99: 25 * time.Millisecond}
	goals := receiveGoals(f, []*receiveResult{
		cell(targetFloor, 10000, 600*time.Millisecond, 400*time.Millisecond),  // 60 + 40 us
		cell(targetSQLite, 8000, 1200*time.Millisecond, 400*time.Millisecond), // 150 + 50 us
	})
	if len(goals) != 1 {
		t.Fatalf("%d goals, want sqlite's", len(goals))
	}
	g := goals[0]
	if want := "goal (sqlite at 32 clients: >= 0.80 of the durable floor, p99 <= 25ms): 0.80 of the floor (8000 of 10000 req/s), p99 5.00 ms: MET"; g.line() != want {
		t.Errorf("line\n got %s\nwant %s", g.line(), want)
	}
	if !strings.HasSuffix(g.cpuLine, "sqlite could reach (60+40)/(150+50) = 0.50 of the floor") {
		t.Errorf("cpu line: %s", g.cpuLine)
	}
}

// The commit table sets each group-commit cell beside one row per
// transaction at the same driver and writers, and beside raw fsync.
func TestCommitHeadlines(t *testing.T) {
	fs := fsyncResult{n: 1000, elapsed: time.Second}
	cell := func(mode string, n int64) *commitResult {
		return &commitResult{driver: "sqlite", mode: mode, writers: 32, measured: n, elapsed: time.Second,
			lat: latencies{time.Millisecond}, total: n, rows: int(n), rowDels: int(n)}
	}
	rows := commitHeadlines(fs, fs, []*commitResult{cell(modeSingle, 500), cell(modeGroup, 2000)})
	if len(rows) != 2 {
		t.Fatalf("rows: %+v", rows)
	}
	g := rows[0]
	if g.figure != "SQLite group commit, 32 writers" || g.baseline != "one row per transaction 500/s; raw fsync 1,000/s" ||
		g.ratio != "4.0x single, 2.00x fsync" {
		t.Errorf("group cell: %+v", g)
	}
	if !strings.HasSuffix(rows[1].goal, ": met") {
		t.Errorf("row check: %+v", rows[1])
	}
}
