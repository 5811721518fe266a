package config

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/goccy/go-yaml/ast"
)

// envRef matches ${...} (and the escaped $${...}) on one line.
var envRef = regexp.MustCompile(`\$?\$\{[^}\n]*\}`)

const placeholderPrefix = "__hookledger_env_"

// protectEnvRefs replaces every ${...} in the raw text by a placeholder that
// is a plain YAML scalar, so that `secrets: [${SECRET}]` parses (braces are
// flow indicators in YAML) and the value is substituted after parsing:
// a secret containing YAML syntax (": ", "#", quotes) can then never change
// the structure of the document.
func protectEnvRefs(data []byte) ([]byte, []string) {
	var refs []string
	out := envRef.ReplaceAllFunc(data, func(m []byte) []byte {
		refs = append(refs, string(m))
		return []byte(placeholderPrefix + strconv.Itoa(len(refs)-1) + "__")
	})
	return out, refs
}

var placeholder = regexp.MustCompile(placeholderPrefix + `(\d+)__`)

// expandEnv replaces ${VAR} and ${VAR:-default} in every scalar value of the
// parsed file. "$${" writes a literal "${".
func expandEnv(path string, file *ast.File, refs []string, lookup func(string) (string, bool)) Errors {
	v := &envVisitor{path: path, refs: refs, lookup: lookup}
	for _, doc := range file.Docs {
		if doc.Body != nil {
			ast.Walk(v, doc.Body)
		}
	}
	return v.errs
}

type envVisitor struct {
	path   string
	refs   []string
	lookup func(string) (string, bool)
	errs   Errors
}

func (v *envVisitor) Visit(node ast.Node) ast.Visitor {
	var s *ast.StringNode
	switch n := node.(type) {
	case *ast.StringNode:
		s = n
	case *ast.LiteralNode:
		s = n.Value
	}
	if s == nil || !strings.Contains(s.Value, "${") && !strings.Contains(s.Value, placeholderPrefix) {
		return v
	}
	raw := placeholder.ReplaceAllStringFunc(s.Value, func(m string) string {
		i, _ := strconv.Atoi(placeholder.FindStringSubmatch(m)[1])
		return v.refs[i]
	})
	out, err := expand(raw, v.lookup)
	if err != nil {
		e := &Error{File: v.path, Msg: err.Error()}
		if tk := s.GetToken(); tk != nil && tk.Position != nil {
			e.Line, e.Col = tk.Position.Line, tk.Position.Column
		}
		v.errs = append(v.errs, e)
		return v
	}
	s.Value = out
	return v
}

// expand performs the substitution on one value.
func expand(s string, lookup func(string) (string, bool)) (string, error) {
	var b strings.Builder
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), nil
		}
		if i > 0 && s[i-1] == '$' {
			// "$${" is an escaped literal "${".
			b.WriteString(s[:i-1])
			b.WriteString("${")
			s = s[i+2:]
			continue
		}
		b.WriteString(s[:i])
		end := strings.IndexByte(s[i:], '}')
		if end < 0 {
			return "", fmt.Errorf("unterminated ${ in value: expected ${NAME} or ${NAME:-default}")
		}
		expr := s[i+2 : i+end]
		s = s[i+end+1:]
		name, def, hasDef := strings.Cut(expr, ":-")
		if !validEnvName(name) {
			return "", fmt.Errorf("invalid environment variable name %q in ${...}: use letters, digits and underscores", name)
		}
		val, ok := lookup(name)
		switch {
		case ok && (val != "" || !hasDef):
			b.WriteString(val)
		case hasDef:
			b.WriteString(def)
		default:
			return "", fmt.Errorf("environment variable %s is not set (referenced as ${%s}; set it, or write ${%s:-default})", name, name, name)
		}
	}
}

func validEnvName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
