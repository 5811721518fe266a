package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// prefillPrefix starts the event ids of a store's planted history; the
// run's own webhooks are e2eIDPrefix's, so no planted event is ever
// taken for a duplicate of one sent.
const prefillPrefix = "evt_pre_"

// prefillBodyID is the event id written in the planted body's template;
// each row replaces it with its own.
const prefillBodyID = prefillPrefix + "X"

// prefillDialect is what the planting statements need to say differently
// on each driver: the rest of the statements is one text.
type prefillDialect struct {
	series   func(n int) string       // a FROM item that yields i = 1..n
	micros   func(expr string) string // a time column's value for expr microseconds since the epoch
	pad      string                   // i zero-padded to 20 digits (the flows' sort keys)
	json     func(expr string) string // a JSON column's value for the text expr
	blob     func(expr string) string // a bytes column's value for the text expr
	param    string                   // the one parameter, the body's template
	yes, no  string                   // the booleans
	override string                   // what lets a statement write an identity column's values
}

var (
	prefillSQLiteDialect = prefillDialect{
		series: sqliteSeries,
		micros: func(expr string) string { return expr },
		pad:    `printf('%020d', i)`,
		json:   func(expr string) string { return expr },
		blob:   func(expr string) string { return `CAST(` + expr + ` AS BLOB)` },
		param:  `?1`, yes: `1`, no: `0`,
	}
	prefillPostgresDialect = prefillDialect{
		series: postgresSeries,
		micros: func(expr string) string { return `('epoch'::timestamptz + (` + expr + `) * interval '1 microsecond')` },
		pad:    `lpad(i::text, 20, '0')`,
		json:   func(expr string) string { return `(` + expr + `)::jsonb` },
		blob:   func(expr string) string { return `convert_to(` + expr + `, 'UTF8')` },
		param:  `$1`, yes: `true`, no: `false`, override: ` OVERRIDING SYSTEM VALUE`,
	}
)

// prefillStatement is one table's planting statement; body reports that
// it takes the body's template as its one parameter.
type prefillStatement struct {
	table, sql string
	body       bool
}

// args is the statement's arguments.
func (s prefillStatement) args(body string) []any {
	if s.body {
		return []any{body}
	}
	return nil
}

