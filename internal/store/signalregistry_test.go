package store

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The built-in registry is the pinned surface: these names in this order,
// with these default thresholds (docs/signals.md's table). Written out
// here rather than read from the registry, so that a changed entry fails.
func TestBuiltinSignals(t *testing.T) {
	reg := BuiltinSignals()
	pinned := []string{"revision_lag", "unfinished_events", "deadline_risk", "unknown_outcomes", "key_conflicts",
		"dead_letters", "reconciliation_mismatches", "compensation_outstanding", "loop_blocks"}
	if got := reg.Names(); !slices.Equal(got, pinned) {
		t.Fatalf("names %v, want %v", got, pinned)
	}
	if !slices.Equal(SignalNames(), pinned) {
		t.Errorf("SignalNames() = %v", SignalNames())
	}
	defaults := map[string]SignalLimits{
		"revision_lag":              {WarnAge: 5 * time.Minute, AlertAge: 30 * time.Minute},
		"unfinished_events":         {WarnAge: 5 * time.Minute, AlertAge: 30 * time.Minute},
		"deadline_risk":             {Warn: 1, Alert: 1},
		"unknown_outcomes":          {Warn: 1, AlertAge: time.Hour},
		"key_conflicts":             {Warn: 1},
		"dead_letters":              {Warn: 1, AlertAge: 24 * time.Hour},
		"reconciliation_mismatches": {Alert: 1},
		"compensation_outstanding":  {Warn: 1, AlertAge: time.Hour},
		"loop_blocks":               {Warn: 1},
	}
	for _, d := range reg.All() {
		if d.Defaults != defaults[d.Name] {
			t.Errorf("%s defaults %+v, want %+v", d.Name, d.Defaults, defaults[d.Name])
		}
	}
	if _, ok := reg.Lookup("dead_letter"); ok {
		t.Error("Lookup found a name the registry lacks")
	}
	if d, ok := reg.Lookup(SignalDeadLetters); !ok || d.Title != "Dead letters" || d.List.Path != "/effects" {
		t.Errorf("Lookup(dead_letters) = %+v, %v", d, ok)
	}
	// Each call builds its own: changing one registry's entry changes no
	// other.
	reg.All()[0].List.Filters[1] = "changed"
	if d, _ := BuiltinSignals().Lookup(SignalRevisionLag); d.List.Filters[1] != string(DispositionAccepted) {
		t.Errorf("a registry shares its lists with another: %v", d.List.Filters)
	}
}

// A registry is checked when it is made: each problem is reported, naming
// the signal and the rule it breaks.
func TestNewSignalRegistryRefuses(t *testing.T) {
	ok := func(name string) SignalDef {
		return SignalDef{Name: name, Title: "T", Help: "H.", Measure: func(*SignalMeasure, SignalRead) error { return nil },
			List: SignalList{Path: "/events"}}
	}
	if _, err := NewSignalRegistry(ok("a"), ok("b_2")); err != nil {
		t.Fatalf("a valid registry: %v", err)
	}
	for _, tc := range []struct {
		name string
		defs []SignalDef
		want string
	}{
		{"name twice", []SignalDef{ok("a"), ok("b"), ok("a")}, "signal a: name given twice"},
		{"no name", []SignalDef{ok("")}, `signal 0: name ""`},
		{"upper case", []SignalDef{ok("a"), ok("Dead")}, `signal 1: name "Dead"`},
		{"label syntax", []SignalDef{ok("rate:x")}, `name "rate:x"`},
		{"no title", []SignalDef{func() SignalDef { d := ok("a"); d.Title = ""; return d }()}, "signal a: title and help are required"},
		{"no help", []SignalDef{func() SignalDef { d := ok("a"); d.Help = ""; return d }()}, "signal a: title and help are required"},
		{"no measure", []SignalDef{func() SignalDef { d := ok("a"); d.Measure = nil; return d }()}, "signal a: measure is required"},
		{"negative default", []SignalDef{func() SignalDef { d := ok("a"); d.Defaults.AlertAge = -time.Second; return d }()},
			"signal a: a default threshold is negative"},
		{"no list", []SignalDef{func() SignalDef { d := ok("a"); d.List = SignalList{}; return d }()}, `signal a: list ""`},
		{"odd filters", []SignalDef{func() SignalDef {
			d := ok("a")
			d.Also = []SignalList{{Path: "/audit", Filters: []string{"action"}}}
			return d
		}()}, `signal a: list "/audit"`},
		{"key link without dimension", []SignalDef{func() SignalDef {
			d := ok("a")
			d.Keys = []SignalKeyLink{{List: SignalList{Path: "/events"}}}
			return d
		}()}, `signal a: key link ""`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, err := NewSignalRegistry(tc.defs...)
			if err == nil || reg != nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewSignalRegistry: %v, %v; want an error with %q", reg, err, tc.want)
			}
		})
	}
	// Several problems: each is named.
	bad := ok("b")
	bad.Measure = nil
	_, err := NewSignalRegistry(ok("a"), ok("a"), bad)
	if err == nil || !strings.Contains(err.Error(), "signal a: name given twice") || !strings.Contains(err.Error(), "signal b: measure is required") {
		t.Errorf("two problems: %v", err)
	}
}
