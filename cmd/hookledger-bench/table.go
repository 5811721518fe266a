package main

import (
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// headline is one row of a benchmark's table under "Current figures" in
// BENCHMARKS.md: a figure, the baseline it is compared with (measured in
// the same run), their ratio, and the product's goal with its verdict
// where there is one. Every benchmark prints its rows with --table, so
// that scripts/bench.sh (BENCH_TABLE=1) regenerates the tables instead of
// someone copying figures out of the reports by hand.
type headline struct {
	figure, value, baseline, ratio, goal string
}

// tableMark starts a benchmark's table in the output; tableEnd ends it.
// scripts/bench.sh collects what lies between them.
const (
	tableMark = "<!-- hookledger-bench table: %s -->"
	tableEnd  = "<!-- end of table -->"
)

// tableFlag adds --table to fs.
func tableFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("table", false, "after the report, print the headline figures as the markdown table of BENCHMARKS.md\n"+
		"(scripts/bench.sh collects them with BENCH_TABLE=1)")
}

// printHeadlines writes rows as a markdown table between the marks.
func printHeadlines(w io.Writer, bench string, rows []headline) {
	fmt.Fprintln(w)
	fmt.Fprintf(w, tableMark+"\n", bench)
	fmt.Fprintln(w, "| figure | value | same-run baseline | ratio | goal |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", mdCell(r.figure), mdCell(r.value), mdCell(r.baseline), mdCell(r.ratio), mdCell(r.goal))
	}
	fmt.Fprintln(w, tableEnd)
}

// mdCell makes s safe inside a markdown table cell; an empty cell shows a
// dash, so that a missing baseline or goal reads as none rather than as
// forgotten.
func mdCell(s string) string {
	if s == "" {
		return "–"
	}
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}

// num formats v rounded to a whole number with thousands separators
// (12,563), as the tables of BENCHMARKS.md write figures.
func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	s := strconv.FormatInt(int64(math.Round(math.Abs(v))), 10)
	var b strings.Builder
	if v < 0 && s != "0" {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// ratioOf formats a/b with two decimals, or "" when b is zero.
func ratioOf(a, b float64) string {
	if b == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", a/b)
}

// verdict is how a table says whether a goal was reached.
func verdict(met bool) string {
	if met {
		return "met"
	}
	return "not met"
}

// plural is n and its noun, in the plural unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// driverName is how a table names a store driver.
func driverName(d string) string {
	switch d {
	case "sqlite":
		return "SQLite"
	case "postgres":
		return "PostgreSQL"
	}
	return d
}
