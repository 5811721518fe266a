package sqlite

import (
	"context"
	"errors"
	"math/bits"
	"strconv"

	"github.com/hookledger/hookledger/internal/store"
)

// limitSQL is a LIMIT clause that lets at least n rows through (n clamped
// as store.ClampLimit does), written as a literal rounded up to a power of
// two; the caller stops reading at n (eachN).
//
// Why not LIMIT ?: SQLite's planner weighs the value bound to a LIMIT, so
// it compiles the statement again whenever that value changes. The claims'
// limits follow a worker's free slots and change from one claim to the
// next, and the entity and effect claims were parsed and planned on
// nearly every call: about 7 % of the server's CPU at 800 webhooks/s,
// all of it on the one writer. A literal keeps one compiled statement per
// power of two, at most eleven per query.
func limitSQL(n int) string {
	n = store.ClampLimit(n)
	return " LIMIT " + strconv.Itoa(1<<bits.Len(uint(n-1)))
}

// errEnough ends eachN's scan once it has its rows.
var errEnough = errors.New("enough rows")

// eachN is each for at most n rows (clamped as limitSQL clamps them), of
// a query whose LIMIT is limitSQL(n).
func (a txn) eachN(ctx context.Context, q string, args []any, n int, scan func(sc scanner) error) error {
	n = store.ClampLimit(n)
	read := 0
	err := a.each(ctx, q, args, func(sc scanner) error {
		if read == n {
			return errEnough
		}
		read++
		return scan(sc)
	})
	if errors.Is(err, errEnough) {
		return nil
	}
	return err
}
