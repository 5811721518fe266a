package server

import (
	"strconv"
	"strings"
	"testing"
)

// metricValue is the value of the unlabelled sample name in a Prometheus
// exposition, and whether there is one.
func metricValue(body, name string) (float64, bool) {
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// On SQLite, /metrics tells how long the one writer has been busy and, of
// that, committing; after an acknowledged webhook both have grown, the
// commit within the busy time. PostgreSQL has no single writer, so the
// series are not there to be misread.
func TestWriterTimeMetrics(t *testing.T) { stores(t, testWriterTimeMetrics) }

func testWriterTimeMetrics(t *testing.T, storeURL string) {
	h := start(t, storeURL)
	body := stripeBody("evt_writer_1", "customer.subscription.updated", "")
	if code, resp, _ := h.post("/hooks/stripe", body, stripeHeader(body, stripeSecret, t0)); code != 200 {
		t.Fatalf("stripe: %d %s", code, resp)
	}
	code, b := h.get("/metrics", adminToken)
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	busy, hasBusy := metricValue(string(b), "hookledger_store_writer_busy_seconds_total")
	commit, hasCommit := metricValue(string(b), "hookledger_store_writer_commit_seconds_total")
	if strings.HasPrefix(storeURL, "postgres") {
		if hasBusy || hasCommit {
			t.Fatalf("PostgreSQL exports a single writer's time: busy %v commit %v", busy, commit)
		}
		return
	}
	if !hasBusy || !hasCommit {
		t.Fatalf("SQLite's writer time is not exported (busy %v, commit %v)", hasBusy, hasCommit)
	}
	if commit <= 0 || busy < commit {
		t.Fatalf("after an acknowledged webhook: busy %v s, commit %v s; want 0 < commit <= busy", busy, commit)
	}
}
