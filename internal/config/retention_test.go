package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestRetentionDefaultsAndDays(t *testing.T) {
	src := `sources:
  - name: stripe
    kind: stripe
    secrets: [whsec_x]
  - name: crm
    kind: hubspot
    secrets: [s]
    retention: 45d
  - name: shop
    kind: pipedrive
    secrets: ["u:p"]
    retention: 36h
  - name: zapier
    kind: pipedrive
    secrets: ["u:p"]
retention:
  batch_size: 300
`
	c, err := Parse("h.yaml", []byte(src), env(nil))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	day := 24 * time.Hour
	for i, want := range []time.Duration{30 * day, 45 * day, 36 * time.Hour, 60 * day} {
		if got := c.Sources[i].Retention.D(); got != want {
			t.Errorf("source %s retention = %s, want %s", c.Sources[i].Name, got, want)
		}
	}
	if c.Retention.BatchSize != 300 || c.Retention.Interval.D() != DefaultRetentionInterval || c.Retention.Pause <= 0 {
		t.Errorf("retention section = %+v", c.Retention)
	}
}

// A retention under the vendor's longest resend window is refused at load
// with IP03, naming the file and the line of the key.
func TestRetentionIP03Refused(t *testing.T) {
	src := `sources:
  - name: billing
    kind: stripe
    secrets: [whsec_x]
    retention: 7d
`
	_, err := Parse("h.yaml", []byte(src), env(nil))
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 {
		t.Fatalf("err = %v, want one config error", err)
	}
	e := es[0]
	if e.File != "h.yaml" || e.Line != 5 || !strings.Contains(e.Msg, "IP03") || !strings.Contains(e.Msg, "30d") {
		t.Errorf("error = %v, want h.yaml:5 with IP03 and the 30-day window", e)
	}
}

func TestRetentionBadValues(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"not a number", "sources:\n  - name: a\n    kind: pipedrive\n    secrets: [\"u:p\"]\n    retention: 3x\n", "invalid retention"},
		{"under a day", "sources:\n  - name: a\n    kind: pipedrive\n    secrets: [\"u:p\"]\n    retention: 2h\n", "under a day"},
		{"batch", "retention:\n  batch_size: 100000\n", "batch_size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("h.yaml", []byte(tc.src), env(nil))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
