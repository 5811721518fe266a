package sqlite

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storetest"
)

// tamper is storetest's Tamper for this driver: one statement on its own
// connection to the file, with foreign keys and CHECK constraints off on
// that connection, and the episode key's UNIQUE taken out of the table
// (SQLite cannot drop a constraint: the table is rebuilt without it).
func tamper(t *testing.T, s store.Store, guard, query string, args ...any) {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+s.(*Store).path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatalf("tamper: open: %v", err)
	}
	defer db.Close()
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatalf("tamper: %v", err)
	}
	defer conn.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("tamper: %s: %v", q, err)
		}
	}
	exec(`PRAGMA foreign_keys = OFF`)
	exec(`PRAGMA ignore_check_constraints = ON`)
	if guard == storetest.GuardEpisodeKey {
		var ddl string
		if err := conn.QueryRowContext(ctx, `SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'effects'`).Scan(&ddl); err != nil {
			t.Fatalf("tamper: read effects table: %v", err)
		}
		loose := regexp.MustCompile(`(episode_key\s+TEXT\s+NOT NULL)\s+UNIQUE`).ReplaceAllString(ddl, "$1")
		if loose == ddl {
			t.Fatalf("tamper: no UNIQUE on episode_key in %s", ddl)
		}
		exec(strings.Replace(loose, "CREATE TABLE effects", "CREATE TABLE effects_loose", 1))
		exec(`INSERT INTO effects_loose SELECT * FROM effects`)
		exec(`DROP TABLE effects`)
		exec(`ALTER TABLE effects_loose RENAME TO effects`)
	}
	for i, a := range args {
		if tm, ok := a.(time.Time); ok {
			args[i] = tm.UnixMicro()
		}
	}
	exec(query, args...)
}

// The check reads a snapshot on a reader connection: a write transaction
// held open meanwhile delays it not at all, and it does not see the
// uncommitted write.
func TestInvariantCheckBesideAnOpenWrite(t *testing.T) {
	s := open(t, t.TempDir()+"/check.db")
	ctx := context.Background()
	tx, err := s.writer.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // test cleanup
	if _, err := tx.ExecContext(ctx, `INSERT INTO events (source, event_id, type, entity, account, received_at, deliveries, routed)
		VALUES ('crm', 'evt_open', 'deal.updated', 'deal_1', '', 1, 1, 1)`); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	r, err := s.InvariantCheck(cctx, &store.InvariantCheckParams{})
	if err != nil {
		t.Fatalf("check beside an open write transaction: %v", err)
	}
	if r.Counts[store.InvariantEventPending] != 0 {
		t.Fatalf("the check saw an uncommitted row: %+v", r.Findings)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if r, err = s.InvariantCheck(ctx, &store.InvariantCheckParams{}); err != nil || r.Counts[store.InvariantEventPending] != 1 {
		t.Fatalf("after the commit: %+v %v, want the routed event without work", r, err)
	}
}

// Escalation reads the partial index of pending deadlines and verification
// a destination's effects in id order, neither sorting; the evidence probe
// of done_evidence reaches the audit rows through an index.
func TestOutcomePlans(t *testing.T) {
	s := open(t, t.TempDir()+"/plans.db")
	for _, c := range []struct {
		name, sql  string
		args       []any
		use, avoid string
	}{
		{"escalate", escalateSQL, []any{1, 10}, "effects_deadline", "TEMP B-TREE"},
		{"verify page", verifyPageSQL, []any{"crm", 0, 10}, "effects_destination", "TEMP B-TREE"},
		{"done evidence", doneEvidenceSQL, []any{store.SettleAction(store.EffectDone), ": reconciled"}, "audit_e", "SCAN au"},
		{"find compensation", findCompensationSQL, []any{"k:compensate", 1}, "effects_compensates", "SCAN effects\n"},
	} {
		got, outer := queryPlan(t, s, c.name, c.sql, c.args...)
		if !strings.Contains(got, c.use) || (c.avoid != "" && strings.Contains(outer, c.avoid)) {
			t.Errorf("%s: plan\n%swant %q, not %q", c.name, got, c.use, c.avoid)
		}
	}
}
