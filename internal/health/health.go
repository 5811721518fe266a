// Package health knows whether each stage of the pipeline (receiving,
// routing, processing, delivery, publishing, verification, notifications,
// retention, signals) makes progress. A failure that concerns one item is
// that item's: the stage dead-letters or parks it and goes on. A stage
// whose rounds keep failing with work waiting (the store refuses it, a
// statement fails for every page) has stalled: after a while /readyz turns
// unready naming the stage and its cause, and the cause is logged at WARN
// once, however often the round repeats (docs/deploy.md, "Readiness").
package health

import (
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/logging"
)

// defaultStallAfter is how long a stage's rounds may keep failing before
// it counts as stalled: long enough that a database restart or a lock held
// for a migration passes unseen, short enough that an orchestrator takes
// the process out of service well before senders give up.
const defaultStallAfter = time.Minute

// Board holds the stages of one process. A nil *Board hands out nil
// stages, whose methods do nothing: a component run without a board (a
// test, a CLI verb) reports to nobody.
type Board struct {
	clk   clock.Clock
	log   *slog.Logger
	after time.Duration

	mu     sync.Mutex
	stages map[string]*Stage
}

// Options configure a board; zero values take the defaults.
type Options struct {
	// StallAfter is how long failing rounds make a stall (default
	// DefaultStallAfter).
	StallAfter time.Duration
	Logger     *slog.Logger
	Clock      clock.Clock
}

// NewBoard returns an empty board.
func NewBoard(o Options) *Board {
	if o.StallAfter <= 0 {
		o.StallAfter = defaultStallAfter
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return &Board{clk: o.Clock, log: o.Logger, after: o.StallAfter, stages: map[string]*Stage{}}
}

// Stage returns the stage named name, made on first use. Several
// components may report to one stage (the router's takes and the
// processor's claims are both "routing" and "processing" rounds).
func (b *Board) Stage(name string) *Stage {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stages[name]
	if s == nil {
		s = &Stage{b: b, name: name}
		b.stages[name] = s
	}
	return s
}

// Stall is one stalled stage.
type Stall struct {
	Stage string
	Since time.Time // the first failure of the current run
	Cause string    // the latest failure's text, on one line
}

func (s Stall) String() string {
	return fmt.Sprintf("%s has made no progress since %s: %s", s.Stage, s.Since.UTC().Format(time.RFC3339), s.Cause)
}

// Stalled lists the stalled stages, by name.
func (b *Board) Stalled() []Stall {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	stages := make([]*Stage, 0, len(b.stages))
	for _, s := range b.stages {
		stages = append(stages, s)
	}
	b.mu.Unlock()
	sort.Slice(stages, func(i, j int) bool { return stages[i].name < stages[j].name })
	now := b.clk.Now()
	var out []Stall
	for _, s := range stages {
		if st, ok := s.stalled(now); ok {
			out = append(out, st)
		}
	}
	return out
}

// Stage is one stage's record of its rounds.
type Stage struct {
	b    *Board
	name string

	mu           sync.Mutex
	failingSince time.Time // zero while the stage makes progress
	cause        string
	// warned holds the shapes of the causes logged at WARN in the
	// current run of failures: each is logged once, however often it
	// comes back (a driver may word one failure two ways, alternately).
	warned map[string]bool
}

// OK records a round that made progress, or found nothing to do.
func (s *Stage) OK() {
	if s == nil {
		return
	}
	s.mu.Lock()
	warned, since := len(s.warned) > 0, s.failingSince
	s.failingSince, s.cause, s.warned = time.Time{}, "", nil
	s.mu.Unlock()
	if warned {
		s.b.log.Info("stage making progress again", "stage", s.name, "stalled_for", s.b.clk.Now().Sub(since).Round(time.Second).String())
	}
}

// Fail records a round that failed with work waiting.
func (s *Stage) Fail(err error) {
	if s == nil || err == nil {
		return
	}
	now := s.b.clk.Now()
	s.mu.Lock()
	if s.failingSince.IsZero() {
		s.failingSince = now
	}
	s.cause = logging.OneLine(err)
	s.mu.Unlock()
	s.stalled(now)
}

// stalled reports the stage's stall, and logs it at WARN once per
// distinct cause in a run of failures: causes that differ only in numbers
// (an event's key, a count, a duration) are one cause.
func (s *Stage) stalled(now time.Time) (Stall, bool) {
	s.mu.Lock()
	if s.failingSince.IsZero() || now.Sub(s.failingSince) < s.b.after {
		s.mu.Unlock()
		return Stall{}, false
	}
	st := Stall{Stage: s.name, Since: s.failingSince, Cause: s.cause}
	shape := causeShape(s.cause)
	log := !s.warned[shape]
	if s.warned == nil {
		s.warned = map[string]bool{}
	}
	s.warned[shape] = true
	s.mu.Unlock()
	if log {
		s.b.log.Warn("stage stalled: not ready until it makes progress", "stage", s.name,
			"failing_for", now.Sub(st.Since).Round(time.Second).String(), "cause", st.Cause)
	}
	return st, true
}

var digits = regexp.MustCompile(`[0-9]+`)

// causeShape is a cause with its numbers blanked, so that a failure that
// names a different event or count each round is logged once.
func causeShape(cause string) string {
	return strings.TrimSpace(digits.ReplaceAllString(cause, "#"))
}
