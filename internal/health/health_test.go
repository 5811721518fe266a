package health

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
)

func TestStageStallsAfterFailingRoundsAndRecovers(t *testing.T) {
	var logs bytes.Buffer
	clk := clock.NewFake(time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC))
	b := NewBoard(Options{StallAfter: time.Minute, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	routing, delivery := b.Stage("routing"), b.Stage("delivery")
	delivery.OK()

	// Failing rounds for less than a minute are no stall.
	for range 5 {
		routing.Fail(errors.New("route events: enqueue work: event 41: invalid byte sequence"))
		clk.Advance(10 * time.Second)
	}
	if st := b.Stalled(); len(st) != 0 {
		t.Fatalf("stalled after 50 s: %+v", st)
	}
	// A round that made progress starts the count again.
	routing.OK()
	clk.Advance(30 * time.Second)
	routing.Fail(errors.New("route events: event 41: refused"))
	clk.Advance(59 * time.Second)
	if st := b.Stalled(); len(st) != 0 {
		t.Fatalf("stalled 59 s after the last progress: %+v", st)
	}
	// A minute of failing rounds is a stall, named with its cause; the
	// same cause with other numbers is logged once.
	for i := range 10 {
		clk.Advance(2 * time.Second)
		routing.Fail(errors.New("route events: event " + strings.Repeat("9", i+1) + ": refused"))
	}
	st := b.Stalled()
	if len(st) != 1 || st[0].Stage != "routing" || !strings.Contains(st[0].Cause, "refused") ||
		!strings.Contains(st[0].String(), "routing has made no progress since 2026-11-03T09:01:20Z") {
		t.Fatalf("stalled = %+v", st)
	}
	if n := strings.Count(logs.String(), "stage stalled"); n != 1 {
		t.Fatalf("%d stall warnings for one cause, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "stage=routing") {
		t.Fatalf("the stall is not a WARN naming the stage:\n%s", logs.String())
	}
	// Another cause is logged again, and the first one, come back, not.
	routing.Fail(errors.New("route events: connection refused"))
	if n := strings.Count(logs.String(), "stage stalled"); n != 2 {
		t.Fatalf("%d stall warnings after a new cause, want 2", n)
	}
	routing.Fail(errors.New("route events: event 7: refused"))
	routing.Fail(errors.New("route events: connection refused"))
	if n := strings.Count(logs.String(), "stage stalled"); n != 2 {
		t.Fatalf("%d stall warnings after causes came back, want 2 (one per cause)", n)
	}
	routing.OK()
	if st := b.Stalled(); len(st) != 0 {
		t.Fatalf("still stalled after progress: %+v", st)
	}
	if !strings.Contains(logs.String(), "stage making progress again") {
		t.Fatalf("no recovery line:\n%s", logs.String())
	}
}

func TestNilBoardReportsToNobody(t *testing.T) {
	var b *Board
	s := b.Stage("routing")
	s.Fail(errors.New("x"))
	s.OK()
	if b.Stalled() != nil {
		t.Fatal("a nil board has stalls")
	}
}
