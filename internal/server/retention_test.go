package server

import (
	"strings"
	"testing"
)

// The running server starts the retention loop: its first pass runs at
// start and its metrics are exported.
func TestRetentionLoopRuns(t *testing.T) { stores(t, testRetentionLoopRuns) }

func testRetentionLoopRuns(t *testing.T, storeURL string) {
	h := start(t, storeURL)
	var metrics string
	waitFor(t, "the first retention pass", func() bool {
		_, m := h.get("/metrics", "")
		metrics = string(m)
		return strings.Contains(metrics, "hookledger_retention_last_run_timestamp_seconds") &&
			!strings.Contains(metrics, "hookledger_retention_last_run_timestamp_seconds 0\n")
	})
	for _, want := range []string{`hookledger_retention_deleted_rows_total{table="events"} 0`, "hookledger_retention_last_run_duration_seconds"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}
