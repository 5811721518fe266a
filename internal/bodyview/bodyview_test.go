package bodyview

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

func jsonIndent(t testing.TB, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		t.Fatalf("json.Indent(%q): %v", b, err)
	}
	return out.String()
}

func nested(depth int, inner string) string {
	return strings.Repeat("[", depth) + inner + strings.Repeat("]", depth)
}

func TestRender(t *testing.T) {
	big := `{"pad":"` + strings.Repeat("x", PrettyMaxBytes) + `"}`
	flatDeep := nested(prettyMaxDepth-1, "["+strings.Repeat("1,", 30000)+"1]")
	for _, tc := range []struct {
		name   string
		body   string
		pretty bool
		reason string
		shown  int // -1: the whole body
	}{
		{"object", `{"id":"evt_1","data":{"a":[1,2,{}],"b":[],"s":"x, {y}: \"z\""}}`, true, "", -1},
		{"spaces kept inside strings, dropped between tokens", " {\"a b\" :\t[ 1 , \"c  d\" ] }\n", true, "", -1},
		{"top-level scalar", `"just a string"`, true, "", -1},
		{"at the depth bound", nested(prettyMaxDepth, "1"), true, "", -1},
		{"one level too deep", nested(prettyMaxDepth+1, "1"), false, reasonTooDeep, -1},
		{"the finding: 9,990 deep", `{"a":` + nested(9990, "") + `}`, false, reasonTooDeep, -1},
		{"deeper than the JSON parser goes", nested(20000, ""), false, reasonTooDeep, -1},
		{"indentation past the text bound", flatDeep, false, reasonTooIndented, -1},
		{"larger than the pretty bound", big, false, reasonTooLarge, RawMaxBytes},
		{"not JSON", "amount=10&currency=eur\n", false, "", -1},
		{"broken JSON", `{"a":1,}`, false, "", -1},
		{"text larger than the raw bound", strings.Repeat("line of text\n", 10000), false, "", RawMaxBytes},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Render([]byte(tc.body))
			if v.Pretty != tc.pretty || v.Reason != tc.reason || v.Size != len(tc.body) {
				t.Fatalf("pretty %v reason %q size %d, want %v %q %d", v.Pretty, v.Reason, v.Size, tc.pretty, tc.reason, len(tc.body))
			}
			wantShown := tc.shown
			if wantShown < 0 {
				wantShown = len(tc.body)
			}
			if v.Shown != wantShown || v.Cut() != (wantShown < len(tc.body)) {
				t.Errorf("shown %d of %d (cut %v), want %d", v.Shown, v.Size, v.Cut(), wantShown)
			}
			switch {
			case v.Pretty && v.Text != jsonIndent(t, []byte(tc.body)):
				t.Errorf("pretty text differs from json.Indent:\n%s", v.Text)
			case !v.Pretty && v.Text != tc.body[:v.Shown]:
				t.Errorf("raw text is not the body's first %d bytes", v.Shown)
			}
		})
	}
}

// The finding's shape costs a fixed, small amount to render, however
// deep: the indentation that grew with the square of the depth never
// happens.
func TestRenderAllocatesBoundedly(t *testing.T) {
	for _, body := range [][]byte{
		[]byte(`{"a":` + nested(9990, "") + `,"b":` + nested(9990, "") + `}`),
		[]byte(`{"a":` + nested(9990, "") + `,"pad":"` + strings.Repeat("x", 1<<20) + `"}`),
		[]byte(nested(prettyMaxDepth-1, "["+strings.Repeat("1,", 30000)+"1]")),
	} {
		allocs := testing.AllocsPerRun(3, func() { _ = Render(body) })
		if allocs > 8 {
			t.Errorf("%d-byte body: %.0f allocations per render, want a handful", len(body), allocs)
		}
		if v := Render(body); len(v.Text) > RawMaxBytes {
			t.Errorf("%d-byte body: %d bytes of text, want at most %d", len(body), len(v.Text), RawMaxBytes)
		}
	}
}

