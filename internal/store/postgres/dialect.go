package postgres

import (
	"strconv"

	"github.com/hookledger/hookledger/internal/store"
)

// postgresDialect spells the statements written once in package store:
// they are written in PostgreSQL's parameters, and its planner picks a
// partial index from the predicate each query repeats, so it needs no
// hint. TestSignalPlans pins the plans on a store large enough for the
// planner to care.
var postgresDialect = store.Dialect{Param: func(n int) string { return "$" + strconv.Itoa(n) }}
