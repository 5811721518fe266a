package lint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func sampleReport(t *testing.T) *Report {
	t.Helper()
	inv, err := ReadFile(filepath.Join("testdata", "sample.csv"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Problems) != 0 {
		t.Fatalf("sample.csv has problems: %v", inv.Problems)
	}
	// The sample path is written with forward slashes so that the golden
	// files are the same on every platform.
	rep := Check(inv)
	rep.Path = "testdata/sample.csv"
	return rep
}

func render(t *testing.T, rep *Report, format Format) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := Write(&buf, rep, format, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestGolden(t *testing.T) {
	rep := sampleReport(t)
	ext := map[Format]string{FormatText: "txt", formatJSON: "json", formatSARIF: "sarif", FormatMarkdown: "md"}
	for _, format := range formats() {
		t.Run(string(format), func(t *testing.T) {
			got := render(t, rep, format)
			golden := filepath.Join("testdata", "sample."+ext[format]+".golden")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s output differs from %s (run with -update and review the diff):\n%s", format, golden, got)
			}
		})
	}
}

// TestSampleCoversEveryLevel keeps the sample honest: every rule reaches
// every level its text allows.
func TestSampleCoversEveryLevel(t *testing.T) {
	rep := sampleReport(t)
	seen := map[string]bool{}
	for _, f := range rep.Findings {
		seen[f.Rule+" "+string(f.Level)] = true
	}
	for _, want := range []string{
		"IP01 FAIL", "IP01 PASS",
		"IP02 FAIL", "IP02 WARN", "IP02 PASS",
		"IP03 FAIL", "IP03 WARN", "IP03 PASS",
		"RT01 FAIL", "RT01 WARN", "RT01 PASS",
		"RT02 WARN", "RT02 PASS",
		"WH01 FAIL", "WH01 WARN", "WH01 PASS",
	} {
		if !seen[want] {
			t.Errorf("sample.csv produces no %s finding", want)
		}
	}
	if rep.Summary != (Summary{Fail: 5, Warn: 9, Pass: 26}) {
		t.Errorf("summary = %+v", rep.Summary)
	}
}

func TestYAMLSampleMatchesCSV(t *testing.T) {
	csvRep := sampleReport(t)
	inv, err := ReadFile(filepath.Join("testdata", "sample.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Problems) != 0 {
		t.Fatalf("sample.yaml has problems: %v", inv.Problems)
	}
	yamlRep := Check(inv)
	strip := func(fs []Finding) []Finding {
		out := make([]Finding, len(fs))
		for i, f := range fs {
			f.Line = 0
			out[i] = f
		}
		return out
	}
	if !reflect.DeepEqual(strip(yamlRep.Findings), strip(csvRep.Findings)) {
		t.Errorf("YAML findings differ from CSV findings:\nyaml %+v\n csv %+v", yamlRep.Findings, csvRep.Findings)
	}
}

func TestTextColour(t *testing.T) {
	rep := &Report{Findings: []Finding{
		{Flow: "a", Rule: "IP01", Level: fail, Message: "m", Line: 2},
		{Flow: "bb", Rule: "RT01", Level: pass, Message: "m", Line: 3},
	}}
	var plain, coloured bytes.Buffer
	if err := Write(&plain, rep, FormatText, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := Write(&coloured, rep, FormatText, WriteOptions{Color: true}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain.String(), "\x1b") {
		t.Error("colour without Color")
	}
	if !strings.Contains(coloured.String(), "\x1b[31mFAIL\x1b[0m   a ") {
		t.Errorf("coloured output:\n%q", coloured.String())
	}
	stripped := strings.NewReplacer("\x1b[31m", "", "\x1b[32m", "", "\x1b[0m", "").Replace(coloured.String())
	if stripped != plain.String() {
		t.Errorf("colours change the layout:\n%q\n%q", stripped, plain.String())
	}
}

func TestJSONEmptyFindings(t *testing.T) {
	got := string(render(t, &Report{}, formatJSON))
	want := "{\n  \"findings\": [],\n  \"summary\": {\n    \"fail\": 0,\n    \"warn\": 0,\n    \"pass\": 0\n  }\n}\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestMarkdownEscapes(t *testing.T) {
	rep := &Report{Findings: []Finding{{Flow: "a|b", Rule: "IP02", Level: fail, Message: "key `x|y`\nnext", Line: 4}},
		Problems: []Problem{{Line: 5, Column: "method", Message: "got \"a|b\""}}}
	got := string(render(t, rep, FormatMarkdown))
	for _, want := range []string{"| **FAIL** | a\\|b | IP02 | 4 | key \\`x\\|y\\` next |", "## Input errors", "- line 5: column method: got \"a\\|b\""} {
		if !strings.Contains(got, want) {
			t.Errorf("markdown lacks %q:\n%s", want, got)
		}
	}
}

func loadSARIFSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	const path = "testdata/sarif-schema-2.1.0.json"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The schema is checked in unchanged; the README records its origin and
	// this digest.
	sum := sha256.Sum256(data)
	if got := hex.EncodeToString(sum[:]); got != "10666d46649b52e262001e70d43e6c52f7c0279ca3dbdfe9a7dc2e4071556454" {
		t.Fatalf("%s has changed (sha256 %s); update testdata/README.md with its new provenance", path, got)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	const id = sarifSchema // the schema's own $id
	if err := c.AddResource(id, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(id)
	if err != nil {
		t.Fatal(err)
	}
	return sch
}

func TestSARIFValidatesAgainstSchema(t *testing.T) {
	sch := loadSARIFSchema(t)
	validate := func(t *testing.T, out []byte) error {
		t.Helper()
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(out))
		if err != nil {
			t.Fatal(err)
		}
		return sch.Validate(inst)
	}

	sample := sampleReport(t)
	withProblems := sampleReport(t)
	withProblems.Problems = []Problem{{Line: 3, Column: "method", Message: "bad"}, {Column: "retry_layers", Message: "missing"}}
	absolute := sampleReport(t)
	absolute.Path = "/srv/inventories/flows with space.csv"
	for name, rep := range map[string]*Report{
		"sample":        sample,
		"with problems": withProblems,
		"absolute path": absolute,
		"empty":         {},
		"no file":       CheckFlows([]Flow{flow(nil)}),
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Write(&buf, rep, formatSARIF, WriteOptions{ToolVersion: "1.2.3"}); err != nil {
				t.Fatal(err)
			}
			if err := validate(t, buf.Bytes()); err != nil {
				t.Fatalf("SARIF output does not validate: %v\n%s", err, buf.String())
			}
		})
	}

	// The validator must be able to fail: a result with an unknown level
	// and a log without a version are rejected.
	var log map[string]any
	if err := json.Unmarshal(render(t, sample, formatSARIF), &log); err != nil {
		t.Fatal(err)
	}
	run := log["runs"].([]any)[0].(map[string]any)
	run["results"].([]any)[0].(map[string]any)["level"] = "fatal"
	delete(log, "version")
	broken, _ := json.Marshal(log)
	if err := validate(t, broken); err == nil {
		t.Error("a broken SARIF log validated")
	}
}

func TestSARIFContent(t *testing.T) {
	var log struct {
		Version string `json:"version"`
		Runs    []struct {
			Tool struct {
				Driver struct {
					Rules []struct {
						ID               string            `json:"id"`
						ShortDescription map[string]string `json:"shortDescription"`
						Help             map[string]string `json:"help"`
					} `json:"rules"`
				} `json:"driver"`
			} `json:"tool"`
			Results []struct {
				RuleID    string            `json:"ruleId"`
				Level     string            `json:"level"`
				Message   map[string]string `json:"message"`
				Locations []struct {
					PhysicalLocation struct {
						ArtifactLocation struct {
							URI string `json:"uri"`
						} `json:"artifactLocation"`
						Region struct {
							StartLine int `json:"startLine"`
						} `json:"region"`
					} `json:"physicalLocation"`
				} `json:"locations"`
			} `json:"results"`
		} `json:"runs"`
	}
	rep := sampleReport(t)
	if err := json.Unmarshal(render(t, rep, formatSARIF), &log); err != nil {
		t.Fatal(err)
	}
	if log.Version != "2.1.0" || len(log.Runs) != 1 {
		t.Fatalf("version %q, %d runs", log.Version, len(log.Runs))
	}
	rules := log.Runs[0].Tool.Driver.Rules
	if len(rules) != 6 {
		t.Fatalf("%d rules, want 6", len(rules))
	}
	for _, r := range rules {
		if r.ID == "" || r.ShortDescription["text"] == "" || r.Help["text"] == "" {
			t.Errorf("rule %+v lacks id, shortDescription or help", r)
		}
	}
	results := log.Runs[0].Results
	if len(results) != len(rep.Findings) {
		t.Fatalf("%d results for %d findings", len(results), len(rep.Findings))
	}
	levels := map[Level]string{fail: "error", warn: "warning", pass: "note"}
	for i, r := range results {
		f := rep.Findings[i]
		loc := r.Locations[0].PhysicalLocation
		if r.RuleID != f.Rule || r.Level != levels[f.Level] || r.Message["text"] != f.Message ||
			loc.ArtifactLocation.URI != "testdata/sample.csv" || loc.Region.StartLine != f.Line {
			t.Errorf("result %d = %+v, finding %+v", i, r, f)
		}
	}
}

func TestArtifactURI(t *testing.T) {
	tests := map[string]string{
		"inventory.csv":            "inventory.csv",
		"flows/team a.csv":         "flows/team%20a.csv",
		"/srv/flows.csv":           "file:///srv/flows.csv",
		"a:b.csv":                  "./a:b.csv",
		"":                         "",
		"testdata/sample.csv":      "testdata/sample.csv",
		"inventories/100%done.csv": "inventories/100%25done.csv",
	}
	for in, want := range tests {
		if got := artifactURI(in); got != want {
			t.Errorf("artifactURI(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestJSONStreamMatchesEncoder pins the streamed JSON to what
// encoding/json writes for the same shape.
func TestJSONStreamMatchesEncoder(t *testing.T) {
	rep := sampleReport(t)
	rep.Problems = []Problem{{Line: 3, Column: "method", Message: `got "<x>" & more`}, {Message: "whole file"}}
	rep.Findings[0].Message = "tab\there, quote \" and <html> & \u2028"
	var want bytes.Buffer
	enc := json.NewEncoder(&want)
	enc.SetIndent("", "  ")
	if err := enc.Encode(struct {
		Findings []Finding `json:"findings"`
		Summary  Summary   `json:"summary"`
		Errors   []Problem `json:"errors,omitempty"`
	}{rep.Findings, rep.Summary, rep.Problems}); err != nil {
		t.Fatal(err)
	}
	if got := render(t, rep, formatJSON); !bytes.Equal(got, want.Bytes()) {
		t.Errorf("streamed JSON differs from encoding/json:\n%s\nwant:\n%s", got, want.Bytes())
	}
}
