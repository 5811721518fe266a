package console

import (
	"context"
	"encoding/json"
	"html"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
)

func startOverview(t *testing.T, cfg config.Signals) (*fixture, *client) {
	t.Helper()
	f := newFixture(t, 0)
	con := New(f.st, testToken, slog.New(slog.DiscardHandler), f.clk, WithSignals(cfg))
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	c := newClient(t, srv)
	c.login()
	return f, c
}

// nowBlock is one signal's refreshed block of a page or a fragment.
func nowBlock(t *testing.T, body, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<div class="now status-\w+" id="now-` + name + `".*?</div>`).FindString(body)
	if m == "" {
		t.Fatalf("no block for %s in:\n%s", name, body)
	}
	return html.UnescapeString(m)
}

// The overview shows the nine signals in their pinned order, each with a
// status word, and every number leads to the list behind it. The fixture
// holds one dead effect (owner unassigned) and a routed event not yet
// settled.
func TestOverviewSignals(t *testing.T) {
	f, c := startOverview(t, config.Signals{})
	resp, body := c.get("/")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /: %d %s", resp.StatusCode, body)
	}
	last := -1
	for _, name := range store.SignalNames() {
		i := strings.Index(body, `id="signal-`+name+`"`)
		if i < 0 || i < last {
			t.Fatalf("signal %s missing or out of the pinned order (at %d after %d)", name, i, last)
		}
		last = i
		block := nowBlock(t, body, name)
		if !regexp.MustCompile(`class="badge (ok|pending|alert)" data-status="(ok|warn|alert)">(OK|Warn|Alert)<`).MatchString(block) {
			t.Errorf("%s has no status word: %s", name, block)
		}
	}
	dead := nowBlock(t, body, store.SignalDeadLetters)
	for _, want := range []string{`href="/effects?state=dead"`, `>1</a>`, `data-status="warn">Warn<`, "oldest 1m 0s",
		`href="/events?disposition=dead_lettered"`, `kind effects: <a href="/effects?state=dead">1</a>`, "owner unassigned: 1"} {
		if !strings.Contains(dead, want) {
			t.Errorf("dead_letters block lacks %q:\n%s", want, dead)
		}
	}
	links := map[string]string{
		store.SignalRevisionLag:              `href="/events?disposition=accepted"`,
		store.SignalUnfinishedEvents:         `href="/events?disposition=accepted"`,
		store.SignalDeadlineRisk:             `href="/effects?deadline_missed=true&state=any"`,
		store.SignalUnknownOutcomes:          `href="/effects?state=needs_reconciliation"`,
		store.SignalKeyConflicts:             `href="/audit?action=key_conflict&from=2026-11-02T09%3A03%3A04Z"`,
		store.SignalReconciliationMismatches: `href="/audit?action=reconciliation_mismatch"`,
		store.SignalCompensationOutstanding:  `href="/effects?compensations=true&state=approved%2Csubmitting%2Cacknowledged%2Cneeds_reconciliation%2Cretry_wait%2Cdead"`,
		store.SignalLoopBlocks:               `href="/audit?action=loop_hop_limit&from=2026-11-02T09%3A03%3A04Z"`,
	}
	for name, want := range links {
		if b := nowBlock(t, body, name); !strings.Contains(b, want) {
			t.Errorf("%s: no link %s in\n%s", name, want, b)
		}
	}
	// Every link the signals give opens a list that accepts its filters.
	for _, href := range regexp.MustCompile(`href="(/[^"]*)"`).FindAllStringSubmatch(body, -1) {
		u := html.UnescapeString(href[1])
		if strings.HasPrefix(u, "/assets/") {
			continue
		}
		if resp, page := c.get(u); resp.StatusCode != http.StatusOK {
			t.Errorf("link %s: %d\n%.300s", u, resp.StatusCode, page)
		}
	}

	// A day later the dead letter is past its alert age: the refresh
	// says so, in words.
	f.clk.Advance(25 * time.Hour)
	c.login() // the session lasts 12 hours
	resp, frag := c.get("/overview/rows", "HX-Request", "true")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /overview/rows: %d", resp.StatusCode)
	}
	if b := nowBlock(t, frag, store.SignalDeadLetters); !strings.Contains(b, `class="badge alert" data-status="alert">Alert<`) ||
		!strings.Contains(b, "status-alert") || !strings.Contains(b, "oldest 1d 1h") {
		t.Errorf("dead_letters a day later:\n%s", b)
	}
	if strings.Count(frag, `hx-swap-oob="true"`) != 9+1+4 {
		t.Errorf("the refresh has %d out-of-band blocks, want the nine signals, the time and four trends", strings.Count(frag, `hx-swap-oob="true"`))
	}
	if strings.Contains(frag, "<html") || strings.Contains(frag, "spark") {
		t.Error("the refresh carries more than the numbers")
	}
}

