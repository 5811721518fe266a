package api_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/store"
)

// signalsFixture is the fixture's store behind an API that serves the
// signals with the default thresholds.
func signalsFixture(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	cfg, err := config.Parse("s.yaml", []byte("# defaults\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	h := api.New(f.st, token, slog.New(slog.NewTextHandler(f.log, nil)), func() time.Time { return t0.Add(time.Hour) })
	h.ServeSignals(cfg.Signals)
	f.srv = httptest.NewServer(openapitest.Wrap(t, h))
	t.Cleanup(f.srv.Close)
	return f
}

func TestSignalsNeedTheToken(t *testing.T) {
	f := signalsFixture(t)
	for _, path := range []string{"/api/v1/signals", "/api/v1/signals/history?name=dead_letters"} {
		for _, auth := range []string{"", "Bearer wrong", "Basic " + token} {
			req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("GET %s with %q: %d, want 401", path, auth, resp.StatusCode)
			}
		}
	}
}

func TestSignalsRefuseWhatTheyCannotUse(t *testing.T) {
	f := signalsFixture(t)
	for path, param := range map[string]string{
		"/api/v1/signals?name=dead_letters":                                                          "name",
		"/api/v1/signals?b=1&a=2":                                                                    "a",
		"/api/v1/signals/history":                                                                    "name",
		"/api/v1/signals/history?name=dead_letter":                                                   "name",
		"/api/v1/signals/history?name=dead_letters&name=loop_blocks":                                 "name",
		"/api/v1/signals/history?name=loop_blocks&resolution=second":                                 "resolution",
		"/api/v1/signals/history?name=loop_blocks&from=yesterday":                                    "from",
		"/api/v1/signals/history?name=loop_blocks&to=2026-11-03":                                     "to",
		"/api/v1/signals/history?name=loop_blocks&limit=5":                                           "limit",
		"/api/v1/signals/history?name=loop_blocks&from=2099-01-01T00:00:00Z":                         "from",
		"/api/v1/signals/history?name=loop_blocks&from=2026-11-03T10:00:00Z&to=2026-11-03T09:00:00Z": "to",
	} {
		code, b := f.do(http.MethodGet, path, "")
		var e struct{ Error, Param string }
		if code != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Param != param || !strings.HasPrefix(e.Error, param+": ") {
			t.Errorf("GET %s: %d %s, want 400 naming %q", path, code, b, param)
		}
	}
}

func TestSignalHistoryFilterDefaults(t *testing.T) {
	now := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		query      string
		from, to   time.Time
		resolution string
	}{
		{"name=dead_letters", now.Add(-24 * time.Hour), now.Add(time.Minute), store.ResolutionMinute},
		{"name=dead_letters&from=2026-11-03T11:00:00Z", now.Add(-time.Hour), now.Add(time.Minute), store.ResolutionMinute},
		{"name=dead_letters&to=2026-11-02T12:00:00Z", now.Add(-48 * time.Hour), now.Add(-24 * time.Hour), store.ResolutionMinute},
		{"name=dead_letters&from=2026-10-01T00:00:00Z", time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), now.Add(time.Hour), store.ResolutionHour},
		{"name=dead_letters&from=2026-11-02T11:59:59Z&to=2026-11-03T12:00:00Z", now.Add(-24*time.Hour - time.Second), now, store.ResolutionHour},
		{"name=dead_letters&from=2026-10-01T00:00:00Z&resolution=minute", time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC), now.Add(time.Minute), store.ResolutionMinute},
		{"name=dead_letters&resolution=hour", now.Add(-24 * time.Hour), now.Add(time.Hour), store.ResolutionHour},
	} {
		v, _ := url.ParseQuery(tc.query)
		p, err := api.SignalHistoryFilter(v, now)
		if err != nil {
			t.Errorf("%s: %v", tc.query, err)
			continue
		}
		if p.Name != "dead_letters" || !p.From.Equal(tc.from) || !p.To.Equal(tc.to) || p.Resolution != tc.resolution {
			t.Errorf("%s: %+v, want from %s to %s resolution %s", tc.query, p, tc.from, tc.to, tc.resolution)
		}
	}
}

