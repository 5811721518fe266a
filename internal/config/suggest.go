package config

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"

	"github.com/hookledger/hookledger/internal/suggest"
)

// keySuggestion is `did you mean "sources"?` for an unknown key that is a
// slip away from a key valid at its place in the file ("" when err is
// another error or no key is near). The valid keys are read from the
// yaml tags of the Go type the key's mapping decodes into, so the
// suggestion follows the structs.
func keySuggestion(body ast.Node, err error) string {
	var ufe *yaml.UnknownFieldError
	if !errors.As(err, &ufe) || ufe.Token == nil || ufe.Token.Position == nil {
		return ""
	}
	path, key, ok := keyPath(body, ufe.Token.Position, nil)
	if !ok {
		return ""
	}
	t := reflect.TypeOf(Config{})
	for _, seg := range path {
		if t = stepType(t, seg); t == nil {
			return ""
		}
	}
	near, ok := suggest.Nearest(key, yamlKeys(t))
	if !ok {
		return ""
	}
	return fmt.Sprintf("did you mean %q?", near)
}

// keyPath finds the key at pos below n: the keys and sequence steps ("[]")
// leading to its mapping, and the key itself.
func keyPath(n ast.Node, pos *token.Position, path []string) ([]string, string, bool) {
	switch n := n.(type) {
	case *ast.MappingNode:
		for _, mv := range n.Values {
			if p, k, ok := keyPath(mv, pos, path); ok {
				return p, k, true
			}
		}
	case *ast.MappingValueNode:
		key := n.Key.GetToken()
		if key != nil && key.Position != nil && key.Position.Line == pos.Line && key.Position.Column == pos.Column {
			return path, key.Value, true
		}
		if key != nil {
			return keyPath(n.Value, pos, append(path[:len(path):len(path)], key.Value))
		}
	case *ast.SequenceNode:
		for _, v := range n.Values {
			if p, k, ok := keyPath(v, pos, append(path[:len(path):len(path)], "[]")); ok {
				return p, k, true
			}
		}
	}
	return nil, "", false
}

// stepType is the type a value at key seg (or a sequence item, "[]") of
// a value of type t decodes into; nil when t has no such place.
func stepType(t reflect.Type, seg string) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if seg == "[]" {
			return t.Elem()
		}
	case reflect.Map:
		if seg != "[]" {
			return t.Elem()
		}
	case reflect.Struct:
		if f, ok := fieldByKey(t, seg); ok {
			return f.Type
		}
	}
	return nil
}

// fieldByKey finds the field of struct t that key decodes into, looking
// into inline fields.
func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline := yamlName(f)
		switch {
		case inline:
			if g, ok := fieldByKey(derefStruct(f.Type), key); ok {
				return g, true
			}
		case name == key:
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// yamlKeys lists the keys a mapping decoded into t takes.
func yamlKeys(t reflect.Type) []string {
	t = derefStruct(t)
	if t.Kind() != reflect.Struct {
		return nil
	}
	var keys []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, inline := yamlName(f)
		switch {
		case inline:
			keys = append(keys, yamlKeys(f.Type)...)
		case name != "":
			keys = append(keys, name)
		}
	}
	return keys
}

// yamlName is the key of a field as the decoder reads its tag ("" for a
// field the file cannot set), and whether it is inline.
func yamlName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	tag := f.Tag.Get("yaml")
	name, opts, _ := strings.Cut(tag, ",")
	if strings.Contains(","+opts+",", ",inline,") {
		return "", true
	}
	switch name {
	case "-":
		return "", false
	case "":
		return strings.ToLower(f.Name), false
	}
	return name, false
}

func derefStruct(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}
