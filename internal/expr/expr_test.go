package expr

import (
	"strings"
	"testing"
	"time"
)

func mustCompile(t *testing.T, src string) *Program {
	t.Helper()
	p, err := Compile(src)
	if err != nil {
		t.Fatalf("compile %q: %v", src, err)
	}
	return p
}

func TestEvalKinds(t *testing.T) {
	ev, err := DecodeJSON([]byte(`{"id":"evt_1","revision":3,"amount":12.5,"big":9007199254740993,"data":{"object":{"id":41208,"status":"active","tags":["a","b"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	vars := Vars{VarEvent: ev, VarMeta: map[string]any{"received_at": time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), "source": "shop"}}

	if n, err := mustCompile(t, "event.revision").EvalInt(vars); err != nil || n != 3 {
		t.Errorf("revision = %d %v", n, err)
	}
	if n, err := mustCompile(t, "event.big").EvalInt(vars); err != nil || n != 9007199254740993 {
		t.Errorf("large ids must keep their precision: %d %v", n, err)
	}
	if s, err := mustCompile(t, "event.data.object.id").EvalString(vars); err != nil || s != "41208" {
		t.Errorf("numeric entity = %q %v", s, err)
	}
	if b, err := mustCompile(t, `event.revision > 2 && event.data.object.status == "active"`).EvalBool(vars); err != nil || !b {
		t.Errorf("condition = %v %v", b, err)
	}
	j, err := mustCompile(t, `{"z": event.revision, "a": event.data.object.tags, "m": event.amount}`).EvalJSON(vars)
	if err != nil || string(j) != `{"a":["a","b"],"m":12.5,"z":3}` {
		t.Errorf("canonical JSON = %s %v", j, err)
	}
	if s, err := mustCompile(t, `"/orders/" + meta.source`).EvalString(vars); err != nil || s != "/orders/shop" {
		t.Errorf("string = %q %v", s, err)
	}
	if _, err := mustCompile(t, "event.missing.field").Eval(vars); err == nil {
		t.Error("missing field evaluated without error")
	}
	if _, err := mustCompile(t, "event.revision").EvalBool(vars); err == nil {
		t.Error("an int accepted as a boolean")
	}
	// Variables a stage has not bound are null.
	if v, err := mustCompile(t, "object").Eval(vars); err != nil || v != nil {
		t.Errorf("unbound variable = %v %v, want null", v, err)
	}
}

func TestCompileErrors(t *testing.T) {
	for _, src := range []string{"", "event.", "nosuchvar.x", "event.a +", `size(1, 2, 3)`} {
		if _, err := Compile(src); err == nil {
			t.Errorf("Compile(%q) succeeded", src)
		}
	}
}

func TestReferences(t *testing.T) {
	p := mustCompile(t, `event.data.id + ":" + string(meta.received_at) + (has(event.x) ? "" : meta.source)`)
	for _, path := range []string{"meta.received_at", "meta", "event.data.id", "meta.source"} {
		if !p.Reads(path) {
			t.Errorf("Reads(%q) = false; refs %v", path, p.References())
		}
	}
	if p.Reads("meta.attempt") || p.Reads("object") {
		t.Errorf("Reads reports a path the expression does not read: %v", p.References())
	}
}

// pathEscape makes a value one path segment, queryEscape one query
// component; both take strings and integers (numeric ids).
func TestEscapeFunctions(t *testing.T) {
	ev, err := DecodeJSON([]byte(`{"id":"../../admin/secret","q":"x?admin=1&y=2","n":41208,"email":"ann@example.com","f":1.5}`))
	if err != nil {
		t.Fatal(err)
	}
	vars := Vars{VarEvent: ev}
	for src, want := range map[string]string{
		`"/orders/" + pathEscape(event.id)`:      "/orders/..%2F..%2Fadmin%2Fsecret",
		`"/orders/" + pathEscape(event.q)`:       "/orders/x%3Fadmin=1&y=2",
		`"/orders/" + pathEscape(event.n)`:       "/orders/41208",
		`"/contacts/" + pathEscape(event.email)`: "/contacts/ann@example.com",
		`pathEscape("a b#c")`:                    "a%20b%23c",
		`pathEscape(7u)`:                         "7",
		`"q=" + queryEscape(event.q)`:            "q=x%3Fadmin%3D1%26y%3D2",
		`queryEscape("a b/c")`:                   "a+b%2Fc",
		`queryEscape(event.n)`:                   "41208",
	} {
		if got, err := mustCompile(t, src).EvalString(vars); err != nil || got != want {
			t.Errorf("%s = %q %v, want %q", src, got, err, want)
		}
	}
	if _, err := mustCompile(t, `pathEscape(event.f)`).EvalString(vars); err == nil {
		t.Error("pathEscape of a fraction succeeded")
	}
	if _, err := Compile(`pathEscape("a", "b")`); err == nil {
		t.Error("pathEscape with two arguments compiled")
	}
}

func TestEvalQuery(t *testing.T) {
	ev, _ := DecodeJSON([]byte(`{"id":"x?admin=1&y=2","n":3,"tags":["a","b"],"none":null}`))
	vars := Vars{VarEvent: ev}
	q, err := mustCompile(t, `{"id": event.id, "n": event.n, "tag": event.tags, "ok": true, "skip": event.none, "f": 1.5}`).EvalQuery(vars)
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Encode(); got != "f=1.5&id=x%3Fadmin%3D1%26y%3D2&n=3&ok=true&tag=a&tag=b" {
		t.Errorf("query = %s", got)
	}
	if q, err := mustCompile(t, `null`).EvalQuery(vars); err != nil || q != nil {
		t.Errorf("null query = %v %v", q, err)
	}
	for _, bad := range []string{`"a=1"`, `{"a": {"b": 1}}`, `{"a": [[1]]}`, `{"": "x"}`} {
		if _, err := mustCompile(t, bad).EvalQuery(vars); err == nil {
			t.Errorf("EvalQuery(%s) succeeded", bad)
		}
	}
}

func TestConstantAndConcatLiterals(t *testing.T) {
	for src, want := range map[string]struct {
		constant bool
		lits     string
	}{
		`"/charges"`:                                {true, "/charges"},
		`"/deals/" + entity + "?idProperty=x"`:      {false, "/deals/|?idProperty=x"},
		`"/a/" + pathEscape("?") + "/b"`:            {true, "/a/|/b"},
		`"/x/" + event.id.replace("?", "")`:         {false, "/x/"},
		`entity`:                                    {false, ""},
		`"/" + string(version) + "/" + episode_key`: {false, "/|/"},
	} {
		p := mustCompile(t, src)
		if p.Constant() != want.constant || strings.Join(p.ConcatLiterals(), "|") != want.lits {
			t.Errorf("%s: constant %v literals %q, want %v %q", src, p.Constant(), p.ConcatLiterals(), want.constant, want.lits)
		}
	}
}

// A number that is not finite never becomes a value: structpb renders it
// as the string "Infinity" or "NaN", which a state or request would then
// carry as if the sender had sent it.
func TestNonFiniteResultsAreErrors(t *testing.T) {
	vars := Vars{VarEvent: map[string]any{"x": 1.0, "zero": 0.0}}
	for _, src := range []string{`event.x / event.zero`, `{"v": event.x / event.zero}`, `[-event.x / event.zero]`, `{"n": {"v": event.zero / event.zero}}`} {
		j, err := mustCompile(t, src).EvalJSON(vars)
		if err == nil || strings.Contains(string(j), "Infinity") {
			t.Errorf("%s = %s %v, want an error", src, j, err)
		} else if !strings.Contains(err.Error(), "JSON cannot represent") {
			t.Errorf("%s: error %v does not say why", src, err)
		}
	}
	if j, err := mustCompile(t, `{"v": [event.x * 3.0, 2.5]}`).EvalJSON(vars); err != nil || string(j) != `{"v":[3,2.5]}` {
		t.Errorf("finite numbers = %s %v", j, err)
	}
}

// Numbers inside maps and lists keep their type and precision: CEL's own
// JSON conversion would write an integer beyond 2^53 as a string.
func TestNestedNumbersStayNumbers(t *testing.T) {
	ev, err := DecodeJSON([]byte(`{"big":9223372036854775807,"id":9007199254740993,"f":2.5,"i":3,"neg":-0}`))
	if err != nil {
		t.Fatal(err)
	}
	vars := Vars{VarEvent: ev}
	j, err := mustCompile(t, `{"big": event.big, "ids": [event.id, event.i], "f": event.f, "neg": event.neg, "u": uint(7)}`).EvalJSON(vars)
	if want := `{"big":9223372036854775807,"f":2.5,"ids":[9007199254740993,3],"neg":0,"u":7}`; err != nil || string(j) != want {
		t.Fatalf("nested numbers = %s %v, want %s", j, err, want)
	}
	if j, err := mustCompile(t, `{"at": timestamp("2026-11-03T09:00:00Z"), "b": b"hi"}`).EvalJSON(vars); err != nil || string(j) != `{"at":"2026-11-03T09:00:00Z","b":"aGk="}` {
		t.Fatalf("timestamps and bytes = %s %v", j, err)
	}
	if _, err := mustCompile(t, `{1: "a"}`).EvalJSON(vars); err == nil || !strings.Contains(err.Error(), "JSON keys are strings") {
		t.Fatalf("an int key: %v", err)
	}
}