// prefillStatements plants n events of the e2e flow's shape, each taken
// all the way through: the event and its delivery (a body of stripeBody's
// size, the template being the statements' one parameter), its work item
// settled, its entity at its revision, its effect done after one
// attempt, and the four audit rows a webhook writes, as the store itself
// writes them. The keys of each table are 1..n, and the first event is
// received at firstUS (microseconds since the epoch), one a millisecond.
// One INSERT ... SELECT per table, as the replay fixture writes its own
// (loadReplayFixture).
func prefillStatements(d prefillDialect, n int, firstUS int64) []prefillStatement {
	series := d.series(n)
	at := func(plusUS int) string { return d.micros(fmt.Sprintf("(%d + i * 1000 + %d)", firstUS, plusUS)) }
	id := `'` + prefillPrefix + `' || i`
	entity := `'in_` + prefillPrefix + `' || i`
	version := fmt.Sprintf(`'r' || ((%d + i * 1000) / 1000000)`, firstUS)
	key := `'invoices:' || ` + entity + ` || ':' || ` + version + ` || ':record_payment'`
	return []prefillStatement{
		{"events", `INSERT INTO events (pk, source, event_id, type, entity, account, occurred_at, received_at, deliveries, disposition, routed)` + d.override + `
			SELECT i, 'stripe', ` + id + `, 'invoice.paid', ` + entity + `, '', ` + at(0) + `, ` + at(0) + `, 1, 'applied', ` + d.yes + ` FROM ` + series, false},
		{"deliveries", `INSERT INTO deliveries (id, event_pk, request_id, batch_index, source, event_id, type, entity, account, occurred_at, received_at, headers, body)` + d.override + `
			SELECT i, i, 'req_pre_' || i, 0, 'stripe', ` + id + `, 'invoice.paid', ` + entity + `, '', ` + at(0) + `, ` + at(0) + `,
				` + d.json(`'{"Content-Type":"application/json; charset=utf-8","User-Agent":"Stripe/1.0 (+https://stripe.com/docs/webhooks)"}'`) + `,
				` + d.blob(`replace(`+d.param+`, '`+prefillBodyID+`', `+id+`)`) + ` FROM ` + series, true},
		{"work", `INSERT INTO work (id, flow, entity, event_pk, order_key, created_at, done_at, disposition, version_sort)` + d.override + `
			SELECT i, 'invoices', ` + entity + `, i, ` + d.pad + `, ` + at(1000) + `, ` + at(3000) + `, 'applied', ` + d.pad + ` FROM ` + series, false},
		{"entities", `INSERT INTO entities (flow, entity, version, version_sort, state, applied_event_pk, updated_at, pending,
				not_before, newest_key, settled_key, behind_since, claimed_at)
			SELECT 'invoices', ` + entity + `, ` + version + `, ` + d.pad + `, ` + d.json(`'{"amount":4900,"status":"paid"}'`) + `, i, ` + at(3000) + `, 0,
				` + at(1000) + `, ` + d.pad + `, ` + d.pad + `, ` + at(1000) + `, ` + at(2000) + ` FROM ` + series, false},
		{"effects", `INSERT INTO effects (id, episode_key, flow, entity, version, version_sort, effect, destination, state, request,
				source_event_pk, causation_id, hop, attempts, created_at, updated_at, destination_ref, last_response, calls, claimed_at)` + d.override + `
			SELECT i, ` + key + `, 'invoices', ` + entity + `, ` + version + `, ` + d.pad + `, 'record_payment', 'loopback', 'done',
				` + d.json(`'{"method":"POST","path":"/payments","body":{"amount":4900,"event":"' || `+id+` || '","invoice":"' || `+entity+` || '"}}'`) + `,
				i, 'stripe/' || ` + id + `, 1, 1, ` + at(3000) + `, ` + at(8000) + `, 'rec_' || ` + id + `,
				'{"id": "rec_' || ` + id + ` || '"}', 1, ` + at(3000) + ` FROM ` + series, false},
		{"effect_attempts", `INSERT INTO effect_attempts (id, effect_id, number, started_at, duration_us, status, class, error, response,
				retry_after, retry_after_unit, wait_us, reconcile)` + d.override + `
			SELECT i, i, 1, ` + at(7000) + `, 750, 200, '', '', '{"id": "rec_' || ` + id + ` || '"}', '', '', 0, ` + d.no + ` FROM ` + series, false},
		{"audit", `INSERT INTO audit (at, actor, action, source, event_id, entity, detail)
			SELECT ` + d.micros(fmt.Sprintf("(%d + i * 1000 + a.d)", firstUS)) + `, a.actor, a.action, 'stripe', ` + id + `, ` + entity + `,
				CASE a.action WHEN 'effect_approved' THEN ` + key + `
					WHEN 'work_settled' THEN 'flow invoices entity ' || ` + entity + ` || ': applied ' || ` + version + `
					WHEN 'disposition' THEN 'accepted -> applied'
					ELSE ` + key + ` || ': submitting -> done after attempt 1' END
			FROM ` + series + ` CROSS JOIN (SELECT 1 AS n, 3000 AS d, 'worker-prefill' AS actor, 'effect_approved' AS action
				UNION ALL SELECT 2, 3000, 'worker-prefill', 'work_settled'
				UNION ALL SELECT 3, 3000, 'worker-prefill', 'disposition'
				UNION ALL SELECT 4, 8000, 'deliver-prefill', 'effect_done') AS a
			ORDER BY i, a.n`, false},
	}
}

// prefillFirst is when a history of n events, one a millisecond, begins
// so as to end an hour before start: the store's retention and the
// flows' deadlines take it as old, settled history.
func prefillFirst(n int, start time.Time) int64 {
	return start.Add(-time.Hour - time.Duration(n)*time.Millisecond).UnixMicro()
}

