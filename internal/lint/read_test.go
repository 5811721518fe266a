package lint

import (
	"reflect"
	"strings"
	"testing"
)

const header = "flow_id,method,creates_records,side_effect,idempotency_key,ledger_retention_days,max_replay_window_days,retry_layers,retry_after_unit,inbound_webhook,ack_p99_seconds,sender_timeout_seconds"

func readCSV(t *testing.T, src string) *Inventory {
	t.Helper()
	inv, err := readInventoryCSV(strings.NewReader(src), "inventory.csv")
	if err != nil {
		t.Fatalf("readInventoryCSV: %v", err)
	}
	return inv
}

func TestReadCSVValues(t *testing.T) {
	inv := readCSV(t, "\xef\xbb\xbf"+header+",Sources,Owner\n"+
		"a,Custom,YES,upsert_deal, a+deal_id+rev ,30.5,.5,sdk:1; worker:6 ,seconds,y,0.25,10,Stripe;hubspot,ops\n"+
		"\n"+
		"b,event_pipeline,False,none,,,,none,,N,,,,\n")
	if len(inv.Problems) != 0 {
		t.Fatalf("problems: %v", inv.Problems)
	}
	if len(inv.Flows) != 2 {
		t.Fatalf("got %d flows, want 2", len(inv.Flows))
	}
	want := Flow{
		Line: 2, ID: "a", Method: methodCustom, CreatesRecords: Yes, SideEffect: "upsert_deal",
		IdempotencyKey: "a+deal_id+rev", LedgerRetentionDays: Num(30.5), MaxReplayWindowDays: Num(0.5),
		RetryLayers:    RetryLayers{Known: true, Layers: []RetryLayer{{"sdk", 1}, {"worker", 6}}},
		RetryAfterUnit: "seconds", InboundWebhook: Yes, AckP99Seconds: Num(0.25), SenderTimeoutSeconds: Num(10),
		Sources: []string{"stripe", "hubspot-app"}, Extra: map[string]string{"owner": "ops"},
	}
	if !reflect.DeepEqual(inv.Flows[0], want) {
		t.Errorf("flow a:\n got %+v\nwant %+v", inv.Flows[0], want)
	}
	b := inv.Flows[1]
	if b.Line != 4 || b.CreatesRecords != No || b.InboundWebhook != No || !b.RetryLayers.Known || len(b.RetryLayers.Layers) != 0 || b.LedgerRetentionDays.Set {
		t.Errorf("flow b: %+v", b)
	}
	if got := strings.Join(inv.Columns, ","); got != header+",sources,owner" {
		t.Errorf("columns = %s", got)
	}
}

