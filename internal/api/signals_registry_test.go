package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/store"
)

// The signals and their history are the config's registry's: a
// test-only signal is answered after the built-in ones and has a
// history; the built-in registry refuses its name.
func TestSignalsFollowTheRegistry(t *testing.T) {
	probe := store.SignalDef{Name: "test_probe", Title: "Test probe", Help: "Two, for a test.", Defaults: store.SignalLimits{Alert: 2},
		List: store.SignalList{Path: "/events"},
		Measure: func(m *store.SignalMeasure, read store.SignalRead) error {
			_, err := read(store.SignalQueryUnfinished)
			m.Count(2, time.Time{})
			return err
		}}
	reg, err := store.NewSignalRegistry(append(store.BuiltinSignals().All(), probe)...)
	if err != nil {
		t.Fatal(err)
	}
	f := signalsFixture(t) // the built-in registry
	if code, b := f.do(http.MethodGet, "/api/v1/signals/history?name=test_probe", ""); code != http.StatusBadRequest ||
		!strings.Contains(string(b), `"param":"name"`) {
		t.Errorf("built-in registry, history of test_probe: %d %s, want 400 naming name", code, b)
	}

	h := api.New(f.st, token, slog.New(slog.DiscardHandler), func() time.Time { return t0.Add(time.Hour) })
	h.ServeSignals(config.Signals{Registry: reg, Window: config.Duration(time.Hour)})
	f.srv = httptest.NewServer(openapitest.Wrap(t, h))
	t.Cleanup(f.srv.Close)
	var got signalsAnswer
	if code := f.get("/api/v1/signals", &got); code != http.StatusOK || len(got.Signals) != len(reg.Names()) {
		t.Fatalf("GET /api/v1/signals: %d %+v", code, got)
	}
	if p := got.Signals[len(got.Signals)-1]; p.Name != "test_probe" || p.Value != 2 || p.Status != "alert" || p.OldestAgeSeconds != nil {
		t.Errorf("test_probe = %+v, want 2 alert without an age", p)
	}
	if err := f.st.SignalHistoryRecord(f.ctx, &store.SignalHistoryRecordParams{Now: t0,
		Points: []store.SignalHistoryInput{{Name: "test_probe", Value: 2, Status: "alert"}}}); err != nil {
		t.Fatal(err)
	}
	var hist api.SignalHistoryJSON
	if code := f.get("/api/v1/signals/history?name=test_probe", &hist); code != http.StatusOK || len(hist.Points) != 1 || hist.Points[0].Value != 2 {
		b, _ := json.Marshal(hist)
		t.Errorf("history of test_probe: %d %s", code, b)
	}
}