// prefillBody is the planted body's template.
func prefillBody(start time.Time) string {
	return string(stripeBody(prefillBodyID, "in_"+prefillBodyID, start.Add(-time.Hour)))
}

// prefillSQLite plants n events (prefillStatements) in a migrated SQLite
// store at path, in one transaction, and checkpoints the WAL so that the
// server starts on a store it need not checkpoint first. A pipeline
// measured on an empty store runs on b-trees a few pages deep that fit
// any cache; one with a history writes the same rows into indexes that
// many entries wide.
func prefillSQLite(ctx context.Context, path string, n int, start time.Time) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after Commit, a no-op
	body := prefillBody(start)
	for _, s := range prefillStatements(prefillSQLiteDialect, n, prefillFirst(n, start)) {
		if _, err := tx.ExecContext(ctx, s.sql, s.args(body)...); err != nil {
			return fmt.Errorf("prefill %s: %w", s.table, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("prefill: commit: %w", err)
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return fmt.Errorf("prefill: checkpoint: %w", err)
	}
	return nil
}

// prefillPostgres plants n events (prefillStatements) in a migrated
// PostgreSQL database, in one transaction; moves the identity columns'
// sequences past the planted keys, and analyzes the tables, as a store
// with that history would have been by then.
func prefillPostgres(ctx context.Context, url string, n int, start time.Time) error {
	conn, err := pgx.Connect(ctx, singleConnURL(url))
	if err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	defer conn.Close(ctx)
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		body := prefillBody(start)
		for _, s := range prefillStatements(prefillPostgresDialect, n, prefillFirst(n, start)) {
			if _, err := tx.Exec(ctx, s.sql, s.args(body)...); err != nil {
				return fmt.Errorf("prefill %s: %w", s.table, err)
			}
		}
		for _, c := range [][2]string{{"events", "pk"}, {"deliveries", "id"}, {"work", "id"}, {"effects", "id"}, {"effect_attempts", "id"}} {
			if _, err := tx.Exec(ctx, `SELECT setval(pg_get_serial_sequence($1, $2), $3)`, c[0], c[1], n); err != nil {
				return fmt.Errorf("prefill: sequence of %s.%s: %w", c[0], c[1], err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `ANALYZE events, deliveries, work, entities, effects, effect_attempts, audit`); err != nil {
		return fmt.Errorf("prefill: analyze: %w", err)
	}
	return nil
}

// prefillCell applies the migrations of the binary under test to a
// target's fresh store (hookledger migrate), then plants n events in it,
// and says how long that took.
func prefillCell(ctx context.Context, env *receiveEnv, driver, storeURL string, n int) error {
	cfg := filepath.Join(env.dir, "prefill.yaml")
	if err := e2eConfig(cfg, storeURL, env.token, env.secret, "http://127.0.0.1:9", "", ""); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, env.hookledger, "migrate", "--config", cfg).CombinedOutput(); err != nil {
		return fmt.Errorf("prefill: hookledger migrate: %w\n%s", err, out)
	}
	t0 := time.Now()
	size := ""
	if driver == "sqlite" {
		path := strings.TrimPrefix(storeURL, "sqlite:")
		if err := prefillSQLite(ctx, path, n, t0); err != nil {
			return err
		}
		size = fmt.Sprintf("; the store is %.0f MiB", fileMiB(path))
	} else if err := prefillPostgres(ctx, storeURL, n, t0); err != nil {
		return err
	}
	fmt.Fprintf(env.stderr, "prefill: %d events planted in %.1f s%s\n", n, time.Since(t0).Seconds(), size)
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

// runStamps is the stamps of the run's own events that the stage
// breakdown measures: neither a planted history's, whose stamps are
// made up and whose acknowledgements the run never saw, nor the warm-up's
// (warmSend).
func runStamps(rows []stampRow, warm int64) []stampRow {
	return slices.DeleteFunc(rows, func(r stampRow) bool { return planted(r.eventID) || warmSend(r.eventID, warm) })
}
