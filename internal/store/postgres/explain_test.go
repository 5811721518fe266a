package postgres

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// explain runs EXPLAIN (opts) of sql in a transaction that it rolls back,
// so that a write explained with ANALYZE changes nothing, and returns the
// plan, the rows its filters and join filters removed in all and the top node's actual row
// count (-1 without ANALYZE).
func explain(t *testing.T, pool *pgxpool.Pool, opts, sql string, args ...any) (plan string, removed, returned int) {
	t.Helper()
	return explainWith(t, pool, "", opts, sql, args...)
}

// explainWith is explain after setup (when not empty) has run in the same
// transaction: the settings a statement is run under, for one.
func explainWith(t *testing.T, pool *pgxpool.Pool, setup, opts, sql string, args ...any) (plan string, removed, returned int) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
	if setup != "" {
		if _, err := tx.Exec(ctx, setup); err != nil {
			t.Fatalf("%v\n%s", err, setup)
		}
	}
	rows, err := tx.Query(ctx, `EXPLAIN `+opts+` `+sql, args...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	return readPlan(t, rows)
}

// readPlan reads EXPLAIN's lines: the plan, the rows its filters and join
// filters removed in all, and the top node's actual row count (-1 without
// ANALYZE).
func readPlan(t *testing.T, rows pgx.Rows) (plan string, removed, returned int) {
	t.Helper()
	defer rows.Close()
	var b strings.Builder
	returned = -1
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		b.WriteString(line + "\n")
		for _, filter := range []string{"Rows Removed by Filter: ", "Rows Removed by Join Filter: "} {
			if _, v, ok := strings.Cut(line, filter); ok {
				k, _ := strconv.Atoi(strings.TrimSpace(v))
				removed += k
			}
		}
		if _, v, ok := strings.Cut(line, "(actual rows="); ok && returned < 0 {
			returned, _ = strconv.Atoi(strings.Fields(v)[0])
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String(), removed, returned
}

// genericPlan prepares sql as plan_me and explains execute (an EXECUTE
// plan_me(...) with literal arguments) under force_generic_plan: the plan
// PostgreSQL keeps for a prepared statement, made without the arguments.
// A setup that is not empty (pipePlanSQL: the settings of a pipe) runs
// first, in a transaction with the rest.
func genericPlan(t *testing.T, pool *pgxpool.Pool, setup, sql, execute string) string {
	t.Helper()
	qs := []string{`SET plan_cache_mode = force_generic_plan`}
	if setup != "" {
		qs = append(qs, `BEGIN`, setup)
	}
	conn := preparedSession(t, pool, sql, qs...)
	defer conn.Close(context.Background()) //nolint:errcheck // a throwaway session
	rows, err := conn.Query(context.Background(), `EXPLAIN (COSTS OFF) `+execute)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, execute)
	}
	plan, _, _ := readPlan(t, rows)
	return plan
}

// preparedSession takes a session of its own out of pool (its prepared
// statement and settings end with it: the caller closes it), runs setup
// in it and prepares sql as plan_me.
func preparedSession(t *testing.T, pool *pgxpool.Pool, sql string, setup ...string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn := pc.Hijack()
	for _, q := range append(setup, `PREPARE plan_me AS `+sql) {
		if _, err := conn.Exec(ctx, q); err != nil {
			conn.Close(ctx) //nolint:errcheck // a throwaway session
			t.Fatalf("%v\n%s", err, q)
		}
	}
	return conn
}

// explainGeneric is explainWith for the plan a pipelined transaction runs:
// sql prepared, setup (pipePlanSQL or one that extends it) run first in
// the same transaction, and EXPLAIN (opts) EXECUTE with args, so that the
// plan is the generic one made under the pipe's settings. Its own session
// ends with it, and with it the prepared statement.
func explainGeneric(t *testing.T, pool *pgxpool.Pool, setup, opts, sql string, args ...any) (plan string, removed, returned int) {
	t.Helper()
	ctx := context.Background()
	conn := preparedSession(t, pool, sql, `BEGIN`, setup)
	// The transaction is rolled back before the session closes: a closed
	// session's backend ends its transaction only when it gets round to
	// it, and until then the rows an explained UPDATE locked are skipped
	// (SKIP LOCKED) by the next statement explained, which then finds
	// nothing (TestPipelinePlans failed so about one run in five).
	defer func() {
		_, _ = conn.Exec(ctx, `ROLLBACK`)
		_ = conn.Close(ctx)
	}()
	// EXECUTE takes its arguments as SQL: each one is written as a literal
	// of the type PostgreSQL inferred for its parameter.
	var types []string
	if err := conn.QueryRow(ctx, `SELECT parameter_types::text[] FROM pg_prepared_statements WHERE name = 'plan_me'`).Scan(&types); err != nil {
		t.Fatal(err)
	}
	if len(types) != len(args) {
		t.Fatalf("the statement takes %d parameters, given %d:\n%s", len(types), len(args), sql)
	}
	literals := make([]string, len(args))
	for i, a := range args {
		var lit string
		if err := conn.QueryRow(ctx, `SELECT quote_nullable($1::`+types[i]+`)`, a).Scan(&lit); err != nil {
			t.Fatalf("argument %d as %s: %v", i+1, types[i], err)
		}
		literals[i] = lit + "::" + types[i]
	}
	execute := `EXECUTE plan_me`
	if len(literals) > 0 { // a statement without parameters takes no parentheses
		execute += `(` + strings.Join(literals, ", ") + `)`
	}
	rows, err := conn.Query(ctx, `EXPLAIN `+opts+` `+execute)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
	return readPlan(t, rows)
}

// seedAppliedEvents adds events with pks from..to, received at at, each
// routed and applied: event_id 'e' and entity 'o' followed by the pk, as
// the plan tests' effects name them.
func seedAppliedEvents(t *testing.T, pool *pgxpool.Pool, at time.Time, from, to int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO events (pk, source, event_id, type, entity, account,
			received_at, deliveries, disposition, routed)
		OVERRIDING SYSTEM VALUE SELECT g, 'shop', 'e' || g, 'order.updated', 'o' || g, '', $1, 1, 'applied', true
		FROM generate_series($2::int, $3::int) g`, at, from, to); err != nil {
		t.Fatalf("seed events %d..%d: %v", from, to, err)
	}
}
