package logging

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
)

func TestRepeatsHoldsBackAndLogsRecovery(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	clk := clock.NewFake(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
	r := NewRepeats(log, clk, "processing", 30*time.Second)
	down := errors.New("failed to connect to `host=db`:\n\t127.0.0.1:5432: dial error")

	r.OK()         // nothing failed: nothing to say
	for range 50 { // ten a second for five seconds
		r.Fail("processing step failed", down)
		clk.Advance(100 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "level=ERROR") || !strings.Contains(lines[0], "dial error") {
		t.Fatalf("50 failures in 5 s logged %d lines, want 1:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], "failed to connect to `host=db`:; 127.0.0.1:5432") {
		t.Errorf("error text not kept on one line: %s", lines[0])
	}
	clk.Advance(30 * time.Second)
	r.Fail("processing step failed", down)
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[1], "repeats_held_back=49") {
		t.Fatalf("after the window: %d lines, want a second one counting 49 held back:\n%s", len(lines), buf.String())
	}
	clk.Advance(time.Second)
	r.OK()
	r.OK()
	lines = strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[2], "level=INFO") || !strings.Contains(lines[2], "processing recovered") ||
		!strings.Contains(lines[2], "failures=51") || !strings.Contains(lines[2], "failing_for=36s") {
		t.Fatalf("recovery not logged once with its figures:\n%s", buf.String())
	}
	// A new failure after the recovery is logged at once.
	r.Fail("processing step failed", down)
	if n := strings.Count(buf.String(), "\n"); n != 4 {
		t.Fatalf("a failure after recovery was not logged at once:\n%s", buf.String())
	}
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain":        "plain",
		"a:\n\tb\r\nc": "a:; b; c",
		"trailing\n":   "trailing",
		"x\n\n\ny":     "x; y",
	} {
		if got := OneLine(errors.New(in)); got != want {
			t.Errorf("OneLine(%q) = %q, want %q", in, got, want)
		}
	}
	if OneLine(nil) != "" {
		t.Error("OneLine(nil) is not empty")
	}
}
