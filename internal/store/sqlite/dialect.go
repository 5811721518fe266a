package sqlite

import (
	"strconv"

	"github.com/hookledger/hookledger/internal/store"
)

// sqliteDialect spells the statements written once in package store:
// parameters ?1, ?2, and the index each signal query reads, named with
// INDEXED BY because SQLite plans without statistics (see
// store.SignalSQL). TestSignalPlans pins the plans.
var sqliteDialect = store.Dialect{
	Param:     func(n int) string { return "?" + strconv.Itoa(n) },
	IndexedBy: func(index string) string { return "INDEXED BY " + index },
}
