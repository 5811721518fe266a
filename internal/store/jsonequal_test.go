package store

import "testing"

func TestJSONEqual(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{`{"a":1,"b":[1,2]}`, `{"b": [1, 2], "a": 1}`, true},
		{`{"a":1}`, `{"a":1.0}`, true},
		{`{"a":100}`, `{"a":1e2}`, true},
		{`{"a":9007199254740993}`, `{"a":9007199254740992}`, false},
		{`{"a":1}`, `{"a":"1"}`, false},
		{`{"a":1}`, `{"a":1,"b":null}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`null`, `null`, true},
		{`{"a":{"x":true}}`, `{"a":{"x":false}}`, false},
		{`{"a":1e999999999}`, `{"a":1e999999999}`, true},
		{`{"a":1e999999999}`, `{"a":2e999999999}`, false},
		{`not json`, `not json`, true},
		{`not json`, `not jsom`, false},
		{`{"a":1} {}`, `{"a":1}`, false},
	} {
		if got := JSONEqual([]byte(c.a), []byte(c.b)); got != c.want {
			t.Errorf("JSONEqual(%s, %s) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

func FuzzJSONEqual(f *testing.F) {
	f.Add([]byte(`{"a":1,"b":[1,2]}`), []byte(`{"b":[1,2],"a":1.0}`))
	f.Add([]byte(`1e400`), []byte(`1E+400`))
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if JSONEqual(a, b) != JSONEqual(b, a) {
			t.Fatalf("not symmetric: %q %q", a, b)
		}
		if !JSONEqual(a, a) {
			t.Fatalf("not reflexive: %q", a)
		}
	})
}
