package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// A signal added to the registry, and nothing else, is in every place the
// product shows the signals: GET /api/v1/signals and its history, the
// Prometheus gauges the monitor exports, and the console's overview with
// its title, help and links.
func TestRegisteredSignalEverywhere(t *testing.T) { stores(t, testRegisteredSignalEverywhere) }

func testRegisteredSignalEverywhere(t *testing.T, storeURL string) {
	probe := store.SignalDef{Name: "test_probe", Title: "Test probe", Help: "Three items, always, for a test.",
		Defaults: store.SignalLimits{Warn: 3},
		List:     store.SignalList{Path: "/effects", Filters: []string{"state", "dead"}},
		Keys:     []store.SignalKeyLink{{Dim: "kind", List: store.SignalList{Path: "/events", Filters: []string{"disposition", "dead_lettered"}}}},
		Measure: func(m *store.SignalMeasure, read store.SignalRead) error {
			_, err := read(store.SignalQueryDeadEvents)
			m.Count(3, t0.Add(-time.Hour))
			m.Break("kind", "probe", 3)
			return err
		}}
	reg, err := store.NewSignalRegistry(append(store.BuiltinSignals().All(), probe)...)
	if err != nil {
		t.Fatal(err)
	}
	cfg := parseConfig(t, testConfig(storeURL)+"signals:\n  interval: 20ms\n")
	cfg.Signals.Registry = reg
	h := startConfig(t, cfg, t0)

	// The API.
	code, b := h.get("/api/v1/signals", adminToken)
	var doc struct {
		Signals []struct {
			Name             string
			Value            int64
			OldestAgeSeconds *int64 `json:"oldest_age_seconds"`
			Status           string
			Breakdown        map[string]map[string]int64
		}
	}
	if code != http.StatusOK || json.Unmarshal(b, &doc) != nil || len(doc.Signals) != len(reg.Names()) {
		t.Fatalf("GET /api/v1/signals: %d %s", code, b)
	}
	for i, name := range reg.Names() {
		if doc.Signals[i].Name != name {
			t.Errorf("signal %d is %s, want %s", i, doc.Signals[i].Name, name)
		}
	}
	if p := doc.Signals[len(doc.Signals)-1]; p.Value != 3 || p.Status != "warn" || p.OldestAgeSeconds == nil ||
		*p.OldestAgeSeconds != 3600 || p.Breakdown["kind"]["probe"] != 3 {
		t.Errorf("test_probe = %+v, want 3 warn aged 3600 s", p)
	}

	// The gauges and the history, from the monitor's rounds.
	waitFor(t, "the test signal's gauges", func() bool {
		_, m := h.get("/metrics", "")
		return strings.Contains(string(m), `hookledger_signal_value{signal="test_probe"} 3`) &&
			strings.Contains(string(m), `hookledger_signal_status{signal="test_probe"} 1`)
	})
	waitFor(t, "the test signal's history", func() bool {
		code, b := h.get("/api/v1/signals/history?name=test_probe", adminToken)
		return code == http.StatusOK && strings.Contains(string(b), `"value":3,"status":"warn"`)
	})

	// The console.
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp, err := hc.PostForm(h.base+"/login", url.Values{"token": {adminToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = hc.Get(h.base + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`id="now-test_probe"`, `<h3>Test probe <code>test_probe</code></h3>`, "Three items, always, for a test.",
		`href="/effects?state=dead" aria-label="Test probe: 3, open the list"`,
		`kind probe: <a href="/events?disposition=dead_lettered">3</a>`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the overview lacks %s", want)
		}
	}
}
