package deliver

import (
	"net/http"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
)

func TestBackoffCeilingAndJitterBounds(t *testing.T) {
	b := Backoff{Base: time.Second, Factor: 2, Cap: 60 * time.Second}
	for attempt, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 6: 32 * time.Second, 7: 60 * time.Second, 50: 60 * time.Second} {
		if got := b.Ceiling(attempt); got != want {
			t.Errorf("ceiling(%d) = %v, want %v", attempt, got, want)
		}
	}
	// Full jitter spans [0, ceiling): the extremes of the random draw.
	if w := b.Wait(3, func() float64 { return 0 }); w != 0 {
		t.Errorf("wait at r=0 = %v, want 0", w)
	}
	if w := b.Wait(3, func() float64 { return 0.999999 }); w >= 4*time.Second || w < 3990*time.Millisecond {
		t.Errorf("wait at r≈1 = %v, want just under 4s", w)
	}
	if w := b.Wait(10, func() float64 { return 0.5 }); w != 30*time.Second {
		t.Errorf("capped wait at r=0.5 = %v, want 30s", w)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	h := func(v string) http.Header { return http.Header{"Retry-After": {v}} }
	cases := []struct {
		name, value, unit string
		max               time.Duration
		wait              time.Duration
		ok                bool
		gotUnit           string
	}{
		{"seconds", "120", "seconds", time.Hour, 2 * time.Minute, true, "seconds"},
		{"HubSpot workflow milliseconds", "60", "milliseconds", time.Hour, 60 * time.Millisecond, true, "milliseconds"},
		{"fractional seconds", "1.5", "seconds", time.Hour, 1500 * time.Millisecond, true, "seconds"},
		{"bounded", "86400", "seconds", time.Hour, time.Hour, true, "seconds"},
		{"HTTP date", now.Add(90 * time.Second).Format(http.TimeFormat), "seconds", time.Hour, 90 * time.Second, true, "date"},
		{"date in the past", now.Add(-time.Minute).Format(http.TimeFormat), "seconds", time.Hour, 0, true, "date"},
		{"garbage", "soon", "seconds", time.Hour, 0, false, ""},
		{"negative", "-5", "seconds", time.Hour, 0, false, ""},
		{"absent", "", "seconds", time.Hour, 0, false, ""},
	}
	for _, tc := range cases {
		ra := parseRetryAfter(h(tc.value), tc.unit, tc.max, now)
		if ra.OK != tc.ok || ra.Wait != tc.wait || ra.Unit != tc.gotUnit || ra.Raw != tc.value {
			t.Errorf("%s: %+v, want ok=%v wait=%v unit=%q raw=%q", tc.name, ra, tc.ok, tc.wait, tc.gotUnit, tc.value)
		}
	}
}

func dest(t *testing.T, yaml string) *config.Destination {
	t.Helper()
	c, err := config.Parse("d.yaml", []byte("destinations:\n"+yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return &c.Destinations[0]
}

func TestClassify(t *testing.T) {
	generic := dest(t, "  - name: g\n    base_url: https://x\n")
	stripe := dest(t, "  - name: s\n    preset: stripe\n    base_url: https://x\n")
	sf := dest(t, "  - name: sf\n    preset: salesforce\n    base_url: https://x\n")
	marketo := dest(t, "  - name: m\n    preset: marketo\n    base_url: https://x\n")
	custom := dest(t, "  - name: c\n    base_url: https://x\n    classify:\n      - when: 'status == 200 && body.results.exists(r, r.status == \"failed\")'\n        class: hidden_failure\n        reason: a record failed\n")
	r := func(status int, body string) *Response {
		return &Response{Status: status, Body: []byte(body), Sent: true}
	}
	cases := []struct {
		name string
		d    *config.Destination
		resp *Response
		err  error
		want string
	}{
		{"200", generic, r(200, `{}`), nil, "success"},
		{"201", generic, r(201, ``), nil, "success"},
		{"500", generic, r(500, ``), nil, "transient"},
		{"503", generic, r(503, ``), nil, "transient"},
		{"429", generic, r(429, ``), nil, "quota"},
		{"400", generic, r(400, ``), nil, "permanent"},
		{"404", generic, r(404, ``), nil, "permanent"},
		{"422", generic, r(422, ``), nil, "permanent"},
		{"409", generic, r(409, ``), nil, "contention"},
		{"302 is not followed", generic, r(302, ``), nil, "permanent"},
		{"not sent", generic, &Response{Sent: false}, errString("connection refused"), "transient"},
		{"sent, then timeout", generic, &Response{Sent: true}, errString("context deadline exceeded"), "unknown_outcome"},
		{"stripe lock_timeout", stripe, r(429, `{"error":{"code":"lock_timeout"}}`), nil, "contention"},
		{"stripe rate limit", stripe, r(429, `{"error":{"code":"rate_limit"}}`), nil, "quota"},
		{"salesforce quota as 403", sf, r(403, `[{"errorCode":"REQUEST_LIMIT_EXCEEDED"}]`), nil, "quota"},
		{"salesforce other 403", sf, r(403, `[{"errorCode":"INSUFFICIENT_ACCESS"}]`), nil, "permanent"},
		{"marketo success false", marketo, r(200, `{"success":false,"errors":[{"code":"1003"}]}`), nil, "hidden_failure"},
		{"marketo success true", marketo, r(200, `{"success":true}`), nil, "success"},
		{"batch per-record failure", custom, r(200, `{"results":[{"status":"ok"},{"status":"failed"}]}`), nil, "hidden_failure"},
		{"batch all ok", custom, r(200, `{"results":[{"status":"ok"}]}`), nil, "success"},
	}
	for _, tc := range cases {
		got, reason := Classify(tc.d, tc.resp, tc.err)
		if string(got) != tc.want {
			t.Errorf("%s: %s (%s), want %s", tc.name, got, reason, tc.want)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }
