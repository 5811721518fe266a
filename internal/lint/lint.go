// Package lint checks an inventory of integration flows for designs that
// double-bill or lose events: effects without an idempotency key, keys built
// from attempt or arrival data, ledgers kept for less time than events can
// come back, nested retries that multiply load, Retry-After read in the
// wrong unit and receivers too slow for their sender's timeout.
//
// An inventory is a CSV file with a header row or a YAML list of flows
// (ReadFile reads either). Check runs every rule on every flow and returns
// a Report that the Write functions render as text, JSON, SARIF or Markdown.
// The rules and their wording follow the delivery-reliability rule set
// (IP01-IP03, RT01-RT02, WH01); docs/lint.md describes them with examples.
package lint

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hookledger/hookledger/internal/senderkind"
)

// Level is the outcome of one rule for one flow.
type Level string

// Levels, most severe first.
const (
	fail Level = "FAIL"
	warn Level = "WARN"
	pass Level = "PASS"
)

// Finding is the outcome of one rule for one flow.
type Finding struct {
	Flow    string `json:"flow"`
	Rule    string `json:"rule"`
	Level   Level  `json:"level"`
	Message string `json:"message"`
	// Line is the inventory line of the flow, 0 when it has none.
	Line int `json:"line,omitempty"`
}

// Summary counts findings per level.
type Summary struct {
	Fail int `json:"fail"`
	Warn int `json:"warn"`
	Pass int `json:"pass"`
}

// Report is the result of checking one inventory.
type Report struct {
	// Path is the inventory file, as given; empty for flows that do not
	// come from a file.
	Path     string
	Findings []Finding
	Summary  Summary
	// Problems are the input errors met while reading the inventory.
	Problems []Problem
}

// Check runs every rule on every flow of the inventory.
//
// A rule produces one finding per flow it applies to: FAIL or WARN when one
// of its clauses fires (FAIL wins), PASS when it applies and none fires.
// A rule that does not apply to a flow (WH01 on a flow without an inbound
// webhook, RT02 on an event_pipeline flow, IP01 on a flow without effects,
// IP02 without a key) produces no finding, so the PASS count is the number
// of checks that were made and held. A rule is skipped for a flow whose
// cells it needs did not parse, and for every flow when the file lacks a
// column it needs; both are reported as Problems instead.
func Check(inv *Inventory) *Report {
	rep := &Report{Path: inv.Path, Problems: append([]Problem(nil), inv.Problems...)}
	rep.Findings = check(inv.Flows, inv.present, rep.Findings)
	rep.Summary = summarize(rep.Findings)
	return rep
}

// CheckFlows lints flows that do not come from an inventory file, such as
// the flows the engine derives from its own configuration; every column is
// taken as present and every value as valid.
func CheckFlows(flows []Flow) *Report {
	rep := &Report{}
	rep.Findings = check(flows, allColumns, nil)
	rep.Summary = summarize(rep.Findings)
	return rep
}

func check(flows []Flow, present column, out []Finding) []Finding {
	rules := allRules()
	env := &checkEnv{vendors: senderkind.Builtin().Index(), hasSource: present&cSources != 0}
	if out == nil {
		// Most flows get four to six findings; sizing once avoids
		// regrowing a slice of hundreds of thousands of findings.
		out = make([]Finding, 0, len(flows)*4)
	}
	for i := range flows {
		f := &flows[i]
		for _, r := range rules {
			if r.needs&present != r.needs || r.needs&f.invalid != 0 {
				continue
			}
			level, msg, ok := r.check(f, env)
			if !ok {
				continue
			}
			out = append(out, Finding{Flow: f.ID, Rule: r.ID, Level: level, Message: msg, Line: f.Line})
		}
	}
	return out
}

func summarize(fs []Finding) Summary {
	var s Summary
	for _, f := range fs {
		switch f.Level {
		case fail:
			s.Fail++
		case warn:
			s.Warn++
		case pass:
			s.Pass++
		}
	}
	return s
}

// Failed reports whether the report should fail a build: any FAIL, or with
// strict any WARN as well.
func (r *Report) Failed(strict bool) bool {
	return r.Summary.Fail > 0 || (strict && r.Summary.Warn > 0)
}

// reportMissingColumns adds one problem per column that a rule needs and
// the file lacks, naming the rules that were therefore not checked. It says
// nothing for a file without rows: there is nothing to check.
func (inv *Inventory) reportMissingColumns() {
	if len(inv.Flows) == 0 {
		return
	}
	for _, name := range knownColumns() {
		bit := columnBit(name)
		if inv.present&bit != 0 {
			continue
		}
		var ids []string
		for _, r := range allRules() {
			if r.needs&bit != 0 {
				ids = append(ids, r.ID)
			}
		}
		if len(ids) == 0 {
			continue
		}
		inv.Problems = append(inv.Problems, Problem{
			Column:  name,
			Message: fmt.Sprintf("the column is missing, so %s %s not checked for any flow; add the column (cells may be blank)", strings.Join(ids, ", "), wasWere(len(ids))),
		})
	}
}

func wasWere(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

// ReadFile reads an inventory, choosing the reader by the file extension:
// .csv, or .yaml and .yml.
func ReadFile(path string) (*Inventory, error) {
	ext := strings.ToLower(filepath.Ext(path))
	if ext != ".csv" && ext != ".yaml" && ext != ".yml" {
		return nil, fmt.Errorf("read %s: unknown inventory type %q, expected a .csv, .yaml or .yml file", path, ext)
	}
	if ext == ".csv" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read inventory: %w", err)
		}
		defer f.Close()
		return readInventoryCSV(f, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read inventory: %w", err)
	}
	return readYAML(data, path)
}
