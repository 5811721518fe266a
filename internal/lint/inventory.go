package lint

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/vendors"
)

// Column names of the inventory. Further columns are allowed and kept in
// Flow.Extra.
const (
	colFlowID               = "flow_id"
	colMethod               = "method"
	colCreatesRecords       = "creates_records"
	colSideEffect           = "side_effect"
	colIdempotencyKey       = "idempotency_key"
	colLedgerRetentionDays  = "ledger_retention_days"
	colMaxReplayWindowDays  = "max_replay_window_days"
	colRetryLayers          = "retry_layers"
	colRetryAfterUnit       = "retry_after_unit"
	colInboundWebhook       = "inbound_webhook"
	colAckP99Seconds        = "ack_p99_seconds"
	colSenderTimeoutSeconds = "sender_timeout_seconds"
	colSources              = "sources"
)

// column is a bit for one known column, so that the columns a file has, the
// values a row could not parse and the inputs a rule needs are cheap sets.
type column uint16

const (
	cFlowID column = 1 << iota
	cMethod
	cCreatesRecords
	cSideEffect
	cIdempotencyKey
	cLedgerRetentionDays
	cMaxReplayWindowDays
	cRetryLayers
	cRetryAfterUnit
	cInboundWebhook
	cAckP99Seconds
	cSenderTimeoutSeconds
	cSources

	allColumns = cSources<<1 - 1
)

// knownColumns lists the known columns in documentation order.
func knownColumns() []string {
	return []string{
		colFlowID, colMethod, colCreatesRecords, colSideEffect, colIdempotencyKey,
		colLedgerRetentionDays, colMaxReplayWindowDays, colRetryLayers,
		colRetryAfterUnit, colInboundWebhook, colAckP99Seconds,
		colSenderTimeoutSeconds, colSources,
	}
}

// columnBit returns the bit of a known column, or 0 for a further column.
// Bits follow knownColumns order; a switch keeps the per-cell lookup free of
// allocations.
func columnBit(name string) column {
	switch name {
	case colFlowID:
		return cFlowID
	case colMethod:
		return cMethod
	case colCreatesRecords:
		return cCreatesRecords
	case colSideEffect:
		return cSideEffect
	case colIdempotencyKey:
		return cIdempotencyKey
	case colLedgerRetentionDays:
		return cLedgerRetentionDays
	case colMaxReplayWindowDays:
		return cMaxReplayWindowDays
	case colRetryLayers:
		return cRetryLayers
	case colRetryAfterUnit:
		return cRetryAfterUnit
	case colInboundWebhook:
		return cInboundWebhook
	case colAckP99Seconds:
		return cAckP99Seconds
	case colSenderTimeoutSeconds:
		return cSenderTimeoutSeconds
	case colSources:
		return cSources
	}
	return 0
}

