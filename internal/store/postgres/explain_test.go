package postgres

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// explain runs EXPLAIN (opts) of sql in a transaction that it rolls back,
// so that a write explained with ANALYZE changes nothing, and returns the
// plan, the rows its filters and join filters removed in all and the top node's actual row
// count (-1 without ANALYZE).
func explain(t *testing.T, pool *pgxpool.Pool, opts, sql string, args ...any) (plan string, removed, returned int) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // nothing to keep
	rows, err := tx.Query(ctx, `EXPLAIN `+opts+` `+sql, args...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, sql)
	}
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