func TestRenderPrefix(t *testing.T) {
	body := []byte(`[` + strings.Repeat(`"é",`, 40000) + `"é"]`)
	whole := Render(body)
	// A store that reads the first RawMaxBytes+1 bytes and the size shows
	// the same as one that reads the body whole.
	part := RenderPrefix(body[:RawMaxBytes+1], len(body))
	if part != whole || !whole.Cut() || whole.Reason != reasonTooLarge {
		t.Fatalf("prefix view %+v differs from the whole body's %+v", part.Shown, whole.Shown)
	}
	if !utf8.ValidString(whole.Text) || !bytes.HasPrefix(body, []byte(whole.Text)) || whole.Shown != len(whole.Text) {
		t.Errorf("cut text: %d bytes, shown %d, valid UTF-8 %v: want a prefix cut between characters",
			len(whole.Text), whole.Shown, utf8.ValidString(whole.Text))
	}
	// A small body is never pretty-printed from a part of it.
	if v := RenderPrefix([]byte(`{"a":1}`), 100); v.Pretty || v.Size != 100 || v.Shown != 7 {
		t.Errorf("small prefix of a larger body: %+v", v)
	}
}

func TestRenderNotUTF8(t *testing.T) {
	v := Render([]byte("{\"a\":\"\xff\xfe\"}"))
	if v.Pretty || v.Text != "{\"a\":\"\uFFFD\uFFFD\"}" || v.Shown != v.Size {
		t.Errorf("got %+v, want the body as stored with U+FFFD for each byte that is not UTF-8", v)
	}
	// Replacements grow the text; the cut keeps it within the bound.
	body := bytes.Repeat([]byte{0xff}, RawMaxBytes)
	v = Render(body)
	if len(v.Text) > RawMaxBytes || !utf8.ValidString(v.Text) || v.Shown != RawMaxBytes/3 || !v.Cut() {
		t.Errorf("%d bytes not UTF-8: text %d bytes, %d shown", len(body), len(v.Text), v.Shown)
	}
}

// genJSON is a random JSON document from a deterministic rng: nesting,
// empty containers, strings with escapes and punctuation, spaces between
// tokens.
func genJSON(r *rand.Rand, depth int) string {
	sp := func() string { return []string{"", "", " ", "\n\t", "\r\n "}[r.IntN(5)] }
	switch k := r.IntN(7); {
	case depth > 0 && k < 2:
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, sp()+`"k\"`+string(rune('a'+r.IntN(26)))+`"`+sp()+":"+sp()+genJSON(r, depth-1)+sp())
		}
		return "{" + strings.Join(parts, ",") + sp() + "}"
	case depth > 0 && k < 4:
		var parts []string
		for range r.IntN(4) {
			parts = append(parts, sp()+genJSON(r, depth-1)+sp())
		}
		return "[" + strings.Join(parts, ",") + sp() + "]"
	case k == 4:
		return `"a, b: {c} [d] \\ \" é \u00e9"`
	case k == 5:
		return []string{"true", "false", "null"}[r.IntN(3)]
	}
	return []string{"0", "-1.5e+10", "42"}[r.IntN(3)]
}

func FuzzRender(f *testing.F) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 16 {
		f.Add([]byte(genJSON(r, 6)))
	}
	f.Add([]byte(" {} \n"))
	f.Add([]byte(nested(40, "")))
	f.Add([]byte("{\"a\":\"\xff\"}"))
	f.Add([]byte("not json at all"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v := Render(b)
		if !utf8.ValidString(v.Text) || v.Size != len(b) || v.Shown > v.Size || v.Shown < 0 {
			t.Fatalf("view %+v of %d bytes: text valid UTF-8 %v", v, len(b), utf8.ValidString(v.Text))
		}
		if v.Pretty {
			if v.Text != jsonIndent(t, b) || len(v.Text) > prettyMaxText || v.Shown != v.Size {
				t.Fatalf("pretty text of %q differs from json.Indent or exceeds the bound: %q", b, v.Text)
			}
			return
		}
		if len(v.Text) > RawMaxBytes {
			t.Fatalf("raw text of %d bytes, want at most %d", len(v.Text), RawMaxBytes)
		}
		if utf8.Valid(b) && v.Text != string(b[:v.Shown]) {
			t.Fatalf("raw text is not the body's first %d bytes", v.Shown)
		}
		if len(b) <= PrettyMaxBytes && utf8.Valid(b) && json.Valid(b) && v.Reason == "" {
			t.Fatalf("valid JSON %q not pretty-printed, and no reason given", b)
		}
	})
}
