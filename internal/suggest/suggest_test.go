package suggest

import "testing"

func TestDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "abc", 3}, {"status", "status", 0},
		{"stauts", "status", 1}, {"sorces", "sources", 1}, {"serv", "serve", 1},
		{"kitten", "sitting", 3}, {"lnit", "lint", 1}, {"ca", "abc", 3},
	} {
		if got := distance(tc.a, tc.b); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := distance(tc.b, tc.a); got != tc.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestNearest(t *testing.T) {
	valid := []string{"listen", "store", "admin", "sources", "flows", "destinations"}
	for _, tc := range []struct {
		word, want string
		ok         bool
	}{
		{"sorces", "sources", true},
		{"stor", "store", true},
		{"destinatons", "destinations", true},
		{"flow", "flows", true},
		{"x", "", false},
		{"ab", "", false},
		{"frobnicate", "", false},
		{"store", "", false}, // valid already: nothing to suggest
	} {
		got, ok := Nearest(tc.word, valid)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Nearest(%q) = %q, %v; want %q, %v", tc.word, got, ok, tc.want, tc.ok)
		}
	}
}
