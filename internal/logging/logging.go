// Package logging keeps hookledger's logs useful to a person at the default
// level: a failure that repeats (a store that is down, a destination that
// times out on every poll) is logged once per window with a count of what
// was held back, its end is logged as a recovery, and error text is kept on
// one line.
package logging

import (
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
)

// defaultWindow is how long repeats of one failure are held back.
const defaultWindow = 30 * time.Second

// Repeats logs one recurring failure of one activity (a background loop,
// the inbox's commits). The first failure is logged at once; further
// failures within the window are counted and reported with the next record;
// the first success after failures logs the recovery with how long it took.
// Safe for concurrent use.
type Repeats struct {
	log    *slog.Logger
	clk    clock.Clock
	window time.Duration
	what   string // the activity, e.g. "processing"

	mu         sync.Mutex
	failing    bool
	since      time.Time // first failure of the current run of failures
	lastLogged time.Time
	held       int // failures not logged since lastLogged
	total      int // failures in the current run
}

// NewRepeats returns a limiter for the activity named what. A zero window
// takes DefaultWindow.
func NewRepeats(log *slog.Logger, clk clock.Clock, what string, window time.Duration) *Repeats {
	if window <= 0 {
		window = defaultWindow
	}
	if clk == nil {
		clk = clock.Real{}
	}
	return &Repeats{log: log, clk: clk, window: window, what: what}
}

// Fail records one failure and logs it at ERROR unless the same activity
// was logged less than a window ago.
func (r *Repeats) Fail(msg string, err error, attrs ...any) {
	now := r.clk.Now()
	r.mu.Lock()
	if !r.failing {
		r.failing, r.since, r.total = true, now, 0
	}
	r.total++
	if !r.lastLogged.IsZero() && now.Sub(r.lastLogged) < r.window {
		r.held++
		r.mu.Unlock()
		return
	}
	held := r.held
	r.held, r.lastLogged = 0, now
	r.mu.Unlock()
	attrs = append(attrs, "err", OneLine(err))
	if held > 0 {
		attrs = append(attrs, "repeats_held_back", held, "window", r.window.String())
	}
	r.log.Error(msg, attrs...)
}

// OK records a success; after failures it logs the recovery at INFO.
func (r *Repeats) OK() {
	r.mu.Lock()
	if !r.failing {
		r.mu.Unlock()
		return
	}
	since, total := r.since, r.total
	r.failing, r.held, r.total, r.lastLogged = false, 0, 0, time.Time{}
	r.mu.Unlock()
	r.log.Info(r.what+" recovered", "failures", total, "failing_for", r.clk.Now().Sub(since).Round(time.Millisecond).String())
}

// OneLine renders an error's text on one line: driver errors often span
// several ("failed to connect to ...:\n\t127.0.0.1:5432: dial error").
func OneLine(err error) string {
	if err == nil {
		return ""
	}
	s := err.Error()
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	fields := strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == '\r' })
	for i, f := range fields {
		fields[i] = strings.TrimSpace(f)
	}
	return strings.Join(fields, "; ")
}
