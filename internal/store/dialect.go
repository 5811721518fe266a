package store

import (
	"regexp"
	"strconv"
)

// A statement both databases run alike is written once, here, in
// PostgreSQL's spelling with two marks a driver's Dialect fills in:
// positional parameters $1, $2, ... and index hints {index name}. The
// drivers differ only there: SQLite numbers its parameters ?1, ?2 and,
// planning without statistics, is told which index to read (INDEXED BY);
// PostgreSQL's planner picks the index whose predicate the query repeats.

// Dialect is how a driver's database spells the marks of a shared
// statement.
type Dialect struct {
	// Param is the n-th positional parameter, counted from 1.
	Param func(n int) string
	// IndexedBy is the hint that makes a table be read by the named
	// index, written after the table (and its alias); "" leaves the
	// choice to the planner.
	IndexedBy func(index string) string
}

// dialectMarkRE matches the marks of a shared statement: a parameter
// ($ and digits; a $ inside a string literal, as in a JSON path '$.a',
// is never followed by one) and an index hint.
var dialectMarkRE = regexp.MustCompile(`\$([0-9]+)|\{index ([a-z_0-9]+)\}`)

// Bind spells the shared statement q in d.
func (d Dialect) Bind(q string) string {
	return dialectMarkRE.ReplaceAllStringFunc(q, func(m string) string {
		sub := dialectMarkRE.FindStringSubmatch(m)
		if sub[1] != "" {
			n, _ := strconv.Atoi(sub[1])
			return d.Param(n)
		}
		if d.IndexedBy == nil {
			return ""
		}
		return d.IndexedBy(sub[2])
	})
}