// The thresholds come from the config: with dead_letters alerting at 1,
// the one dead effect is an alert at once.
func TestOverviewUsesConfiguredThresholds(t *testing.T) {
	one := int64(1)
	_, c := startOverview(t, config.Signals{Thresholds: map[string]config.SignalThreshold{
		store.SignalDeadLetters: {Alert: &one}}})
	_, body := c.get("/")
	if b := nowBlock(t, body, store.SignalDeadLetters); !strings.Contains(b, `data-status="alert">Alert<`) {
		t.Errorf("dead_letters with alert: 1:\n%s", b)
	}
	if !strings.Contains(body, `Worst status: <span class="badge alert">alert</span>`) {
		t.Error("the worst status is not shown as alert")
	}
}

// The series behind the charts: nine signals and five trends, rates in
// their unit, a gap as null; not served without a session.
func TestOverviewSeriesJSON(t *testing.T) {
	f, c := startOverview(t, config.Signals{})
	now := f.clk.Now()
	ctx := context.Background()
	for _, p := range []struct {
		at    time.Duration
		value int64
	}{{-10 * time.Minute, 1}, {-9 * time.Minute, 2}, {-2 * time.Minute, 3}} {
		if err := f.st.SignalHistoryRecord(ctx, &store.SignalHistoryRecordParams{Now: now.Add(p.at), Points: []store.SignalHistoryInput{
			{Name: store.SignalDeadLetters, Value: p.value, Status: signals.StatusWarn},
			{Name: signals.TrendReceived, Value: 1500 * p.value, Status: signals.StatusOK},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	resp, body := c.get("/overview/series.json")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /overview/series.json: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var got struct {
		From, To int64
		Series   map[string]struct {
			T []int64
			V []*float64
			S []string
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Series) != 9+5 || got.To-got.From != 24*3600 || got.To <= now.Unix() {
		t.Fatalf("series %d, span %d..%d around %d", len(got.Series), got.From, got.To, now.Unix())
	}
	dl := got.Series[store.SignalDeadLetters]
	var vs []string
	for _, v := range dl.V {
		if v == nil {
			vs = append(vs, "gap")
		} else {
			vs = append(vs, strings.TrimRight(strings.TrimRight(jsonNum(*v), "0"), "."))
		}
	}
	if strings.Join(vs, ",") != "1,2,gap,3" || dl.S[0] != "warn" {
		t.Errorf("dead_letters series %v %v, want 1,2,gap,3 warn", vs, dl.S)
	}
	if r := got.Series[signals.TrendReceived].V; len(r) != 4 || *r[3] != 4.5 {
		t.Errorf("received series %v, want the last at 4.5/s", r)
	}

	// Without a session: 401, no data.
	anon := newClient(t, httptest.NewServer(http.NotFoundHandler()))
	anon.base = c.base
	if resp, body := anon.get("/overview/series.json"); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "series") {
		t.Errorf("series without a session: %d %.80q", resp.StatusCode, body)
	}
	if resp, body := anon.get("/overview/rows"); resp.StatusCode != http.StatusUnauthorized || strings.Contains(body, "now-") {
		t.Errorf("refresh without a session: %d %.80q", resp.StatusCode, body)
	}
}

func jsonNum(f float64) string {
	b, _ := json.Marshal(f)
	return string(b) + ".0"
}

// The audit list filters by action and refuses an unknown filter by name.
func TestAuditPage(t *testing.T) {
	f, c := startOverview(t, config.Signals{})
	ctx := context.Background()
	for _, a := range []string{"key_conflict", "loop_blocked", "key_conflict"} {
		if _, err := f.st.AuditInsert(ctx, &store.AuditInsertParams{At: f.clk.Now(), Actor: "worker", Action: a,
			Source: "stripe", EventID: "evt_1", Detail: a + " <b>detail</b>"}); err != nil {
			t.Fatal(err)
		}
	}
	resp, body := c.get("/audit?action=key_conflict&limit=1")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /audit: %d", resp.StatusCode)
	}
	rows := regexp.MustCompile(`(?s)<div id="audit-rows">.*?</table>`).FindString(body)
	if strings.Count(rows, "<tr>") != 2 || !strings.Contains(rows, "key_conflict &lt;b&gt;detail&lt;/b&gt;") || strings.Contains(rows, "loop_blocked") {
		t.Errorf("audit rows for key_conflict, one a page:\n%s", rows)
	}
	next := regexp.MustCompile(`href="([^"]+)" rel="next"`).FindStringSubmatch(body)
	if next == nil {
		t.Fatal("no next page")
	}
	if _, body := c.get(html.UnescapeString(next[1])); !strings.Contains(body, "key_conflict &lt;b&gt;") || strings.Contains(body, `rel="next"`) {
		t.Errorf("second page:\n%s", body)
	}
	if resp, body := c.get("/audit?colour=red"); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "colour") {
		t.Errorf("unknown filter: %d", resp.StatusCode)
	}
}
