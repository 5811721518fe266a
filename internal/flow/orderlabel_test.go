package flow

import (
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
)

// The labels read back what prepare and orderKey encode.
func TestOrderAndVersionLabels(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)
	occurred := sortInt(at.UnixMicro()) + "|evt_A1"
	hash := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, c := range []struct{ mode, key, order, version string }{
		{config.ModeRevision, sortInt(1), "r1", "r1"},
		{config.ModeRevision, sortInt(-7), "r-7", "r-7"},
		{config.ModeOccurredAt, occurred, "t2026-01-02T03:04:05.6Z/evt_A1", "t2026-01-02T03:04:05.6Z/evt_A1"},
		{config.ModeRefetch, sortInt(42), "arrival #42", "r42"},
		{config.ModeRefetch, hash, hash, "h0123456789abcdef"},
		{"", sortInt(5), "5", "r5"},
		{config.ModeRevision, "3", "3", "3"},
		{config.ModeRevision, "", "", ""},
		{config.ModeRevision, "x9223372036854775809", "x9223372036854775809", "x9223372036854775809"},
	} {
		if got := OrderLabel(c.mode, c.key); got != c.order {
			t.Errorf("OrderLabel(%q, %q) = %q, want %q", c.mode, c.key, got, c.order)
		}
		if got := VersionLabel(c.key); got != c.version {
			t.Errorf("VersionLabel(%q) = %q, want %q", c.key, got, c.version)
		}
	}
	if sortInt(1) != "09223372036854775809" {
		t.Fatalf("sortInt(1) = %s: the labels read another encoding", sortInt(1))
	}
}
