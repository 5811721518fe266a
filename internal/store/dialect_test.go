package store

import (
	"strconv"
	"testing"
)

// A shared statement is spelt per database: parameters renumbered, index
// hints written or dropped, and a $ in a string literal left alone.
func TestDialectBind(t *testing.T) {
	q := `SELECT '$.a', x FROM t {index t_x} WHERE a = $1 AND b = $12`
	lite := Dialect{Param: func(n int) string { return "?" + strconv.Itoa(n) },
		IndexedBy: func(i string) string { return "INDEXED BY " + i }}
	pg := Dialect{Param: func(n int) string { return "$" + strconv.Itoa(n) }}
	for _, c := range []struct {
		d    Dialect
		want string
	}{
		{lite, `SELECT '$.a', x FROM t INDEXED BY t_x WHERE a = ?1 AND b = ?12`},
		{pg, `SELECT '$.a', x FROM t  WHERE a = $1 AND b = $12`},
	} {
		if got := c.d.Bind(q); got != c.want {
			t.Errorf("Bind:\n got %s\nwant %s", got, c.want)
		}
	}
	stmts := SignalSQL(lite)
	for _, q := range SignalQueries() {
		if stmts[q] == "" {
			t.Errorf("signal query %s has no statement", q)
		}
	}
}
