package server

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// execOn runs DDL on the server's database behind its back.
func execOn(t *testing.T, storeURL string, ddl string) {
	t.Helper()
	if path, ok := strings.CutPrefix(storeURL, "sqlite:"); ok {
		// An immediate transaction takes the write lock first, waiting
		// for it (busy_timeout): a plain statement begins as a reader and
		// fails at once with SQLITE_BUSY when the running server commits
		// before it upgrades to a writer.
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_txlock=immediate")
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tx, err := db.Begin()
		if err != nil {
			t.Fatalf("begin: %v", err)
		}
		if _, err := tx.Exec(ddl); err != nil {
			_ = tx.Rollback()
			t.Fatalf("%s: %v", ddl, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatalf("%s: commit: %v", ddl, err)
		}
		return
	}
	conn, err := pgx.Connect(context.Background(), storeURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), ddl); err != nil {
		t.Fatalf("%s: %v", ddl, err)
	}
}

// A stage whose rounds keep failing with work waiting (here routing, its
// table renamed away: a failure of the store, not of one event) turns
// /readyz unready once it has made no progress for a minute, names the
// stage there, logs the cause once at WARN however often the round
// repeats, and is ready again when the stage makes progress.
func TestStalledStageTurnsReadyzUnready(t *testing.T) { stores(t, testStalledStage) }

func testStalledStage(t *testing.T, storeURL string) {
	h := startFlows(t, storeURL)
	if code, resp := shopPost(t, h, "shop", orderEvent("evt-1", "CREATED", 1), nil); code != 200 {
		t.Fatalf("first event: %d %s", code, resp)
	}
	if d := settled(t, h, "shop", "evt-1"); d != "applied" {
		t.Fatalf("first event %s, want applied", d)
	}
	execOn(t, storeURL, `ALTER TABLE work RENAME TO work_away`)
	if code, resp := shopPost(t, h, "shop", orderEvent("evt-2", "CANCELLED", 2), nil); code != 200 {
		t.Fatalf("second event: %d %s", code, resp)
	}
	waitFor(t, "routing to fail", func() bool { return strings.Contains(h.logs.String(), "routing failed") })
	if code, b := h.get("/readyz", ""); code != 200 {
		t.Fatalf("/readyz right after the first failure: %d %s, want 200", code, b)
	}
	// A minute later (the fake clock) the failing rounds are a stall.
	h.clk.Advance(61 * time.Second)
	waitFor(t, "/readyz to name the stalled stage", func() bool {
		code, b := h.get("/readyz", "")
		return code == 503 && strings.Contains(string(b), "not ready: stage routing has made no progress since")
	})
	if code, b := h.get("/readyz", ""); strings.Contains(string(b), "work") || code != 503 {
		t.Fatalf("/readyz: %d %s: the cause belongs in the log, not in the public answer", code, b)
	}
	// Logged once per cause: a driver may word one failure two ways.
	logs := h.logs.String()
	causes := map[string]int{}
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, `msg="stage stalled: not ready until it makes progress" stage=routing`) {
			_, cause, _ := strings.Cut(line, " cause=")
			causes[digitsRun.ReplaceAllString(cause, "#")]++
		}
	}
	if len(causes) == 0 {
		t.Fatalf("no stall warning for routing:\n%s", logs)
	}
	for cause, n := range causes {
		if n != 1 {
			t.Fatalf("the cause %s was logged %d times, want once:\n%s", cause, n, logs)
		}
	}
	if !strings.Contains(logs, "level=WARN msg=\"stage stalled") {
		t.Fatalf("the stall is not logged at WARN:\n%s", logs)
	}

	execOn(t, storeURL, `ALTER TABLE work_away RENAME TO work`)
	var lastBody string
	defer func() {
		if t.Failed() {
			t.Logf("last /readyz: %s\nlogs:\n%s", lastBody, h.logs.String())
		}
	}()
	if d := settled(t, h, "shop", "evt-2"); d != "applied" {
		t.Fatalf("second event after the repair: %s, want applied", d)
	}
	// Every stage that failed while the table was away recovers by its
	// own retry, retention too (hourly polls) when its first pass came
	// late enough to fail: it tries again within seconds, not an hour.
	waitFor(t, "/readyz to be ready again", func() bool {
		h.clk.Advance(2 * time.Second) // past the cached probe
		code, body := h.get("/readyz", "")
		lastBody = string(body)
		return code == 200
	})
	if !strings.Contains(h.logs.String(), `msg="stage making progress again" stage=routing`) {
		t.Fatalf("no recovery line:\n%s", h.logs.String())
	}
}

var digitsRun = regexp.MustCompile(`[0-9]+`)
