package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// The retention benchmark runs end to end on a small SQLite store and its
// own check passes: the pass deletes exactly the rows the fixture planted
// past retention.
func TestRetentionBenchSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a store")
	}
	var out, errOut bytes.Buffer
	code := Main(context.Background(), []string{"retention", "--events", "10000", "--entities", "100",
		"--baseline", "200ms", "--rate", "100", "--dir", t.TempDir()}, &out, &errOut)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errOut.String())
	}
	if !strings.Contains(out.String(), "deleted: 4988 events, 4988 deliveries, 4988 work, 9976 audit, 1250 effects (tombstoned)") {
		t.Errorf("output:\n%s", out.String())
	}
}
