package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/storeopen"
)

// The console's overview is wired to the config's signals section and to
// the trends the monitor derives from the server's own metrics: a webhook
// received between two rounds shows as a received rate and an
// acknowledgement time in the series behind the overview's charts.
func TestOverviewServed(t *testing.T) {
	h := startWith(t, testConfig(sqliteURL(t))+"signals:\n  interval: 20ms\n  window: 2h\n")
	st, err := storeopen.Open(context.Background(), h.cfg.Store)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	minute := func(name string, at time.Time) (int64, bool) {
		pts, err := st.SignalHistoryList(context.Background(), &store.SignalHistoryListParams{Name: name,
			Resolution: store.ResolutionMinute, From: at, To: at.Add(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if len(pts) == 0 {
			return 0, false
		}
		return pts[0].Value, true
	}
	// The first round takes the counters' baseline; then one webhook,
	// then a minute passes.
	waitFor(t, "the monitor's first round", func() bool { _, ok := minute(signals.TrendExceptions, t0); return ok })
	body := stripeBody("evt_ov_1", "customer.created", "acct_123")
	if code, resp, _ := h.post("/hooks/stripe", body, stripeHeader(body, stripeSecret, t0)); code != http.StatusOK {
		t.Fatalf("webhook: %d %s", code, resp)
	}
	// The receiver counts a request just after answering it.
	waitFor(t, "the request counted", func() bool {
		_, m := h.get("/metrics", "")
		return strings.Contains(string(m), `hookledger_receive_ack_seconds_count{source="stripe"} 1`)
	})
	h.clk.Advance(time.Minute)
	waitFor(t, "a round a minute later", func() bool { _, ok := minute(signals.TrendReceived, t0.Add(time.Minute)); return ok })
	// One request in 60 s: 0.0167/s, stored in thousandths.
	if v, _ := minute(signals.TrendReceived, t0.Add(time.Minute)); v != 17 {
		t.Errorf("received rate %d thousandths per second, want 17", v)
	}
	if v, _ := minute(signals.TrendAckP99, t0.Add(time.Minute)); v <= 0 {
		t.Errorf("ack p99 %d ms, want above 0 with one request acknowledged", v)
	}

	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	resp, err := hc.PostForm(h.base+"/login", url.Values{"token": {adminToken}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	get := func(path string) string {
		t.Helper()
		resp, err := hc.Get(h.base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return string(b)
	}
	page := get("/")
	for _, name := range store.SignalNames() {
		if !strings.Contains(page, `id="now-`+name+`"`) {
			t.Errorf("the overview lacks %s", name)
		}
	}
	// The window of the config (2 h), not the default 24 h, starts the
	// audit list key_conflicts links to.
	if want := "/audit?action=key_conflict&amp;from=2026-11-03T07%3A01%3A00Z"; !strings.Contains(page, want) {
		t.Errorf("the overview's key_conflicts link is not %s", want)
	}
	var series struct {
		Series map[string]struct {
			V []*float64 `json:"v"`
		} `json:"series"`
	}
	if err := json.Unmarshal([]byte(get("/overview/series.json")), &series); err != nil {
		t.Fatal(err)
	}
	if v := series.Series[signals.TrendReceived].V; len(v) != 1 || *v[0] != 0.017 {
		t.Errorf("the received series %v, want one minute at 0.017/s", v)
	}
}
