package store

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCheckID(t *testing.T) {
	for _, tc := range []struct {
		in   string
		rule string // "" means accepted
	}{
		{"evt_123", ""},
		{"ünïcødé ✓", ""},
		{"line\u2028separator", ""}, // a separator is no control character
		{strings.Repeat("x", MaxIdentityBytes), ""},
		{"a\x00b", "holds a NUL character (byte 1)"},
		{"a\xffb", "is not valid UTF-8 (byte 1)"},
		{"\xed\xa0\x80", "is not valid UTF-8 (byte 0)"}, // a lone surrogate, as bytes
		{"ctl\u0085id", "holds the control character U+0085 (byte 3)"},
		{"esc\x1b[0m", "holds the control character U+001B (byte 3)"},
		{"tab\there", "holds the control character U+0009 (byte 3)"},
		{"del\x7f", "holds the control character U+007F (byte 3)"},
		{strings.Repeat("x", MaxIdentityBytes+1), "is 513 bytes long; the limit is 512"},
	} {
		err := CheckID("event id", tc.in)
		if tc.rule == "" {
			if err != nil {
				t.Errorf("%q: refused: %v", tc.in, err)
			}
			continue
		}
		var ve *ValueError
		if !errors.As(err, &ve) || ve.Field != "event id" || ve.Rule != tc.rule {
			t.Errorf("%q: got %v, want event id: %s", tc.in, err, tc.rule)
		}
		if strings.Contains(err.Error(), tc.in) {
			t.Errorf("%q: the error repeats the value: %v", tc.in, err)
		}
	}
	// Text (not an identity) may hold controls and be long.
	if err := CheckText("note", "a\tb\u0085"+strings.Repeat("x", 4096)); err != nil {
		t.Errorf("text with controls refused: %v", err)
	}
}

func TestCheckJSON(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{`{"a":"b"}`, true},
		{`{"a":"\\u0000"}`, true}, // an escaped backslash, then text
		{`{"a":"\\\u0000"}`, false},
		{`{"a":"\u0000"}`, false},
		{`{"\u0000":1}`, false},
		{`{"a":"\u00001"}`, false},
		{`{"a":"\u0001"}`, true},
		{"{\"a\":\"\xff\"}", false},
		{`"\u000`, true}, // not JSON, but nothing a driver refuses
	} {
		if err := CheckJSON("state", []byte(tc.in)); (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok=%v", tc.in, err, tc.ok)
		}
	}
}

func TestStorable(t *testing.T) {
	if got := Storable("a\x00b\xffc"); got != "ab\uFFFDc" || CheckText("x", got) != nil {
		t.Fatalf("Storable: %q", got)
	}
	if got := Storable("plain"); got != "plain" {
		t.Fatalf("Storable changed plain text: %q", got)
	}
}

// FuzzCheckJSON holds CheckJSON to its meaning: a valid JSON document
// passes exactly when it is valid UTF-8 and none of its strings or keys
// decodes to text holding U+0000.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, `{"a":"\u0000"}`, `["\\u0000"]`, `{"\\":"\\\u0000"}`, "\"\xff\"", `[1,"x",{"k":null}]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !json.Valid(b) {
			return
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Skip()
		}
		want := utf8.Valid(b) && !holdsNUL(v)
		if got := CheckJSON("doc", b) == nil; got != want {
			t.Fatalf("CheckJSON(%q) ok=%v, want %v", b, got, want)
		}
	})
}

func holdsNUL(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.ContainsRune(x, 0)
	case []any:
		for _, e := range x {
			if holdsNUL(e) {
				return true
			}
		}
	case map[string]any:
		for k, e := range x {
			if strings.ContainsRune(k, 0) || holdsNUL(e) {
				return true
			}
		}
	}
	return false
}
