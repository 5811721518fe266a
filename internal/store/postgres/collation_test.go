package postgres

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
)

// TestTextInByteOrder: on a database whose locale sorts text the way
// people read it (ICU en-US, where "a" comes before "B"), the migrated
// schema still compares every text column in byte order, as SQLite does
// (0016_byte_order_text): no text column and no index is left on the
// database's collation, and stored keys sort "B" before "a".
func TestTextInByteOrder(t *testing.T) {
	pgtest.ServerURL(t)
	h := open(t, pgtest.NewDatabaseWith(t, "TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"))
	ctx := context.Background()

	// The premise: this database's own collation is not byte order.
	var linguistic bool
	if err := h.pool.QueryRow(ctx, `SELECT 'a'::text < 'B'::text`).Scan(&linguistic); err != nil {
		t.Fatal(err)
	}
	if !linguistic {
		t.Fatal("the test database compares 'a' and 'B' in byte order: the test proves nothing")
	}

	// strs runs q and returns its one text column.
	strs := func(q string) []string {
		t.Helper()
		rows, err := h.pool.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	// Every text column of every table, except the migrator's own.
	cols := strs(`SELECT c.relname || '.' || a.attname
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND c.relname <> 'schema_migrations'
			AND a.attnum > 0 AND NOT a.attisdropped AND a.atttypid = 'text'::regtype
			AND a.attcollation <> 'pg_catalog."C"'::regcollation
		ORDER BY 1`)
	if len(cols) > 0 {
		t.Errorf("text columns on the database's collation, not byte order: %v", cols)
	}
	var nText int
	if err := h.pool.QueryRow(ctx, `SELECT count(*) FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND a.attnum > 0
			AND NOT a.attisdropped AND a.atttypid = 'text'::regtype`).Scan(&nText); err != nil {
		t.Fatal(err)
	}
	if nText < 50 {
		t.Fatalf("found %d text columns: the catalogue query does not see the schema", nText)
	}

	// Every index key column that has a collation has byte order.
	idx := strs(`SELECT i.indexrelid::regclass::text
		FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		CROSS JOIN LATERAL unnest(i.indcollation::oid[]) AS k(coll)
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relname <> 'schema_migrations'
			AND k.coll <> 0 AND k.coll <> 'pg_catalog."C"'::regcollation
		ORDER BY 1`)
	if len(idx) > 0 {
		t.Errorf("indexes on the database's collation, not byte order: %v", idx)
	}

	// Stored keys sort in byte order.
	at := time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)
	var subs []*store.Submission
	for _, src := range []string{"a", "B", "b", "A"} {
		subs = append(subs, &store.Submission{Deliveries: []*store.DeliveryInput{{
			RequestID: "r-" + src, Source: src, EventID: "e1", Type: "order.updated", Entity: "o-" + src,
			ReceivedAt: at, Body: []byte(`{"n":1}`)}}})
	}
	if _, err := h.InboxCommit(ctx, &store.InboxCommitParams{Submissions: subs}); err != nil {
		t.Fatal(err)
	}
	if got, want := strs(`SELECT source FROM events ORDER BY source`), []string{"A", "B", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("sources in order %v, want byte order %v", got, want)
	}
}
