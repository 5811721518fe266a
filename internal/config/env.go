package config

import (
	"errors"
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
// parsed file. "$${" writes a literal "${". In operator mode a missing
// variable in a secret-bearing field leaves that field empty and is
// recorded in refs.unresolved instead of being an error.
func expandEnv(path string, file *ast.File, refs []string, lookup func(string) (string, bool), operator bool) (*secretRefs, Errors) {
	v := &envVisitor{path: path, refs: refs, lookup: lookup, operator: operator, secrets: &secretRefs{}}
	for _, doc := range file.Docs {
		if doc.Body != nil {
			ast.Walk(v, doc.Body)
		}
	}
	return v.secrets, v.errs
}

// SecretRef names a secret-bearing field by its place in the file and the
// environment variable it refers to; never by its value.
type SecretRef struct {
	// Field is the field's path, such as sources[0].secrets[0] or
	// admin.token.
	Field string
	// Var is the environment variable the field refers to.
	Var  string
	Line int
}

// secretRefs collects what expansion learnt about secret-bearing fields.
type secretRefs struct {
	// defaulted are fields whose value came from a ${VAR:-default}
	// default: the quick-start's public demo secrets.
	defaulted []SecretRef
	// unresolved are fields left empty by an operator load because their
	// variable is not set; yamlPath keeps the "$." form for validation.
	unresolved []unresolvedRef
}

type unresolvedRef struct {
	SecretRef
	yamlPath string
}

// secretFields matches the YAML paths of the fields that hold secrets:
// signing secrets, the admin token, destination and source API
// credentials, and the notification URL (a Slack-style webhook URL is
// itself a credential).
var secretFields = regexp.MustCompile(`^\$\.(` +
	`sources\[\d+\]\.secrets(\[\d+\])?` +
	`|sources\[\d+\]\.api\.(bearer_token|headers\..+)` +
	`|admin\.token` +
	`|destinations\[\d+\]\.auth\.(bearer|basic\.user|basic\.password|header\.value)` +
	`|destinations\[\d+\]\.signing\.secrets(\[\d+\])?` +
	`|notifications\.webhook_url` +
	`)$`)

// isSecretField reports whether a YAML path such as
// "$.sources[0].secrets[0]" names a secret-bearing field.
func isSecretField(yamlPath string) bool { return secretFields.MatchString(yamlPath) }

type envVisitor struct {
	path     string
	refs     []string
	lookup   func(string) (string, bool)
	operator bool
	secrets  *secretRefs
	errs     Errors
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
	line := 0
	if tk := s.GetToken(); tk != nil && tk.Position != nil {
		line = tk.Position.Line
	}
	yamlPath := node.GetPath()
	secret := isSecretField(yamlPath)
	field := strings.TrimPrefix(yamlPath, "$.")
	out, defaulted, err := expand(raw, v.lookup)
	var missing *missingVarError
	if err != nil && v.operator && secret && errors.As(err, &missing) {
		// Operator verbs never verify a signature nor call a destination:
		// an unset secret is not needed, so it stays empty.
		s.Value = ""
		v.secrets.unresolved = append(v.secrets.unresolved, unresolvedRef{SecretRef: SecretRef{Field: field, Var: missing.name, Line: line}, yamlPath: yamlPath})
		return v
	}
	if err != nil {
		e := &Error{File: v.path, Msg: err.Error()}
		if tk := s.GetToken(); tk != nil && tk.Position != nil {
			e.Line, e.Col = tk.Position.Line, tk.Position.Column
		}
		v.errs = append(v.errs, e)
		return v
	}
	if secret {
		for _, name := range defaulted {
			v.secrets.defaulted = append(v.secrets.defaulted, SecretRef{Field: field, Var: name, Line: line})
		}
	}
	s.Value = out
	return v
}

// missingVarError is a ${VAR} without default whose variable is not set.
type missingVarError struct{ name string }

func (e *missingVarError) Error() string {
	return fmt.Sprintf("environment variable %s is not set (referenced as ${%s}; set it, or write ${%s:-default})", e.name, e.name, e.name)
}

// expand performs the substitution on one value and names the variables
// whose ${VAR:-default} default was used.
func expand(s string, lookup func(string) (string, bool)) (string, []string, error) {
	var b strings.Builder
	var defaulted []string
	for {
		i := strings.Index(s, "${")
		if i < 0 {
			b.WriteString(s)
			return b.String(), defaulted, nil
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
			return "", nil, fmt.Errorf("unterminated ${ in value: expected ${NAME} or ${NAME:-default}")
		}
		expr := s[i+2 : i+end]
		s = s[i+end+1:]
		name, def, hasDef := strings.Cut(expr, ":-")
		if !validEnvName(name) {
			return "", nil, fmt.Errorf("invalid environment variable name %q in ${...}: use letters, digits and underscores", name)
		}
		val, ok := lookup(name)
		switch {
		case ok && (val != "" || !hasDef):
			b.WriteString(val)
		case hasDef:
			b.WriteString(def)
			if def != "" {
				// An empty default switches an optional field off; only
				// a value someone wrote into the file is a shared secret.
				defaulted = append(defaulted, name)
			}
		default:
			return "", nil, &missingVarError{name: name}
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