// names lists the columns in the set, in documentation order.
func (c column) names() []string {
	var out []string
	for i, n := range knownColumns() {
		if c&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// Method is how a flow is built.
type Method string

// Methods accepted in the method column.
const (
	MethodEventPipeline Method = "event_pipeline"
	methodCustom        Method = "custom"
	methodIPaaS         Method = "ipaas"
)

// YesNo is a yes/no answer that may be left blank.
type YesNo int8

// Values of YesNo. Unknown is a blank cell.
const (
	unknown YesNo = iota
	Yes
	No
)

// Number is a decimal that may be left blank.
type Number struct {
	Value float64
	Set   bool
}

// Num returns a set Number.
func Num(v float64) Number { return Number{Value: v, Set: true} }

func (n Number) String() string {
	if !n.Set {
		return ""
	}
	s := strconv.FormatFloat(n.Value, 'f', -1, 64)
	// Values filled from the vendor catalogue can be long fractions of a
	// day (4 hours is 0.1666... days); three decimals are enough to read.
	if dot := strings.IndexByte(s, '.'); dot >= 0 && len(s)-dot-1 > 3 {
		s = strings.TrimRight(strconv.FormatFloat(n.Value, 'f', 3, 64), "0")
		s = strings.TrimSuffix(s, ".")
	}
	return s
}

// RetryLayer is one layer of nested synchronous attempts, such as an SDK's
// automatic retries or an iPaaS step's retry setting.
type RetryLayer struct {
	Name     string
	Attempts int
}

// RetryLayers is the parsed retry_layers cell. Known is false for a blank
// cell (the layers are unknown); `none` is Known with no layers.
type RetryLayers struct {
	Known  bool
	Layers []RetryLayer
}

// Flow is one row of the inventory: one integration flow.
type Flow struct {
	// Line is the file line the row starts on (1-based), or 0 for flows
	// that do not come from a file.
	Line int

	ID                   string
	Method               Method
	CreatesRecords       YesNo
	SideEffect           string // "none" for no side effect; blank means unknown
	IdempotencyKey       string
	LedgerRetentionDays  Number
	MaxReplayWindowDays  Number
	RetryLayers          RetryLayers
	RetryAfterUnit       string
	InboundWebhook       YesNo
	AckP99Seconds        Number
	SenderTimeoutSeconds Number
	// Sources are catalogue names of the vendors the flow's events come
	// from or pass through (see package vendors).
	Sources []string

	// Extra holds the further columns, by column name.
	Extra map[string]string

	// Engine marks a flow that hookledger itself runs (lint --config): it
	// acknowledges after the durable commit and processes asynchronously,
	// and keeps every episode key for ever. A config file has no place
	// for an acknowledgement latency or a replay window, so the rules
	// that would ask to fill those columns answer from that design.
	Engine bool

	// invalid marks cells that did not parse; rules that need them are
	// skipped for this flow, as the problem is already reported.
	invalid column
}

// hasEffect reports whether the flow creates records or has a side effect.
// A blank side_effect counts as a side effect: only `none` rules it out, in
// the same way a blank retry_layers means unknown rather than no retries.
func (f *Flow) hasEffect() bool {
	return f.CreatesRecords == Yes || !strings.EqualFold(strings.TrimSpace(f.SideEffect), "none")
}

// Problem is an input error: a value that does not parse, a duplicate flow,
// or a column that a rule needs and the file lacks.
type Problem struct {
	// Line is the file line, or 0 when the problem concerns the whole file.
	Line int `json:"line,omitempty"`
	// Column is the column concerned, if any.
	Column string `json:"column,omitempty"`
	// Message says what is wrong and what was expected.
	Message string `json:"message"`
}

func (p Problem) Error() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Column != "" {
		fmt.Fprintf(&b, "column %s: ", p.Column)
	}
	b.WriteString(p.Message)
	return b.String()
}

// Inventory is a parsed inventory file.
type Inventory struct {
	// Path is the file the inventory was read from, as given.
	Path string
	// Columns lists every column of the file, known or not, in first-seen
	// order.
	Columns []string
	// Flows are the rows that could be read, in file order.
	Flows []Flow
	// Problems are the input errors found while reading, in file order.
	Problems []Problem

	present column
}

// rowReader turns the cells of one row into a Flow, collecting problems.
// Both the CSV and the YAML readers feed it, so every rule about values is
// written once.
type rowReader struct {
	inv     *Inventory
	vendors vendors.Index
	seen    map[string]int // flow_id -> line of its first row
}

func newRowReader(inv *Inventory) *rowReader {
	return &rowReader{inv: inv, vendors: senderkind.Builtin().Index(), seen: map[string]int{}}
}

func (r *rowReader) problem(line int, col, format string, args ...any) {
	r.inv.Problems = append(r.inv.Problems, Problem{Line: line, Column: col, Message: fmt.Sprintf(format, args...)})
}

// cell is one value of a row with the line it was found on (YAML values can
// sit on other lines than the row start).
type cell struct {
	line  int
	value string
}

// set parses one cell into the flow. Unknown columns go to Extra.
func (r *rowReader) set(f *Flow, name string, c cell) {
	v := strings.TrimSpace(c.value)
	bit := columnBit(name)
	bad := func(expected string) {
		r.problem(c.line, name, "got %q, expected %s", v, expected)
		f.invalid |= bit
	}
	switch bit {
	case 0:
		if f.Extra == nil {
			f.Extra = map[string]string{}
		}
		f.Extra[name] = c.value
	case cFlowID:
		f.ID = v
	case cMethod:
		switch m := Method(strings.ToLower(v)); m {
		case MethodEventPipeline, methodCustom, methodIPaaS:
			f.Method = m
		case "":
			r.problem(c.line, name, "is blank, expected event_pipeline, custom or ipaas")
			f.invalid |= bit
		default:
			bad("event_pipeline, custom or ipaas")
		}
	case cCreatesRecords, cInboundWebhook:
		yn, ok := parseYesNo(v)
		if !ok {
			bad("yes or no (also true/false, y/n)")
			return
		}
		if bit == cCreatesRecords {
			f.CreatesRecords = yn
		} else {
			f.InboundWebhook = yn
		}
	case cSideEffect:
		f.SideEffect = v
	case cIdempotencyKey:
		f.IdempotencyKey = v
	case cRetryAfterUnit:
		f.RetryAfterUnit = v
	case cLedgerRetentionDays, cMaxReplayWindowDays, cAckP99Seconds, cSenderTimeoutSeconds:
		n, ok := parseNumber(v)
		if !ok {
			bad("a number such as 30 or 2.5 (blank if unknown)")
			return
		}
		if bit == cSenderTimeoutSeconds && n.Set && n.Value == 0 {
			bad("a timeout above 0 seconds")
			return
		}
		switch bit {
		case cLedgerRetentionDays:
			f.LedgerRetentionDays = n
		case cMaxReplayWindowDays:
			f.MaxReplayWindowDays = n
		case cAckP99Seconds:
			f.AckP99Seconds = n
		case cSenderTimeoutSeconds:
			f.SenderTimeoutSeconds = n
		}
	case cRetryLayers:
		layers, err := parseRetryLayers(v)
		if err != nil {
			bad(err.Error())
			return
		}
		f.RetryLayers = layers
	case cSources:
		for _, part := range splitList(v) {
			contract, ok := r.vendors.Lookup(part)
			if !ok {
				r.problem(c.line, name, "unknown vendor %q, expected one of %s", part, strings.Join(senderkind.Builtin().VendorNames(), ", "))
				f.invalid |= bit
				continue
			}
			f.Sources = append(f.Sources, contract.Name)
		}
	}
}

// finish validates a completed row and adds it to the inventory.
func (r *rowReader) finish(f Flow) {
	if f.ID == "" {
		r.problem(f.Line, colFlowID, "is blank; every flow needs a unique flow_id")
		return
	}
	if first, dup := r.seen[f.ID]; dup {
		r.problem(f.Line, colFlowID, "flow %q is already defined on line %d; flow_id must be unique, so this row is not checked", f.ID, first)
		return
	}
	r.seen[f.ID] = f.Line
	r.inv.Flows = append(r.inv.Flows, f)
}

func parseYesNo(v string) (YesNo, bool) {
	switch strings.ToLower(v) {
	case "":
		return unknown, true
	case "yes", "y", "true":
		return Yes, true
	case "no", "n", "false":
		return No, true
	}
	return unknown, false
}

// parseNumber accepts a plain non-negative decimal ("30", "2.5", ".5").
// strconv.ParseFloat alone would also take "NaN", "Inf", hex floats and
// exponents, none of which belong in an inventory cell.
func parseNumber(v string) (Number, bool) {
	if v == "" {
		return Number{}, true
	}
	digits, dot := 0, false
	for i := 0; i < len(v); i++ {
		switch ch := v[i]; {
		case ch >= '0' && ch <= '9':
			digits++
		case ch == '.' && !dot:
			dot = true
		default:
			return Number{}, false
		}
	}
	if digits == 0 {
		return Number{}, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsInf(f, 0) {
		return Number{}, false
	}
	return Num(f), true
}

// maxAttempts bounds one layer's attempts so that the product of layers
// cannot overflow; any realistic setting is far below it.
const maxAttempts = 1_000_000

// parseRetryLayers parses a retry_layers cell: `layer:attempts` parts joined
// by `;`, or `none`. Blank gives RetryLayers{Known: false}.
func parseRetryLayers(v string) (RetryLayers, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return RetryLayers{}, nil
	}
	if strings.EqualFold(v, "none") {
		return RetryLayers{Known: true}, nil
	}
	const form = "layer:attempts parts joined by ';' (for example sdk:3;worker:5), or none"
	var out RetryLayers
	out.Known = true
	for _, part := range strings.Split(v, ";") {
		name, count, ok := strings.Cut(part, ":")
		name, count = strings.TrimSpace(name), strings.TrimSpace(count)
		if !ok || name == "" || count == "" {
			return RetryLayers{}, fmt.Errorf("%s; part %q is not layer:attempts", form, strings.TrimSpace(part))
		}
		n, err := strconv.Atoi(count)
		if err != nil || n < 1 || n > maxAttempts {
			return RetryLayers{}, fmt.Errorf("%s; attempts in %q must be a whole number from 1 to %d", form, strings.TrimSpace(part), maxAttempts)
		}
		out.Layers = append(out.Layers, RetryLayer{Name: name, Attempts: n})
	}
	return out, nil
}

// splitList splits a sources cell on `;` or `,`, dropping blanks.
func splitList(v string) []string {
	parts := strings.FieldsFunc(v, func(r rune) bool { return r == ';' || r == ',' })
	out := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
