package lint

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"
)

// readInventoryCSV reads an inventory with a header row. It returns an error only
// when the file cannot be read as an inventory at all (no header, a broken
// header, no flow_id column); bad values, duplicate flows and missing
// columns are collected in Inventory.Problems so that the other rows can
// still be checked.
func readInventoryCSV(r io.Reader, path string) (*Inventory, error) {
	br := bufio.NewReader(r)
	// Spreadsheet exports often start with a UTF-8 byte order mark, which
	// would otherwise become part of the first column's name.
	if b, err := br.Peek(3); err == nil && string(b) == "\xef\xbb\xbf" {
		_, _ = br.Discard(3)
	}
	cr := csv.NewReader(br)
	cr.ReuseRecord = true
	cr.FieldsPerRecord = -1 // checked below, so that the message names the header's width

	inv := &Inventory{Path: path}
	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: the file is empty; expected a header row naming the columns", path)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: header: %w", path, err)
	}
	names := make([]string, len(header))
	bits := make([]column, len(header))
	seen := map[string]bool{}
	for i, h := range header {
		name := strings.ToLower(strings.TrimSpace(h))
		if name == "" {
			return nil, fmt.Errorf("read %s: header: column %d has no name", path, i+1)
		}
		if seen[name] {
			return nil, fmt.Errorf("read %s: header: column %q appears twice", path, name)
		}
		seen[name] = true
		names[i] = name
		bits[i] = columnBit(name)
		inv.present |= bits[i]
	}
	inv.Columns = names
	if inv.present&cFlowID == 0 {
		return nil, fmt.Errorf("read %s: header: no %s column; every flow needs a unique flow_id", path, colFlowID)
	}

	rr := newRowReader(inv)
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// After a quoting error encoding/csv cannot tell where the
			// next row starts, so the rest of the file is not trusted.
			var pe *csv.ParseError
			line := 0
			if errors.As(err, &pe) {
				line, err = pe.Line, pe.Err
			}
			rr.problem(line, "", "%v; the rows from here on were not read", err)
			break
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != len(names) {
			rr.problem(line, "", "row has %d fields, the header has %d; the row is not checked", len(rec), len(names))
			continue
		}
		if blankRecord(rec) {
			continue
		}
		f := Flow{Line: line}
		for i, v := range rec {
			if bits[i] == 0 {
				if f.Extra == nil {
					f.Extra = make(map[string]string, len(rec)-i)
				}
				f.Extra[names[i]] = v
				continue
			}
			rowLine, _ := cr.FieldPos(i)
			rr.set(&f, names[i], cell{line: rowLine, value: v})
		}
		rr.finish(f)
	}
	inv.reportMissingColumns()
	return inv, nil
}

func blankRecord(rec []string) bool {
	for _, v := range rec {
		if strings.TrimSpace(v) != "" {
			return false
		}
	}
	return true
}
