package api

import (
	"strings"
	"testing"
)

// The Idempotency-Key header is untrusted input: whatever it holds, the
// parser answers a key or a problem, never a reserved key, and a key
// written as a Structured Field string reads back as written.
func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range []string{"", "abc", `"abc"`, `"a\"b\\c"`, `"open`, `"x" y`, "effect:k", `"effect:k"`, "\x00", `"\x7f"`, " k "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		key, problem := idempotencyKey(v)
		if problem != "" {
			if key != "" {
				t.Fatalf("%q: key %q beside problem %q", v, key, problem)
			}
			return
		}
		if strings.HasPrefix(key, "effect:") {
			t.Fatalf("%q: reserved key %q accepted", v, key)
		}
		if !strings.HasPrefix(strings.TrimSpace(v), `"`) && key != strings.TrimSpace(v) {
			t.Fatalf("bare %q read as %q", v, key)
		}
		// Printable ASCII written as a string reads back unchanged.
		if printable(key) {
			quoted := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
			if back, p := idempotencyKey(quoted); p != "" || back != key {
				t.Fatalf("%q quoted as %s read back as %q (%s)", key, quoted, back, p)
			}
		}
	})
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

func TestIdempotencyKey(t *testing.T) {
	for _, tc := range []struct{ in, key, problem string }{
		{"abc", "abc", ""},
		{`"abc"`, "abc", ""},
		{`  "a\"b\\c"  `, `a"b\c`, ""},
		{`"open`, "", "no closing quote"},
		{`"x" y`, "", "after its closing quote"},
		{"\"a\tb\"", "", "cannot"},
		{`"a\x"`, "", "cannot"},
		{"effect:o:1", "", "reserved"},
		{`"effect:o:1"`, "", "reserved"},
		// A bare key is held to a string's characters too: bytes a
		// store cannot hold are the client's mistake (400), never a 503.
		{"k\xffy", "", "printable ASCII"},
		{"a\x00b", "", "printable ASCII"},
		{"tab\tkey", "", "printable ASCII"},
		{"with space", "with space", ""},
	} {
		key, problem := idempotencyKey(tc.in)
		if key != tc.key || (tc.problem == "") != (problem == "") || !strings.Contains(problem, tc.problem) {
			t.Errorf("%q: %q %q, want %q and a problem containing %q", tc.in, key, problem, tc.key, tc.problem)
		}
	}
}
