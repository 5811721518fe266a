package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

const verifyLookup = `    lookup:
      path: '"/items/" + pathEscape(episode_key)'
      found: status == 200
`

func TestVerifyDefaults(t *testing.T) {
	c, err := Parse("d.yaml", []byte(`destinations:
  - name: crm
    base_url: https://crm.example
`+verifyLookup+`    verify: {sample: 0.01}
  - name: mail
    base_url: https://mail.example
`+verifyLookup+`    verify: {sample: 1, after: 30s, per_second: 0.5}
  - name: plain
    base_url: https://plain.example
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if v := c.Destinations[0].Verify; v == nil || v.Sample != 0.01 || v.After.D() != defaultVerifyAfter || v.PerSecond != 1 {
		t.Errorf("crm verify = %+v, want sample 0.01 after 5m per_second 1", v)
	}
	if v := c.Destinations[1].Verify; v == nil || v.Sample != 1 || v.After.D() != 30*time.Second || v.PerSecond != 0.5 {
		t.Errorf("mail verify = %+v, want the values as set", v)
	}
	if c.Destinations[2].Verify != nil {
		t.Errorf("a destination without verify: verifies: %+v", c.Destinations[2].Verify)
	}
}

// Every refusal names the destination and the line of the field at fault.
func TestVerifyErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"no lookup", "destinations:\n  - name: crm\n    base_url: https://x\n    verify: {sample: 0.1}\n", 4,
			`destination "crm": verify needs a lookup:`},
		{"no sample", "destinations:\n  - name: crm\n    base_url: https://x\n" + verifyLookup + "    verify: {after: 1m}\n", 7,
			`destination "crm": verify.sample must be a share in (0, 1]`},
		{"sample above one", "destinations:\n  - name: crm\n    base_url: https://x\n" + verifyLookup + "    verify:\n      sample: 1.5\n", 8,
			"verify.sample"},
		{"negative sample", "destinations:\n  - name: crm\n    base_url: https://x\n" + verifyLookup + "    verify:\n      sample: -0.1\n", 8,
			"verify.sample"},
		{"NaN sample", "destinations:\n  - name: crm\n    base_url: https://x\n" + verifyLookup + "    verify:\n      sample: .nan\n", 8,
			"verify.sample"},
		{"negative after", "destinations:\n  - name: crm\n    base_url: https://x\n" + verifyLookup + "    verify:\n      sample: 0.5\n      after: -1m\n", 9,
			`destination "crm": verify.after must be positive`},
		{"negative rate", "destinations:\n  - name: crm\n    base_url: https://x\n" + verifyLookup + "    verify:\n      sample: 0.5\n      per_second: -2\n", 9,
			`destination "crm": verify.per_second must be a positive number`},
	} {
		_, err := Parse("d.yaml", []byte(tc.yaml), env(nil))
		var es Errors
		if !errors.As(err, &es) || len(es) != 1 || es[0].Line != tc.line || !strings.Contains(es[0].Msg, tc.want) {
			t.Errorf("%s: %v, want one error at line %d containing %q", tc.name, err, tc.line, tc.want)
		}
	}
	// Strict YAML: a misspelt key is refused at its line, not ignored.
	_, err := Parse("d.yaml", []byte("destinations:\n  - name: crm\n    base_url: https://x\n"+verifyLookup+"    verify:\n      sample: 0.5\n      every: 1m\n"), env(nil))
	var ce *Error
	if !errors.As(err, &ce) || ce.Line != 9 || !strings.Contains(err.Error(), `unknown field "every"`) {
		t.Errorf("unknown key: %v, want it refused at line 9", err)
	}
}
