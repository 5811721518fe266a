package server

import (
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricValue is the value of the unlabelled counter name in a Prometheus
// text exposition, and whether there is one.
func metricValue(t *testing.T, body, name string) (float64, bool) {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("/metrics is not the text exposition: %v", err)
	}
	mf := mfs[name]
	if mf == nil || len(mf.GetMetric()) == 0 {
		return 0, false
	}
	return mf.GetMetric()[0].GetCounter().GetValue(), true
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
	busy, hasBusy := metricValue(t, string(b), "hookledger_store_writer_busy_seconds_total")
	commit, hasCommit := metricValue(t, string(b), "hookledger_store_writer_commit_seconds_total")
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
