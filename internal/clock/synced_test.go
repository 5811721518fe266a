package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)

// refAt is a reference whose clock is ahead of base by ahead; each reading
// takes the round trips in turn, the reference answering in the middle.
func refAt(base *Fake, ahead time.Duration, rtts ...time.Duration) Reference {
	i := 0
	return func(context.Context) (time.Time, error) {
		rtt := rtts[i%len(rtts)]
		i++
		base.Advance(rtt / 2)
		at := base.Now().Add(ahead)
		base.Advance(rtt - rtt/2)
		return at, nil
	}
}

func TestSyncedFollowsTheReference(t *testing.T) {
	for _, ahead := range []time.Duration{0, 3 * time.Minute, -7 * time.Minute, 1500 * time.Microsecond} {
		base := NewFake(t0)
		s := NewSynced(base, refAt(base, ahead, 4*time.Millisecond, 2*time.Millisecond, 9*time.Millisecond), 3)
		if got := s.Now(); !got.Equal(t0) {
			t.Fatalf("before the first measurement Now = %v, want the base clock %v", got, t0)
		}
		m, err := s.Measure(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if m.Offset != ahead || s.Offset() != ahead {
			t.Errorf("ahead %v: offset %v (Offset() %v)", ahead, m.Offset, s.Offset())
		}
		if m.RoundTrip != 2*time.Millisecond {
			t.Errorf("ahead %v: kept the sample of round trip %v, want the quickest (2ms)", ahead, m.RoundTrip)
		}
		if got, want := s.Now(), base.Now().Add(ahead); !got.Equal(want) {
			t.Errorf("ahead %v: Now = %v, want %v", ahead, got, want)
		}
	}
}

// An asymmetric slow reading would put the offset off by half its round
// trip; the quickest sample wins, so the error is bounded by it.
func TestSyncedPrefersTheQuickestSample(t *testing.T) {
	base := NewFake(t0)
	n := 0
	ref := func(context.Context) (time.Time, error) {
		n++
		if n == 2 {
			// Quick and symmetric.
			base.Advance(time.Millisecond)
			at := base.Now()
			base.Advance(time.Millisecond)
			return at, nil
		}
		// Slow and lopsided: the answer was read at the start.
		at := base.Now()
		base.Advance(400 * time.Millisecond)
		return at, nil
	}
	s := NewSynced(base, ref, 4)
	m, err := s.Measure(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if m.Offset != 0 || m.RoundTrip != 2*time.Millisecond {
		t.Fatalf("measurement %+v, want offset 0 from the 2ms sample", m)
	}
}

func TestSyncedKeepsTheOffsetWhenTheReferenceFails(t *testing.T) {
	base := NewFake(t0)
	fail := false
	ok := refAt(base, time.Minute, time.Millisecond)
	s := NewSynced(base, func(ctx context.Context) (time.Time, error) {
		if fail {
			return time.Time{}, errors.New("connection refused")
		}
		return ok(ctx)
	}, 2)
	if _, err := s.Measure(context.Background()); err != nil {
		t.Fatal(err)
	}
	fail = true
	if _, err := s.Measure(context.Background()); err == nil {
		t.Fatal("a measurement with every reading failed returned no error")
	}
	if s.Offset() != time.Minute {
		t.Fatalf("offset %v after a failed measurement, want the previous 1m", s.Offset())
	}
}

func TestSyncedSkipsReadingsAcrossABackwardStep(t *testing.T) {
	base := NewFake(t0)
	s := NewSynced(base, func(context.Context) (time.Time, error) {
		base.Advance(-time.Second)
		return t0, nil
	}, 3)
	if _, err := s.Measure(context.Background()); err == nil {
		t.Fatal("readings across a backward step gave an offset")
	}
	if s.Offset() != 0 {
		t.Fatalf("offset %v, want 0", s.Offset())
	}
}

func TestShifted(t *testing.T) {
	base := NewFake(t0)
	s := Shifted{Base: base, By: 5 * time.Minute}
	base.Advance(time.Second)
	if got, want := s.Now(), t0.Add(5*time.Minute+time.Second); !got.Equal(want) {
		t.Fatalf("Now = %v, want %v", got, want)
	}
}