// A store that fails is answered 503 by both resources, its words in the
// log only.
func TestSignalsStoreFailureIs503(t *testing.T) {
	f := signalsFixture(t)
	if err := f.st.Close(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/v1/signals", "/api/v1/signals/history?name=revision_lag"} {
		code, b := f.do(http.MethodGet, path, "")
		if code != http.StatusServiceUnavailable || strings.TrimSpace(string(b)) != `{"error":"store unavailable"}` {
			t.Errorf("GET %s: %d %s, want 503", path, code, b)
		}
	}
}

type signalsAnswer struct {
	Signals []struct {
		Name             string
		Value            int64
		OldestAgeSeconds *int64 `json:"oldest_age_seconds"`
		Status           string
		Breakdown        map[string]map[string]int64
	}
	At string
}

// The nine signals in their pinned order, each with a status; a dead
// effect shows in dead_letters with its owner and age.
func TestSignalsAnswerTheNine(t *testing.T) {
	f := signalsFixture(t)
	var empty signalsAnswer
	if code := f.get("/api/v1/signals", &empty); code != http.StatusOK {
		t.Fatalf("GET /api/v1/signals: %d (log: %s)", code, f.log)
	}
	if len(empty.Signals) != 9 || empty.At != "2026-11-03T10:00:00Z" {
		t.Fatalf("answer = %+v", empty)
	}
	for i, name := range store.SignalNames() {
		s := empty.Signals[i]
		if s.Name != name || s.Value != 0 || s.Status != "ok" || s.OldestAgeSeconds != nil || s.Breakdown == nil {
			t.Errorf("empty store: signal %d = %+v, want %s 0 ok", i, s, name)
		}
	}

	pk := f.event("shop", "e1", "order.created", "")
	f.route(pk, store.Route{Flow: "orders", Entity: "o1", OrderKey: "1"})
	id := f.apply("orders", "o1", "crm")[0]
	f.settle(id, store.EffectDead, store.ClassPermanent)
	var got signalsAnswer
	if code := f.get("/api/v1/signals", &got); code != http.StatusOK {
		t.Fatalf("GET /api/v1/signals: %d", code)
	}
	dl := got.Signals[5]
	if dl.Name != "dead_letters" || dl.Value != 1 || dl.Status != "warn" || dl.OldestAgeSeconds == nil || *dl.OldestAgeSeconds != 3600 {
		t.Errorf("dead_letters = %+v, want 1 warn aged 3600 s", dl)
	}
	if dl.Breakdown["owner"]["unassigned"] != 1 {
		t.Errorf("dead_letters breakdown = %v", dl.Breakdown)
	}
}

func TestSignalHistory(t *testing.T) {
	f := signalsFixture(t)
	for i, v := range []int64{3, 1} {
		if err := f.st.SignalHistoryRecord(f.ctx, &store.SignalHistoryRecordParams{Now: t0.Add(time.Duration(i) * time.Minute),
			Points: []store.SignalHistoryInput{{Name: "dead_letters", Value: v, Status: "warn"}}}); err != nil {
			t.Fatal(err)
		}
	}
	var got api.SignalHistoryJSON
	if code := f.get("/api/v1/signals/history?name=dead_letters", &got); code != http.StatusOK {
		t.Fatalf("history: %d (log: %s)", code, f.log)
	}
	if got.Name != "dead_letters" || got.Resolution != "minute" || len(got.Points) != 2 ||
		got.Points[0] != (api.SignalPointJSON{At: "2026-11-03T09:00:00Z", Value: 3, Status: "warn"}) || got.Points[1].Value != 1 {
		t.Errorf("history = %+v", got)
	}
	if code := f.get("/api/v1/signals/history?name=dead_letters&from=2026-10-01T00:00:00Z", &got); code != http.StatusOK {
		t.Fatalf("history: %d", code)
	}
	if got.Resolution != "hour" || len(got.Points) != 1 || got.Points[0] != (api.SignalPointJSON{At: "2026-11-03T09:00:00Z", Value: 3, Status: "warn"}) {
		t.Errorf("hourly history = %+v", got)
	}
}
