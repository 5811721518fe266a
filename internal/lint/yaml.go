package lint

import (
	"fmt"
	"strings"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// readYAML reads an inventory written as a YAML list of flows, each a
// mapping from column name to value:
//
//   - flow_id: billing_to_crm
//     method: custom
//     retry_layers: sdk:1;worker:6   # or a list: [sdk:1, worker:6]
//
// The reading is strict: duplicate keys, anchors, aliases, tags and nested
// mappings are errors, and so is anything but a list at the top. A key left
// out of a flow is a blank cell, even when no flow has it: a YAML inventory
// has no header row that could lack a column, so a blank replay window or
// sender timeout is filled from the vendor catalogue as in a CSV file with
// the column left empty. sources and retry_layers may also be written as
// lists.
//
// As with readInventoryCSV, an error means the file is not an inventory at all;
// problems with single values are collected in Inventory.Problems.
func readYAML(data []byte, path string) (inv *Inventory, err error) {
	file, err := parseYAML(data)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var body ast.Node
	for _, doc := range file.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if body != nil {
			return nil, fmt.Errorf("read %s: line %d: a second YAML document; expected one list of flows", path, line(doc.Body))
		}
		body = doc.Body
	}
	inv = &Inventory{Path: path}
	if body == nil {
		return nil, fmt.Errorf("read %s: the file is empty; expected a list of flows", path)
	}
	seq, ok := body.(*ast.SequenceNode)
	if !ok {
		return nil, fmt.Errorf("read %s: line %d: expected a list of flows (- flow_id: ...), found %s", path, line(body), describe(body))
	}
	rr := newRowReader(inv)
	columns := map[string]bool{}
	for _, item := range seq.Values {
		var values []*ast.MappingValueNode
		switch m := item.(type) {
		case *ast.MappingNode:
			values = m.Values
		case *ast.MappingValueNode:
			// The parser may hand a one-key mapping over bare.
			values = []*ast.MappingValueNode{m}
		default:
			rr.problem(line(item), "", "expected a flow (a mapping of column: value), found %s; the item is not checked", describe(item))
			continue
		}
		f := Flow{Line: line(item)}
		for _, mv := range values {
			name, ok := scalarText(mv.Key)
			name = strings.ToLower(strings.TrimSpace(name))
			if !ok || name == "" {
				rr.problem(line(mv.Key), "", "expected a column name, found %s", describe(mv.Key))
				continue
			}
			if !columns[name] {
				columns[name] = true
				inv.Columns = append(inv.Columns, name)
				inv.present |= columnBit(name)
			}
			value, ok := cellText(mv.Value, name)
			if !ok {
				rr.problem(line(mv.Value), name, "expected a single value, found %s", describe(mv.Value))
				f.invalid |= columnBit(name)
				continue
			}
			rr.set(&f, name, cell{line: line(mv.Value), value: value})
		}
		rr.finish(f)
	}
	for _, name := range knownColumns() {
		inv.present |= columnBit(name)
	}
	return inv, nil
}

// parseYAML parses with the strict defaults (duplicate keys are errors) and
// turns a panic inside the parser into an error: the inventory is untrusted
// input, and a parser bug must not take the command down.
func parseYAML(data []byte) (file *ast.File, err error) {
	defer func() {
		if r := recover(); r != nil {
			file, err = nil, fmt.Errorf("the YAML parser failed on this input: %v", r)
		}
	}()
	file, err = parser.ParseBytes(data, 0)
	if err != nil {
		return nil, yamlError{err}
	}
	return file, nil
}

// yamlError prints a parser error on one line ("[2:3] mapping key ...
// already defined at [1:3]") instead of the multi-line source excerpt the
// parser's own Error gives.
type yamlError struct{ err error }

func (e yamlError) Error() string { return yaml.FormatError(e.err, false, false) }
func (e yamlError) Unwrap() error { return e.err }

// cellText returns the text of a value. Lists are allowed for the two
// list-valued columns and are joined with ';'.
func cellText(n ast.Node, column string) (string, bool) {
	if seq, ok := n.(*ast.SequenceNode); ok {
		if column != colSources && column != colRetryLayers {
			return "", false
		}
		parts := make([]string, 0, len(seq.Values))
		for _, v := range seq.Values {
			s, ok := scalarText(v)
			if !ok {
				return "", false
			}
			parts = append(parts, s)
		}
		return strings.Join(parts, ";"), true
	}
	return scalarText(n)
}

// scalarText returns a scalar's text as written, so that `yes`, `30.0` and
// `0010` reach the column parsers unchanged by YAML's own typing.
func scalarText(n ast.Node) (string, bool) {
	switch v := n.(type) {
	case nil, *ast.NullNode:
		return "", true
	case *ast.StringNode:
		return v.Value, true
	case *ast.LiteralNode:
		if v.Value == nil {
			return "", true
		}
		return v.Value.Value, true
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		if tk := n.GetToken(); tk != nil {
			return tk.Value, true
		}
	}
	return "", false
}

func line(n ast.Node) int {
	if n == nil {
		return 0
	}
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return tk.Position.Line
	}
	return 0
}

func describe(n ast.Node) string {
	switch n.(type) {
	case *ast.SequenceNode:
		return "a list"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.AnchorNode:
		return "an anchor (not supported)"
	case *ast.AliasNode:
		return "an alias (not supported)"
	case *ast.TagNode:
		return "a tagged value (not supported)"
	case nil:
		return "nothing"
	}
	return fmt.Sprintf("%q", strings.TrimSpace(n.String()))
}
