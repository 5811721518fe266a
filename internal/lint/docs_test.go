package lint

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// docsBlock returns the body of the first fenced block of the given
// language in docs/lint.md, so the examples users copy are the fixtures.
func docsBlock(t *testing.T, lang string) string {
	t.Helper()
	data, err := os.ReadFile("../../docs/lint.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n```"+lang+"\n")
	if !ok {
		t.Fatalf("docs/lint.md has no ```%s block", lang)
	}
	body, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("docs/lint.md: unterminated ```%s block", lang)
	}
	return body + "\n"
}

// The YAML example of docs/lint.md leaves max_replay_window_days and
// sender_timeout_seconds out of its only flow. Those are blank cells (the
// catalogue fills the replay window from sources), not missing columns:
// the example must lint without input errors, exactly like the CSV example
// that leaves the same cells empty.
func TestDocsExamplesLintAlike(t *testing.T) {
	yamlInv, err := readYAML([]byte(docsBlock(t, "yaml")), "inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	csvInv, err := readInventoryCSV(strings.NewReader(docsBlock(t, "csv")), "inventory.csv")
	if err != nil {
		t.Fatal(err)
	}
	yamlRep, csvRep := Check(yamlInv), Check(csvInv)
	if len(yamlRep.Problems) != 0 || len(csvRep.Problems) != 0 {
		t.Fatalf("input errors: yaml %v, csv %v", yamlRep.Problems, csvRep.Problems)
	}
	strip := func(fs []Finding) []Finding {
		out := make([]Finding, len(fs))
		for i, f := range fs {
			f.Line = 0 // the CSV row is on line 2, the YAML flow on line 1
			out[i] = f
		}
		return out
	}
	if !reflect.DeepEqual(strip(yamlRep.Findings), strip(csvRep.Findings)) {
		t.Fatalf("findings differ:\nyaml %+v\n csv %+v", yamlRep.Findings, csvRep.Findings)
	}
	var ip03 *Finding
	for i, f := range yamlRep.Findings {
		if f.Rule == "IP03" {
			ip03 = &yamlRep.Findings[i]
		}
	}
	if ip03 == nil || ip03.Level != pass || !strings.Contains(ip03.Message, "taken as 30 from the vendor catalogue") {
		t.Fatalf("IP03 = %+v, want a PASS with the replay window filled from the catalogue", ip03)
	}
}

// A key that no flow has is a blank cell in every flow: the rules that
// need it still run, and say the cell is blank.
func TestReadYAMLAbsentKeyIsBlank(t *testing.T) {
	inv, err := readYAML([]byte("- flow_id: a\n  method: custom\n  side_effect: send_email\n  inbound_webhook: yes\n"), "inv.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep := Check(inv)
	if len(rep.Problems) != 0 {
		t.Fatalf("problems: %v", rep.Problems)
	}
	rules := map[string]Level{}
	for _, f := range rep.Findings {
		rules[f.Rule] = f.Level
	}
	for _, id := range []string{"IP01", "IP03", "RT01", "WH01"} {
		if _, ok := rules[id]; !ok {
			t.Errorf("rule %s gave no finding; findings %+v", id, rep.Findings)
		}
	}
}
