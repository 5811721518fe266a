package lint

import (
	"bytes"
	"encoding/csv"
	"errors"
	"io"
	"testing"
)

// The 100,000-row benchmarks lint a generated inventory end to end: read
// the CSV, check every rule, write the JSON report. BenchmarkCSVParse100k is
// the baseline from the same input: encoding/csv reading every record and
// nothing else. Run with
//
//	go test -run '^$' -bench 'Lint100k|CSVParse100k' -benchmem ./internal/lint
//
// The rows/s metric is rows of inventory per second of wall time.

const benchRows = 100_000

func benchInventory(b *testing.B) []byte {
	b.Helper()
	data := genCSV(1, benchRows)
	b.SetBytes(int64(len(data)))
	return data
}

func reportRows(b *testing.B) {
	b.ReportMetric(float64(benchRows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

func BenchmarkLint100k(b *testing.B) {
	data := benchInventory(b)
	for b.Loop() {
		inv, err := readInventoryCSV(bytes.NewReader(data), "bench.csv")
		if err != nil {
			b.Fatal(err)
		}
		if len(inv.Flows) != benchRows {
			b.Fatalf("read %d flows", len(inv.Flows))
		}
		rep := Check(inv)
		if err := Write(io.Discard, rep, formatJSON, WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	reportRows(b)
}

// BenchmarkLint100kText is the same with the text report, the default
// output of the command.
func BenchmarkLint100kText(b *testing.B) {
	data := benchInventory(b)
	for b.Loop() {
		inv, err := readInventoryCSV(bytes.NewReader(data), "bench.csv")
		if err != nil {
			b.Fatal(err)
		}
		if err := Write(io.Discard, Check(inv), FormatText, WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	reportRows(b)
}

func BenchmarkCSVParse100k(b *testing.B) {
	data := benchInventory(b)
	for b.Loop() {
		r := csv.NewReader(bytes.NewReader(data))
		r.ReuseRecord = true
		n := 0
		for {
			_, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			n++
		}
		if n != benchRows+1 {
			b.Fatalf("read %d records", n)
		}
	}
	reportRows(b)
}
