package lint

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Format is an output format of the linter.
type Format string

// Output formats.
const (
	FormatText     Format = "text"
	formatJSON     Format = "json"
	formatSARIF    Format = "sarif"
	FormatMarkdown Format = "markdown"
)

// formats lists the output formats.
func formats() []Format {
	return []Format{FormatText, formatJSON, formatSARIF, FormatMarkdown}
}

// ParseFormat checks a --format value.
func ParseFormat(s string) (Format, error) {
	for _, f := range formats() {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown format %q, expected text, json, sarif or markdown", s)
}

// WriteOptions tune the rendering.
type WriteOptions struct {
	// Color adds ANSI colours to the text format; set it only when the
	// output is a terminal.
	Color bool
	// ToolVersion is the hookledger version recorded in SARIF output.
	ToolVersion string
}

// Write renders the report in the given format.
func Write(w io.Writer, rep *Report, format Format, opts WriteOptions) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	var err error
	switch format {
	case FormatText:
		err = writeText(bw, rep, opts.Color)
	case formatJSON:
		err = writeJSON(bw, rep)
	case formatSARIF:
		err = writeSARIF(bw, rep, opts.ToolVersion)
	case FormatMarkdown:
		err = writeMarkdown(bw, rep)
	default:
		return fmt.Errorf("write report: unknown format %q", format)
	}
	if err == nil {
		err = bw.Flush()
	}
	if err != nil {
		return fmt.Errorf("write %s report: %w", format, err)
	}
	return nil
}

func (s Summary) String() string {
	return fmt.Sprintf("%d fail, %d warn, %d pass", s.Fail, s.Warn, s.Pass)
}

// ANSI colours for the level column. All codes have the same length, so
// padding computed on the plain text keeps the columns aligned.
func colour(l Level) string {
	switch l {
	case fail:
		return "\x1b[31m"
	case warn:
		return "\x1b[33m"
	default:
		return "\x1b[32m"
	}
}

const colourReset = "\x1b[0m"

func writeText(w *bufio.Writer, rep *Report, color bool) error {
	if len(rep.Findings) == 0 {
		fmt.Fprintf(w, "no findings\n\nsummary: %s\n", rep.Summary)
		return nil
	}
	headers := [4]string{"LEVEL", "FLOW", "RULE", "LINE"}
	var width [4]int
	for i, h := range headers {
		width[i] = len(h)
	}
	for _, f := range rep.Findings {
		width[1] = max(width[1], len(f.Flow))
		width[3] = max(width[3], len(lineText(f.Line)))
	}
	pad := func(s string, n int) {
		w.WriteString(s)
		for i := len(s); i < n; i++ {
			w.WriteByte(' ')
		}
		w.WriteString("  ")
	}
	for i, h := range headers {
		pad(h, width[i])
	}
	w.WriteString("MESSAGE\n")
	for _, f := range rep.Findings {
		if color {
			w.WriteString(colour(f.Level))
			w.WriteString(string(f.Level))
			w.WriteString(colourReset)
			pad("", width[0]-len(f.Level))
		} else {
			pad(string(f.Level), width[0])
		}
		pad(f.Flow, width[1])
		pad(f.Rule, width[2])
		pad(lineText(f.Line), width[3])
		w.WriteString(f.Message)
		w.WriteByte('\n')
	}
	_, err := fmt.Fprintf(w, "\nsummary: %s\n", rep.Summary)
	return err
}

func lineText(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

// writeJSON writes the pinned JSON shape, {"findings": [...], "summary":
// {...}}, plus "errors" when there were input errors. It streams one
// finding at a time: encoding the whole report with an indenting encoder
// would hold the report, its encoding and the indented copy in memory at
// once, which for a 100,000-flow inventory is over a gigabyte. The bytes
// are the same as json.Encoder with SetIndent("", "  ") would write.
func writeJSON(w *bufio.Writer, rep *Report) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	encode := func(v any) error {
		buf.Reset()
		if err := enc.Encode(v); err != nil {
			return err
		}
		_, err := w.Write(bytes.TrimSuffix(buf.Bytes(), []byte("\n")))
		return err
	}
	w.WriteString("{\n  \"findings\": [")
	enc.SetIndent("    ", "  ")
	for i := range rep.Findings {
		if i > 0 {
			w.WriteByte(',')
		}
		w.WriteString("\n    ")
		if err := encode(&rep.Findings[i]); err != nil {
			return err
		}
	}
	if len(rep.Findings) > 0 {
		w.WriteString("\n  ")
	}
	w.WriteString("],\n  \"summary\": ")
	enc.SetIndent("  ", "  ")
	if err := encode(rep.Summary); err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		w.WriteString(",\n  \"errors\": ")
		if err := encode(rep.Problems); err != nil {
			return err
		}
	}
	_, err := w.WriteString("\n}\n")
	return err
}

func writeMarkdown(w *bufio.Writer, rep *Report) error {
	title := "hookledger lint"
	if rep.Path != "" {
		title += ": " + mdEscape(rep.Path)
	}
	fmt.Fprintf(w, "# %s\n\n", title)
	if len(rep.Findings) == 0 {
		w.WriteString("No findings.\n\n")
	} else {
		w.WriteString("| Level | Flow | Rule | Line | Message |\n")
		w.WriteString("| --- | --- | --- | ---: | --- |\n")
		for _, f := range rep.Findings {
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n",
				mdLevel(f.Level), mdEscape(f.Flow), f.Rule, lineText(f.Line), mdEscape(f.Message))
		}
		w.WriteString("\n")
	}
	fmt.Fprintf(w, "**Summary:** %d fail, %d warn, %d pass\n", rep.Summary.Fail, rep.Summary.Warn, rep.Summary.Pass)
	if len(rep.Problems) > 0 {
		w.WriteString("\n## Input errors\n\n")
		for _, p := range rep.Problems {
			fmt.Fprintf(w, "- %s\n", mdEscape(p.Error()))
		}
	}
	return nil
}

func mdLevel(l Level) string {
	if l == pass {
		return string(l)
	}
	return "**" + string(l) + "**"
}

// mdEscape keeps a cell on one line and inside its table column, and stops
// inventory text from turning into markup.
func mdEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '\n', '\r':
			b.WriteByte(' ')
		case '|', '\\', '`', '*', '[', ']', '<', '>':
			b.WriteByte('\\')
			b.WriteRune(r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
