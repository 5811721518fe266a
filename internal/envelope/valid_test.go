package envelope

import (
	"encoding/json"
	"strings"
	"testing"
)

// validCases are the edges where a hand-written JSON validator tends to
// part from encoding/json: numbers, escapes, control characters, invalid
// UTF-8, whitespace, empty containers, trailing text and nesting depth.
var validCases = []string{
	``, ` `, `null`, `nul`, `nullx`, `true`, `tru`, `false`, `falsey`,
	`0`, `-0`, `01`, `-`, `-01`, `1.`, `1.5`, `.5`, `1e`, `1e+`, `1E-7`, `1e5.0`, `-1.25e+10`, `2 `, ` 2`, `1 2`,
	`""`, `"a"`, `"\"`, `"\\"`, `"\/"`, `"\x"`, `"\u00e9"`, `"\u00G9"`, `"\u12"`, `"\uD800"`, "\"\x01\"", "\"\x7f\"", "\"\xff\xfe\"",
	"\"tab\there\"", `"unterminated`,
	`{}`, `{ }`, `[]`, `[ ]`, `{"a":1}`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `{"a":1 "b":2}`, `{"a":1}}`, `[1,]`, `[,1]`, `[1 2]`, `[1]]`,
	`{"a":[{"b":{}}],"c":[[],[{}]]}`, "{\n\t\"a\" :\r\n [ 1 , 2 ] }", `{"a":1}x`, `[`, `{`, `{"a"`, `{"a":`, `["a",`,
	strings.Repeat("[", maxNestingDepth) + strings.Repeat("]", maxNestingDepth),
	strings.Repeat("[", maxNestingDepth+1) + strings.Repeat("]", maxNestingDepth+1),
	strings.Repeat(`{"a":`, maxNestingDepth) + "1" + strings.Repeat("}", maxNestingDepth),
	strings.Repeat(`{"a":`, maxNestingDepth+1) + "1" + strings.Repeat("}", maxNestingDepth+1),
	stripeEvent, string(invoiceEvent), hubspotBatch, klaviyoBatch,
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, c := range validCases {
		if got, want := validJSON([]byte(c)), json.Valid([]byte(c)); got != want {
			t.Errorf("validJSON(%.60q) = %v, json.Valid = %v", c, got, want)
		}
	}
}

// FuzzValidMatchesEncodingJSON holds validJSON to encoding/json.Valid for
// any input: a body one accepts and the other refuses would either be
// refused at receipt while flows could read it, or stored while they
// cannot.
func FuzzValidMatchesEncodingJSON(f *testing.F) {
	for _, c := range validCases {
		f.Add([]byte(c))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("validJSON(%q) = %v, json.Valid = %v", b, got, want)
		}
	})
}

// BenchmarkValid compares validJSON with encoding/json.Valid on a 2 KB
// Stripe invoice event.
func BenchmarkValid(b *testing.B) {
	b.Run("validJSON", func(b *testing.B) {
		b.SetBytes(int64(len(invoiceEvent)))
		for b.Loop() {
			if !validJSON(invoiceEvent) {
				b.Fatal("invalid")
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(invoiceEvent)))
		for b.Loop() {
			if !json.Valid(invoiceEvent) {
				b.Fatal("invalid")
			}
		}
	})
}
