package server

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
)

// The running server answers the nine signals with their statuses, and
// its monitor exports them (and the queues) as gauges and records them
// in the history.
func TestSignalsServedAndExported(t *testing.T) { stores(t, testSignalsServedAndExported) }

func testSignalsServedAndExported(t *testing.T, storeURL string) {
	h := start(t, storeURL)
	if code, _ := h.get("/api/v1/signals", ""); code != 401 {
		t.Errorf("no token: %d, want 401", code)
	}
	code, b := h.get("/api/v1/signals", adminToken)
	if code != 200 {
		t.Fatalf("GET /api/v1/signals: %d %s", code, b)
	}
	var raw struct {
		Signals []map[string]any `json:"signals"`
		At      string           `json:"at"`
	}
	if err := json.Unmarshal(b, &raw); err != nil || len(raw.Signals) != 9 || raw.At != "2026-11-03T09:00:00Z" {
		t.Fatalf("answer %s (%v)", b, err)
	}
	for i, name := range store.SignalNames() {
		s := raw.Signals[i]
		for _, k := range []string{"name", "value", "oldest_age_seconds", "status", "breakdown"} {
			if _, ok := s[k]; !ok {
				t.Errorf("signal %d lacks %q: %v", i, k, s)
			}
		}
		if s["name"] != name || s["status"] != "ok" {
			t.Errorf("signal %d = %v, want %s ok on an empty store", i, s, name)
		}
	}

	// The monitor's first round runs at start, in the background, and
	// sets its gauges one after another: wait for every one checked below
	// (the effects queue's age is set after its depth).
	var metrics string
	waitFor(t, "the monitor's first round", func() bool {
		_, m := h.get("/metrics", "")
		metrics = string(m)
		for _, name := range store.SignalNames() {
			if !strings.Contains(metrics, fmt.Sprintf(`hookledger_signal_value{signal=%q}`, name)) ||
				!strings.Contains(metrics, fmt.Sprintf(`hookledger_signal_status{signal=%q}`, name)) {
				return false
			}
		}
		return strings.Contains(metrics, `hookledger_queue_depth{queue="work"}`) &&
			strings.Contains(metrics, `hookledger_queue_oldest_age_seconds{queue="effects"}`)
	})
	for _, name := range store.SignalNames() {
		for _, want := range []string{fmt.Sprintf(`hookledger_signal_value{signal=%q} 0`, name), fmt.Sprintf(`hookledger_signal_status{signal=%q} 0`, name)} {
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	}
	for _, want := range []string{`hookledger_queue_depth{queue="work"} 0`, `hookledger_queue_oldest_age_seconds{queue="effects"} 0`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	code, b = h.get("/api/v1/signals/history?name=dead_letters", adminToken)
	var hist struct {
		Name, Resolution string
		Points           []struct {
			At     string
			Value  int64
			Status string
		}
	}
	if code != 200 || json.Unmarshal(b, &hist) != nil || hist.Resolution != "minute" || len(hist.Points) != 1 ||
		hist.Points[0].At != "2026-11-03T09:00:00Z" || hist.Points[0].Status != "ok" {
		t.Errorf("history: %d %s", code, b)
	}
	if code, b := h.get("/api/v1/signals/history?name=bogus", adminToken); code != 400 || !strings.Contains(string(b), `"param":"name"`) {
		t.Errorf("history of an unknown signal: %d %s, want 400 naming name", code, b)
	}
}
