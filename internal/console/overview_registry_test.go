package console

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// The overview words and links each signal as its registry entry says: a
// test-only signal has its card, its links (a key split into two filters,
// a key left out, the window's start) and its series, with nothing in the
// console naming it.
func TestOverviewReadsTheRegistry(t *testing.T) {
	probe := store.SignalDef{Name: "test_probe", Title: "Test probe", Help: "Counted for a test.",
		List: store.SignalList{Path: "/audit", Filters: []string{"action", "key_conflict"}, Window: true},
		Also: []store.SignalList{{Label: "the events", Path: "/events"}},
		Keys: []store.SignalKeyLink{
			{Dim: "gap", List: store.SignalList{Path: "/entity"}, As: []string{"flow", "entity"}},
			{Dim: "owner", Except: "nobody", List: store.SignalList{Path: "/effects", Filters: []string{"state", "dead"}}, As: []string{"owner"}},
		},
		Measure: func(m *store.SignalMeasure, _ store.SignalRead) error {
			m.Break("gap", "orders/o1", 2)
			m.Break("gap", "plain", 1)
			m.Break("owner", "ann", 1)
			m.Break("owner", "nobody", 1)
			m.Count(2, time.Time{})
			return nil
		}}
	reg, err := store.NewSignalRegistry(append(store.BuiltinSignals().All(), probe)...)
	if err != nil {
		t.Fatal(err)
	}
	f, c := startOverview(t, config.Signals{Registry: reg, Window: config.Duration(time.Hour)})
	since := f.clk.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	_, body := c.get("/")
	b := nowBlock(t, body, "test_probe")
	for _, want := range []string{
		`href="/audit?action=key_conflict&from=` + strings.ReplaceAll(since, ":", "%3A") + `"`,
		`<a href="/events">the events</a>`,
		`gap orders/o1: <a href="/entity?entity=o1&flow=orders">2</a>`, "gap plain: 1",
		`owner ann: <a href="/effects?owner=ann&state=dead">1</a>`, "owner nobody: 1",
	} {
		if !strings.Contains(b, want) {
			t.Errorf("test_probe lacks %s:\n%s", want, b)
		}
	}
	if !strings.Contains(body, `<h3>Test probe <code>test_probe</code></h3>`) || !strings.Contains(body, "Counted for a test.") {
		t.Error("the card lacks the registry's title and help")
	}
	resp, js := c.get("/overview/series.json")
	var got struct{ Series map[string]json.RawMessage }
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(js), &got) != nil || got.Series["test_probe"] == nil {
		t.Errorf("series.json lacks test_probe: %d %.200s", resp.StatusCode, js)
	}
}
