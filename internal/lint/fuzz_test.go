package lint

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func addFileSeed(f *testing.F, name string) {
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
}

// checkInvariants lints a parsed inventory, renders every format and checks
// what must hold for any input.
func checkInvariants(t *testing.T, inv *Inventory) {
	ids := map[string]bool{}
	for _, fl := range inv.Flows {
		if fl.ID == "" {
			t.Fatalf("flow without id at line %d", fl.Line)
		}
		if ids[fl.ID] {
			t.Fatalf("flow %q kept twice", fl.ID)
		}
		ids[fl.ID] = true
	}
	for _, p := range inv.Problems {
		if p.Line < 0 || p.Message == "" {
			t.Fatalf("bad problem %+v", p)
		}
	}
	rep := Check(inv)
	if rep.Summary.Fail+rep.Summary.Warn+rep.Summary.Pass != len(rep.Findings) {
		t.Fatalf("summary %+v does not count %d findings", rep.Summary, len(rep.Findings))
	}
	for _, f := range rep.Findings {
		if !ids[f.Flow] || f.Message == "" {
			t.Fatalf("finding %+v names no flow of the inventory or has no message", f)
		}
	}
	for _, format := range formats() {
		if err := Write(io.Discard, rep, format, WriteOptions{Color: true}); err != nil {
			t.Fatalf("write %s: %v", format, err)
		}
	}
}

func FuzzReadCSV(f *testing.F) {
	addFileSeed(f, "sample.csv")
	for seed := range uint64(4) {
		f.Add(genCSV(seed, 12))
	}
	f.Add([]byte("flow_id\n"))
	f.Add([]byte("flow_id,retry_layers,sources\na,\"sdk:3;\nworker:5\",stripe\nb,none,unknown\n"))
	f.Add([]byte("\xef\xbb\xbfflow_id,method\na,custom\na,ipaas\n,\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := readInventoryCSV(bytes.NewReader(data), "fuzz.csv")
		if err != nil {
			if inv != nil {
				t.Fatal("an error with an inventory")
			}
			return
		}
		checkInvariants(t, inv)
	})
}

func FuzzReadYAML(f *testing.F) {
	addFileSeed(f, "sample.yaml")
	for seed := range uint64(4) {
		f.Add(genYAML(seed, 6))
	}
	f.Add([]byte("[]\n"))
	f.Add([]byte("- {flow_id: a, retry_layers: [sdk:3, worker:5], sources: [stripe, zapier]}\n- flow_id: a\n"))
	f.Add([]byte("- flow_id: &x a\n  method: *x\n"))
	f.Add([]byte("- flow_id: a\n  side_effect: |\n    two\n    lines\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		inv, err := readYAML(data, "fuzz.yaml")
		if err != nil {
			if inv != nil {
				t.Fatal("an error with an inventory")
			}
			return
		}
		checkInvariants(t, inv)
	})
}
