package config

import (
	"strings"

	"github.com/hookledger/hookledger/internal/expr"
	"github.com/hookledger/hookledger/internal/outbound"
)

// The checks below refuse at load what the request builder would refuse
// on every call (outbound.CheckPath, outbound.CheckHeader): a mistake in
// the config is found with its line before any effect depends on it.

type addFunc func(path, format string, args ...any)

// checkPathExpr checks a request path expression. A "?" or "#" written
// into the path (`"/deals/" + entity + "?idProperty=x"`) is refused even
// when the rest comes from the payload: the query belongs in query:, which
// escapes it. A constant path gets every check of the builder.
func checkPathExpr(add addFunc, at, what string, prog *expr.Program) {
	if prog == nil {
		return
	}
	for _, lit := range prog.ConcatLiterals() {
		if i := strings.IndexAny(lit, "?#"); i >= 0 {
			add(at, "%s: %q has %q: a path carries no query string or fragment; pass query parameters in query: (a map whose keys and values are escaped), and wrap payload values in the path in pathEscape()", what, lit, lit[i])
			return
		}
		if strings.Contains(lit, `\`) || strings.ContainsFunc(lit, isControl) {
			add(at, "%s: %q has a backslash or a control character, which the request builder refuses", what, lit)
			return
		}
	}
	if prog.Constant() {
		v, err := prog.EvalString(nil)
		if err == nil {
			err = outbound.CheckPath(v)
		}
		if err != nil {
			add(at, "%s: %v", what, err)
		}
	}
}

// checkQueryExpr evaluates a constant query map, so a wrong shape (a
// string "a=1" instead of {"a": "1"}) stops the load.
func checkQueryExpr(add addFunc, at, what string, prog *expr.Program) {
	if prog == nil || !prog.Constant() {
		return
	}
	if _, err := prog.EvalQuery(nil); err != nil {
		add(at, "%s: %v", what, err)
	}
}

// checkHeaderExpr checks a header whose value is an expression: the name,
// the literal parts of the value and, when constant, the value itself.
func checkHeaderExpr(add addFunc, at, what, name string, prog *expr.Program) {
	if !outbound.ValidHeaderName(name) {
		add(at, "%s: %q is not a valid header name", what, name)
		return
	}
	if prog == nil {
		return
	}
	lits := prog.ConcatLiterals()
	if prog.Constant() {
		if v, err := prog.EvalString(nil); err == nil {
			lits = append(lits, v)
		}
	}
	for _, lit := range lits {
		if err := outbound.CheckHeaderValue(lit); err != nil {
			add(at, "%s: %v", what, err)
			return
		}
	}
}

// checkStaticHeader checks a header configured as plain text. The value
// is often a secret (a token from ${VAR}), so it is never repeated; a
// trailing newline from the variable's source is the usual culprit.
func checkStaticHeader(add addFunc, at, what, name, value string) {
	if name != "" && !outbound.ValidHeaderName(name) {
		add(at, "%s: %q is not a valid header name", what, name)
	}
	if err := outbound.CheckHeaderValue(value); err != nil {
		add(at, "%s: the value contains a control character such as CR or LF (a trailing newline in its environment variable?), which would start another header", what)
	}
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }
