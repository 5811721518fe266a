package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// prefillPrefix starts the event ids of a store's planted history; the
// run's own webhooks are e2eIDPrefix's, so no planted event is ever
// taken for a duplicate of one sent.
const prefillPrefix = "evt_pre_"

// prefillSQLite plants n events of the e2e flow's shape, each taken all
// the way through, in a migrated SQLite store at path: the event and its
// delivery (a body of stripeBody's size), its work item settled, its
// entity at its revision, its effect done after one attempt, and the
// four audit rows a webhook writes. The keys of each table are 1..n, so
// everything the run writes afterwards has keys above n, and its events
// ids and entities never meet the run's. A pipeline measured on an empty
// store runs on b-trees a few pages deep that fit any cache; one with a
// history writes the same rows into indexes a million entries wide.
//
// The rows are written by recursive-series INSERT ... SELECT statements,
// one per table, as the replay fixture writes its own (loadReplayFixture),
// and end an hour before start: the store's retention and the flows'
// deadlines treat them as old, settled history.
func prefillSQLite(ctx context.Context, path string, n int, start time.Time) error {
	if n <= 0 {
		return nil
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	first := start.Add(-time.Hour - time.Duration(n)*time.Millisecond).UnixMicro()
	// $1: the body, its event id written as the placeholder evtX.
	const evtX = prefillPrefix + "X"
	body := stripeBody(evtX, "in_"+evtX, start.Add(-time.Hour))
	series := fmt.Sprintf(`(WITH RECURSIVE s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < %d) SELECT i FROM s) AS g`, n)
	at := fmt.Sprintf("(%d + i * 1000)", first) // one event a millisecond
	id := `'` + prefillPrefix + `' || i`
	entity := `'in_` + prefillPrefix + `' || i`
	version := `'r' || (` + at + ` / 1000000)`
	sortKey := `printf('%020d', i)`
	key := `'invoices:' || ` + entity + ` || ':' || ` + version + ` || ':record_payment'`
	stmts := []struct {
		table string
		sql   string
		args  []any
	}{
		{"events", `INSERT INTO events (pk, source, event_id, type, entity, account, occurred_at, received_at, deliveries, disposition, routed)
			SELECT i, 'stripe', ` + id + `, 'invoice.paid', ` + entity + `, '', ` + at + `, ` + at + `, 1, 'applied', 1 FROM ` + series, nil},
		{"deliveries", `INSERT INTO deliveries (id, event_pk, request_id, batch_index, source, event_id, type, entity, account, occurred_at, received_at, headers, body)
			SELECT i, i, 'req_pre_' || i, 0, 'stripe', ` + id + `, 'invoice.paid', ` + entity + `, '', ` + at + `, ` + at + `,
				'{"Content-Type":"application/json; charset=utf-8","User-Agent":"Stripe/1.0 (+https://stripe.com/docs/webhooks)"}',
				CAST(replace(?1, '` + evtX + `', ` + id + `) AS BLOB) FROM ` + series, []any{string(body)}},
		{"work", `INSERT INTO work (id, flow, entity, event_pk, order_key, created_at, done_at, disposition, version_sort)
			SELECT i, 'invoices', ` + entity + `, i, ` + sortKey + `, ` + at + ` + 1000, ` + at + ` + 3000, 'applied', ` + sortKey + ` FROM ` + series, nil},
		{"entities", `INSERT INTO entities (flow, entity, version, version_sort, state, applied_event_pk, updated_at, pending,
				not_before, newest_key, settled_key, behind_since, claimed_at)
			SELECT 'invoices', ` + entity + `, ` + version + `, ` + sortKey + `, '{"amount":4900,"status":"paid"}', i, ` + at + ` + 3000, 0,
				` + at + ` + 1000, ` + sortKey + `, ` + sortKey + `, ` + at + ` + 1000, ` + at + ` + 2000 FROM ` + series, nil},
		{"effects", `INSERT INTO effects (id, episode_key, flow, entity, version, version_sort, effect, destination, state, request,
				source_event_pk, causation_id, hop, attempts, created_at, updated_at, destination_ref, last_response, calls, claimed_at)
			SELECT i, ` + key + `, 'invoices', ` + entity + `, ` + version + `, ` + sortKey + `, 'record_payment', 'loopback', 'done',
				'{"method":"POST","path":"/payments","body":{"amount":4900,"event":"' || ` + id + ` || '","invoice":"' || ` + entity + ` || '"}}',
				i, 'stripe/' || ` + id + `, 1, 1, ` + at + ` + 3000, ` + at + ` + 8000, 'rec_' || ` + id + `,
				'{"id": "rec_' || ` + id + ` || '"}', 1, ` + at + ` + 3000 FROM ` + series, nil},
		{"effect_attempts", `INSERT INTO effect_attempts (id, effect_id, number, started_at, duration_us, status, class, error, response,
				retry_after, retry_after_unit, wait_us, reconcile)
			SELECT i, i, 1, ` + at + ` + 7000, 750, 200, '', '', '{"id": "rec_' || ` + id + ` || '"}', '', '', 0, 0 FROM ` + series, nil},
		{"audit", `INSERT INTO audit (at, actor, action, source, event_id, entity, detail)
			SELECT ` + at + ` + a.d, a.actor, a.action, 'stripe', ` + id + `, ` + entity + `,
				CASE a.action WHEN 'effect_approved' THEN ` + key + `
					WHEN 'work_settled' THEN 'flow invoices entity ' || ` + entity + ` || ': applied ' || ` + version + `
					WHEN 'disposition' THEN 'accepted -> applied'
					ELSE ` + key + ` || ': submitting -> done after attempt 1' END
			FROM ` + series + ` CROSS JOIN (SELECT 1 AS n, 3000 AS d, 'worker-prefill' AS actor, 'effect_approved' AS action
				UNION ALL SELECT 2, 3000, 'worker-prefill', 'work_settled'
				UNION ALL SELECT 3, 3000, 'worker-prefill', 'disposition'
				UNION ALL SELECT 4, 8000, 'deliver-prefill', 'effect_done') AS a
			ORDER BY i, a.n`, nil},
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	for _, s := range stmts {
		if _, err := tx.ExecContext(ctx, s.sql, s.args...); err != nil {
			return fmt.Errorf("prefill %s: %w", s.table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("prefill: commit: %w", err)
	}
	// The server starts on a WAL it need not check point first.
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return fmt.Errorf("prefill: checkpoint: %w", err)
	}
	return nil
}

// prefillCell applies the migrations of the binary under test to a
// SQLite target's fresh store (hookledger migrate), then plants n events
// in it, and says how long that took and how large the store is.
func prefillCell(ctx context.Context, env *receiveEnv, storeURL string, n int) error {
	cfg := filepath.Join(env.dir, "prefill.yaml")
	if err := e2eConfig(cfg, storeURL, env.token, env.secret, "http://127.0.0.1:9", ""); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, env.hookledger, "migrate", "--config", cfg).CombinedOutput(); err != nil {
		return fmt.Errorf("prefill: hookledger migrate: %w\n%s", err, out)
	}
	path := strings.TrimPrefix(storeURL, "sqlite:")
	t0 := time.Now()
	if err := prefillSQLite(ctx, path, n, t0); err != nil {
		return err
	}
	fmt.Fprintf(env.stderr, "prefill: %d events planted in %.1f s; the store is %.0f MiB\n", n, time.Since(t0).Seconds(), fileMiB(path))
	return nil
}

// fileMiB is the size of a file in MiB, or 0 when it cannot be read.
func fileMiB(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}

// planted reports whether an event id is one of a prefilled history's.
func planted(eventID string) bool { return strings.HasPrefix(eventID, prefillPrefix) }
