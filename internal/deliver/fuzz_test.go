package deliver

import (
	"math"
	"net/http"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
)

// Retry-After comes from destinations: any value must parse without
// panicking and give a wait inside [0, max].
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "1.5", "-1", "1e308", "NaN", "Inf", "Wed, 21 Oct 2026 07:28:00 GMT",
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "", " 60 ", "60ms", "99999999999999999999"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	now := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string, ms bool) {
		unit := "seconds"
		if ms {
			unit = "milliseconds"
		}
		ra := parseRetryAfter(http.Header{"Retry-After": {v}}, unit, time.Hour, now)
		if ra.Wait < 0 || ra.Wait > time.Hour {
			t.Fatalf("wait %v outside [0, 1h] for %q", ra.Wait, v)
		}
		if !ra.OK && ra.Wait != 0 {
			t.Fatalf("unparsed %q gave a wait %v", v, ra.Wait)
		}
	})
}

// Response bodies come from destinations: classification must never panic
// and must always name a class.
func FuzzClassify(f *testing.F) {
	c, err := config.Parse("f.yaml", []byte(`destinations:
  - name: m
    preset: marketo
    base_url: https://x
    classify:
      - when: 'status == 200 && body.results.exists(r, r.status == "failed")'
        class: hidden_failure
`), func(string) (string, bool) { return "", false })
	if err != nil {
		f.Fatal(err)
	}
	d := &c.Destinations[0]
	for _, b := range []string{`{"success":false}`, `{"results":[{"status":"failed"}]}`, `{"results":"x"}`, `[1,2]`, `not json`, `{"success":`, ``} {
		for _, st := range []int{200, 207, 400, 429, 500} {
			f.Add(st, []byte(b))
		}
	}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		if status < 0 || status > math.MaxInt16 {
			return
		}
		class, _ := Classify(d, &Response{Status: status, Body: body, Sent: true}, nil)
		if class == "" && status != 0 {
			t.Fatalf("no class for status %d body %q", status, body)
		}
	})
}
