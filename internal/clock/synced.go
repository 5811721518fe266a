package clock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Shifted is Base moved by a fixed amount. It stands for a host whose clock
// is wrong by By: tests of clock skew run a real process on one
// (docs/architecture.md, "The database's clock").
type Shifted struct {
	Base Clock
	By   time.Duration
}

// Now returns the base time plus By.
func (s Shifted) Now() time.Time { return s.Base.Now().Add(s.By) }

// Reference reads the clock the others follow, such as the database's.
type Reference func(ctx context.Context) (time.Time, error)

// Measurement is the outcome of one synchronisation: how far the reference
// is ahead of the base clock, and the round trip of the sample it was taken
// from, which bounds its error (the offset is off by at most half of it).
type Measurement struct {
	Offset    time.Duration
	RoundTrip time.Duration
}

// defaultSamples is how many readings of the reference one Measure takes.
const defaultSamples = 5

// Synced is a clock that tells the reference's time without asking it on
// every reading: Now is the base clock plus an offset measured against the
// reference. On PostgreSQL the reference is the database, so that every
// process judges leases and due times by one clock however wrong its host's
// clock is (docs/architecture.md, "The database's clock"). Until the first
// successful Measure the offset is zero. A new measurement moves Now by the
// change in offset, within the error of the measurements (a fraction of a
// millisecond next to the database), backwards too: leases and due times
// are seconds long, and durations measured within one process use the
// monotonic clock, not this one.
type Synced struct {
	base    Clock
	ref     Reference
	samples int

	offset atomic.Int64 // nanoseconds
}

// NewSynced returns a clock that follows ref; samples is how many readings
// each Measure takes (0 means DefaultSamples).
func NewSynced(base Clock, ref Reference, samples int) *Synced {
	if samples <= 0 {
		samples = defaultSamples
	}
	return &Synced{base: base, ref: ref, samples: samples}
}

// Now returns the base time corrected by the last measured offset.
func (s *Synced) Now() time.Time {
	return s.base.Now().Add(time.Duration(s.offset.Load()))
}

// Offset is the last measured offset: the reference minus the base clock.
func (s *Synced) Offset() time.Duration { return time.Duration(s.offset.Load()) }

// Measure reads the reference several times and keeps the sample with the
// shortest round trip: a reading delayed by a busy connection or a
// scheduling pause has an uncertain midpoint, the quickest one the most
// certain. The reference's time is taken to belong to the midpoint of the
// round trip, so offset = reference − (sent + round trip / 2). When every
// reading fails the previous offset is kept and the error returned.
func (s *Synced) Measure(ctx context.Context) (Measurement, error) {
	var best Measurement
	found := false
	var errs []error
	for range s.samples {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		sent := s.base.Now()
		at, err := s.ref(ctx)
		back := s.base.Now()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rtt := back.Sub(sent)
		if rtt < 0 {
			// The host clock was stepped back during the reading: its
			// midpoint means nothing.
			continue
		}
		m := Measurement{Offset: at.Sub(sent.Add(rtt / 2)), RoundTrip: rtt}
		if !found || m.RoundTrip < best.RoundTrip {
			best, found = m, true
		}
	}
	if !found {
		if len(errs) == 0 {
			errs = append(errs, errors.New("the host clock went backwards during every reading"))
		}
		return Measurement{}, fmt.Errorf("measure clock offset: %w", errors.Join(errs...))
	}
	s.offset.Store(int64(best.Offset))
	return best, nil
}