func TestReadCSVBadValues(t *testing.T) {
	tests := []struct {
		name, cell, column, want string
		value                    string
	}{
		{"method", "method", colMethod, "expected event_pipeline, custom or ipaas", "serverless"},
		{"method blank", "method", colMethod, "is blank, expected event_pipeline, custom or ipaas", ""},
		{"yes/no", "creates_records", colCreatesRecords, `got "sometimes", expected yes or no`, "sometimes"},
		{"inbound yes/no", "inbound_webhook", colInboundWebhook, "expected yes or no", "2"},
		{"number", "ledger_retention_days", colLedgerRetentionDays, `got "30 days", expected a number`, "30 days"},
		{"negative", "ack_p99_seconds", colAckP99Seconds, "expected a number", "-1"},
		{"NaN", "max_replay_window_days", colMaxReplayWindowDays, "expected a number", "NaN"},
		{"exponent", "max_replay_window_days", colMaxReplayWindowDays, "expected a number", "1e3"},
		{"two dots", "ack_p99_seconds", colAckP99Seconds, "expected a number", "1.2.3"},
		{"zero timeout", "sender_timeout_seconds", colSenderTimeoutSeconds, "a timeout above 0 seconds", "0"},
		{"layers no colon", "retry_layers", colRetryLayers, `part "sdk" is not layer:attempts`, "sdk"},
		{"layers zero", "retry_layers", colRetryLayers, "must be a whole number from 1", "sdk:0"},
		{"layers decimal", "retry_layers", colRetryLayers, "must be a whole number", "sdk:2.5"},
		{"layers empty part", "retry_layers", colRetryLayers, `part "" is not layer:attempts`, "sdk:2;"},
		{"unknown vendor", "sources", colSources, `unknown vendor "stripey", expected one of`, "stripe;stripey"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cols := strings.Split(header+",sources", ",")
			good := []string{"ok", "custom", "yes", "x", "ok+id+v", "30", "3", "none", "s", "yes", "1", "5", ""}
			bad := append([]string(nil), good...)
			bad[0] = "bad"
			for i, c := range cols {
				if c == tt.cell {
					bad[i] = tt.value
				}
			}
			src := header + ",sources\n" + strings.Join(good, ",") + "\n" + strings.Join(bad, ",") + "\n"
			inv := readCSV(t, src)
			if len(inv.Problems) != 1 {
				t.Fatalf("problems = %v, want one", inv.Problems)
			}
			p := inv.Problems[0]
			if p.Line != 3 || p.Column != tt.column || !strings.Contains(p.Message, tt.want) {
				t.Errorf("problem = %q (line %d, column %s), want line 3, column %s, message containing %q", p.Error(), p.Line, p.Column, tt.column, tt.want)
			}
			if !strings.HasPrefix(p.Error(), "line 3: column "+tt.column+": ") {
				t.Errorf("Error() = %q", p.Error())
			}
			// The other row, and the other rules of the bad row, are
			// still checked.
			rep := Check(inv)
			var okRow, badRow int
			for _, f := range rep.Findings {
				switch f.Flow {
				case "ok":
					okRow++
				case "bad":
					badRow++
				}
				for _, r := range allRules() {
					if r.ID == f.Rule && f.Flow == "bad" && r.needs&columnBit(tt.column) != 0 {
						t.Errorf("rule %s ran on a row whose %s did not parse", r.ID, tt.column)
					}
				}
			}
			if okRow != 6 || badRow == 0 {
				t.Errorf("findings for ok row %d (want 6), bad row %d (want some)", okRow, badRow)
			}
		})
	}
}

func TestReadCSVRowProblems(t *testing.T) {
	inv := readCSV(t, header+"\n"+
		"a,custom,yes,x,k,1,1,none,s,no,,\n"+
		",custom,yes,x,k,1,1,none,s,no,,\n"+
		"a,custom,yes,x,k,1,1,none,s,no,,\n"+
		"c,custom\n"+
		"d,custom,yes,x,k,1,1,none,s,no,,\n")
	var got []string
	for _, p := range inv.Problems {
		got = append(got, p.Error())
	}
	want := []string{
		"line 3: column flow_id: is blank; every flow needs a unique flow_id",
		`line 4: column flow_id: flow "a" is already defined on line 2; flow_id must be unique, so this row is not checked`,
		"line 5: row has 2 fields, the header has 12; the row is not checked",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n got %q\nwant %q", got, want)
	}
	if len(inv.Flows) != 2 || inv.Flows[0].ID != "a" || inv.Flows[1].ID != "d" || inv.Flows[1].Line != 6 {
		t.Errorf("flows = %+v", inv.Flows)
	}
}

func TestReadCSVBrokenQuoteKeepsEarlierRows(t *testing.T) {
	inv := readCSV(t, header+"\n"+
		"a,custom,yes,x,k,1,1,none,s,no,,\n"+
		"b,custom,\"yes,x,k\"oops,1,1,none,s,no,,\n"+
		"c,custom,yes,x,k,1,1,none,s,no,,\n")
	if len(inv.Flows) != 1 || inv.Flows[0].ID != "a" {
		t.Errorf("flows = %+v", inv.Flows)
	}
	if len(inv.Problems) != 1 || inv.Problems[0].Line != 3 || !strings.Contains(inv.Problems[0].Message, "rows from here on were not read") {
		t.Errorf("problems = %v", inv.Problems)
	}
}

