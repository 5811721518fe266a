package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// A settle writes its audit rows several to a statement; they must land
// whole and in the order the rules emitted them, across the statements a
// long group needs.
func TestAuditRowsKeepTheirOrder(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "audit.db"))
	at := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	const n = 2*auditRowsPerInsert + 3
	var as []*store.AuditInsertParams
	for i := range n {
		as = append(as, &store.AuditInsertParams{At: at.Add(time.Duration(n-i) * time.Second), Actor: "flow",
			Action: fmt.Sprintf("a%02d", i%5), Source: "shop", EventID: fmt.Sprintf("evt_%02d", i), Entity: "o1",
			Detail: fmt.Sprintf("row %02d", i)})
	}
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		if err := (txn{tx}).Audit(ctx, as[:1]...); err != nil {
			return err
		}
		return txn{tx}.Audit(ctx, as[1:]...)
	})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := s.reader.QueryContext(ctx, `SELECT at, actor, action, source, event_id, entity, detail FROM audit ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	i := 0
	for ; rows.Next(); i++ {
		var got store.AuditInsertParams
		var us int64
		if err := rows.Scan(&us, &got.Actor, &got.Action, &got.Source, &got.EventID, &got.Entity, &got.Detail); err != nil {
			t.Fatal(err)
		}
		got.At = time.UnixMicro(us).UTC()
		if i >= n {
			t.Fatalf("more than the %d audit rows written: %+v", n, got)
		}
		if want := *as[i]; got != want {
			t.Fatalf("audit row %d: %+v, want %+v", i, got, want)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if i != n {
		t.Fatalf("%d audit rows, want %d", i, n)
	}
}
