package deliver

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/hookledger/hookledger/internal/vendors"
)

// wantByStatus is the default class of every status an API answers, for a
// body no preset rule recognises. A wrong row here is a retry storm (a
// permanent error retried) or a lost effect (a transient one given up).
func wantByStatus(status int) string {
	switch {
	case status >= 200 && status < 300:
		return "success"
	case status == http.StatusRequestTimeout:
		return "transient"
	case status == http.StatusConflict:
		return "contention"
	case status == http.StatusTooManyRequests:
		return "quota"
	case status >= 500:
		return "transient"
	default:
		return "permanent"
	}
}

// Every status from 200 to 599 on every preset: the explicit rows are the
// ones a mistake would hurt most (401 retried as transient, 410 retried,
// 429 treated as a failure to give up on).
func TestClassifyEveryStatusOnEveryPreset(t *testing.T) {
	explicit := map[int]string{
		401: "permanent", 403: "permanent", 404: "permanent", 405: "permanent", 409: "contention",
		410: "permanent", 422: "permanent", 429: "quota", 500: "transient", 502: "transient",
		503: "transient", 504: "transient",
	}
	for code, want := range explicit {
		if got := wantByStatus(code); got != want {
			t.Fatalf("table itself: %d is %s, want %s", code, got, want)
		}
	}
	// Statuses some preset classifies on purpose, with any body.
	special := map[string]map[int]string{
		"hubspot": {207: "hidden_failure"},
	}
	for _, p := range vendors.Presets() {
		d := dest(t, fmt.Sprintf("  - name: d\n    preset: %s\n    base_url: https://x\n", p.Name))
		for status := 200; status < 600; status++ {
			want := wantByStatus(status)
			if s, ok := special[p.Name][status]; ok {
				want = s
			}
			for _, body := range []string{"", `{"error":"something"}`} {
				got, reason := Classify(d, &Response{Status: status, Body: []byte(body), Sent: true}, nil)
				if string(got) != want {
					t.Errorf("preset %s, HTTP %d, body %q: %s (%s), want %s", p.Name, status, body, got, reason, want)
				}
			}
		}
	}
}