func TestReadCSVMissingColumnReportedOnce(t *testing.T) {
	inv := readCSV(t, "flow_id,method,creates_records,side_effect,idempotency_key,inbound_webhook,ack_p99_seconds,sender_timeout_seconds\n"+
		"a,custom,yes,x,,no,,\n"+
		"b,custom,yes,x,,no,,\n"+
		"c,custom,yes,x,,no,,\n")
	var got []string
	for _, p := range inv.Problems {
		got = append(got, p.Error())
	}
	want := []string{
		"column ledger_retention_days: the column is missing, so IP03 was not checked for any flow; add the column (cells may be blank)",
		"column max_replay_window_days: the column is missing, so IP03 was not checked for any flow; add the column (cells may be blank)",
		"column retry_layers: the column is missing, so RT01 was not checked for any flow; add the column (cells may be blank)",
		"column retry_after_unit: the column is missing, so RT02 was not checked for any flow; add the column (cells may be blank)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("problems:\n got %q\nwant %q", got, want)
	}
	rep := Check(inv)
	for _, f := range rep.Findings {
		if f.Rule != "IP01" && f.Rule != "IP02" {
			t.Errorf("rule %s ran without its columns", f.Rule)
		}
	}
	if rep.Summary.Fail != 3 {
		t.Errorf("IP01 should still fail for all three flows: %+v", rep.Summary)
	}
}

func TestReadCSVFatal(t *testing.T) {
	tests := map[string]string{
		"":                          "the file is empty",
		"method,side_effect\nx,y\n": "no flow_id column",
		"flow_id,,method\n":         "column 2 has no name",
		"flow_id,Method,method\n":   `column "method" appears twice`,
		"flow_id,\"method\n":        "header",
	}
	for src, want := range tests {
		_, err := readInventoryCSV(strings.NewReader(src), "inv.csv")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "read inv.csv: ") {
			t.Errorf("readInventoryCSV(%q) error = %v, want one containing %q", src, err, want)
		}
	}
}

func TestReadCSVHeaderOnly(t *testing.T) {
	inv := readCSV(t, "flow_id\n")
	if len(inv.Flows) != 0 || len(inv.Problems) != 0 {
		t.Errorf("header-only inventory: flows %v problems %v", inv.Flows, inv.Problems)
	}
}

func TestReadYAMLMatchesCSV(t *testing.T) {
	yamlInv, err := readYAML([]byte(`# The same two flows as TestReadCSVValues.
- flow_id: a
  method: Custom
  creates_records: YES
  side_effect: upsert_deal
  idempotency_key: " a+deal_id+rev "
  ledger_retention_days: 30.5
  max_replay_window_days: .5
  retry_layers: [sdk:1, "worker:6"]
  retry_after_unit: seconds
  inbound_webhook: y
  ack_p99_seconds: 0.25
  sender_timeout_seconds: 10
  sources:
    - Stripe
    - hubspot
  owner: ops
- {flow_id: b, method: event_pipeline, creates_records: false, side_effect: none, retry_layers: none, inbound_webhook: N}
`), "inventory.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(yamlInv.Problems) != 0 {
		t.Fatalf("problems: %v", yamlInv.Problems)
	}
	csvInv := readCSV(t, header+",sources,owner\n"+
		"a,Custom,YES,upsert_deal, a+deal_id+rev ,30.5,.5,sdk:1;worker:6,seconds,y,0.25,10,Stripe;hubspot,ops\n"+
		"b,event_pipeline,False,none,,,,none,,N,,,,\n")
	if len(yamlInv.Flows) != 2 {
		t.Fatalf("got %d flows", len(yamlInv.Flows))
	}
	for i := range yamlInv.Flows {
		y, c := yamlInv.Flows[i], csvInv.Flows[i]
		y.Line, c.Line = 0, 0
		if y.Extra == nil && len(c.Extra) == 1 && c.Extra["owner"] == "" {
			c.Extra = nil // a blank CSV cell of an extra column
		}
		if !reflect.DeepEqual(y, c) {
			t.Errorf("flow %d:\nyaml %+v\n csv %+v", i, y, c)
		}
	}
	if yamlInv.Flows[0].Line != 2 || yamlInv.Flows[1].Line != 18 {
		t.Errorf("lines = %d, %d; want 2, 18", yamlInv.Flows[0].Line, yamlInv.Flows[1].Line)
	}
}

func TestReadYAMLProblems(t *testing.T) {
	inv, err := readYAML([]byte(`- flow_id: a
  method: custom
  retry_layers: sdk:x
  creates_records: yes
- flow_id: b
  method: custom
  side_effect: {kind: mail}
- just a string
- flow_id: c
  method: custom
  creates_records: &anchor yes
- flow_id: a
  method: custom
`), "inv.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range inv.Problems {
		got = append(got, p.Error())
	}
	want := []string{
		`line 3: column retry_layers: got "sdk:x", expected layer:attempts parts joined by ';' (for example sdk:3;worker:5), or none; attempts in "sdk:x" must be a whole number from 1 to 1000000`,
		"line 7: column side_effect: expected a single value, found a mapping",
		`line 8: expected a flow (a mapping of column: value), found "just a string"; the item is not checked`,
		"line 11: column creates_records: expected a single value, found an anchor (not supported)",
		`line 12: column flow_id: flow "a" is already defined on line 1; flow_id must be unique, so this row is not checked`,
	}
	// Columns no flow has are reported once each, after the rows.
	for _, p := range got[min(len(want), len(got)):] {
		if !strings.HasPrefix(p, "column ") {
			t.Errorf("unexpected problem %q", p)
		}
	}
	if len(got) < len(want) || !reflect.DeepEqual(got[:len(want)], want) {
		t.Errorf("problems:\n got %q\nwant %q", got, want)
	}
	if len(inv.Flows) != 3 {
		t.Errorf("flows = %d, want a, b, c", len(inv.Flows))
	}
}

func TestReadYAMLFatal(t *testing.T) {
	tests := map[string]string{
		"":                                  "the file is empty",
		"# only a comment\n":                "the file is empty",
		"flow_id: a\n":                      "expected a list of flows",
		"- flow_id: a\n  flow_id: b\n":      `[2:3] mapping key "flow_id" already defined at [1:3]`,
		"- [a\n":                            "read inv.yaml: ",
		"- flow_id: a\n---\n- flow_id: b\n": "a second YAML document",
	}
	for src, want := range tests {
		_, err := readYAML([]byte(src), "inv.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ReadYAML(%q) error = %v, want one containing %q", src, err, want)
		}
	}
	inv, err := readYAML([]byte("[]\n"), "inv.yaml")
	if err != nil || len(inv.Flows) != 0 || len(inv.Problems) != 0 {
		t.Errorf("empty list: %v %+v", err, inv)
	}
}

func TestParseRetryLayers(t *testing.T) {
	rl, err := parseRetryLayers(" sdk : 3 ;worker:5")
	if err != nil || !reflect.DeepEqual(rl, RetryLayers{Known: true, Layers: []RetryLayer{{"sdk", 3}, {"worker", 5}}}) {
		t.Errorf("got %+v, %v", rl, err)
	}
	if rl, err := parseRetryLayers("  "); err != nil || rl.Known {
		t.Errorf("blank: %+v, %v", rl, err)
	}
	for _, bad := range []string{":3", "sdk:", "sdk:-1", "sdk:1000001", "sdk:3:4", "none;sdk:2"} {
		if _, err := parseRetryLayers(bad); err == nil {
			t.Errorf("ParseRetryLayers(%q) accepted", bad)
		}
	}
}
