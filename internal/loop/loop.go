// Package loop is the one runtime every background activity of hookledger
// runs on (processing, delivery, notifications): started once, woken when
// work arrives, polling while idle, stopped idempotently within a deadline,
// a failed round retried sooner than the next poll (backing off), with
// repeated failures logged once per window, and a panic in code the
// user supplied (a custom destination action, a CEL expression) turned
// into an error for that item instead of the end of the process.
package loop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/health"
	"github.com/hookledger/hookledger/internal/logging"
)

// ErrStarted is returned by a second Start: a loop runs once.
var ErrStarted = errors.New("loop already started")

// ErrIdle is what a step returns when it was asked to do nothing this
// round (flow.Engine, deliver.Worker: a wake that asked for other work).
// Such a round is neither a failure nor a recovery: a store that is down
// stays one failure in the log, not a failure and a recovery per round.
var ErrIdle = errors.New("nothing asked of this round")

// Step does one round of work. more reports that work may be waiting, so
// the loop runs again at once instead of sleeping until a wake-up or the
// poll interval.
type Step func(ctx context.Context) (more bool, err error)

// Options configure a loop; zero values take defaults.
type Options struct {
	// PollInterval is how often an idle loop looks for work (default 200 ms).
	PollInterval time.Duration
	Logger       *slog.Logger
	// Clock times the log windows of repeated failures (default real).
	Clock clock.Clock
	// OnPoll, when set, runs before a step that the poll started, not a
	// wake or a step's asking for more: a step that is told by its wakers
	// what to look for (flow.Engine) looks for everything on the poll.
	OnPoll func()
	// Monotonic, when set, is the time Look stamps are taken and
	// compared in (default: the monotonic real time the poll's ticker
	// follows); tests hold it still.
	Monotonic func() time.Duration
	// Stage, when set, hears of every round: a failed one (the step's
	// error) or one that made progress or found nothing. Rounds that
	// keep failing make the stage stall, and /readyz unready.
	Stage *health.Stage
	// RetryAfter is how soon a failed round is tried again (default 1 s),
	// doubling with every failure in a row; from the poll interval on,
	// the poll does it. A loop that polls rarely (retention, hourly)
	// would otherwise sit on one passing failure until its next poll,
	// its stage stalled and /readyz unready for as long.
	RetryAfter time.Duration
}

// Loop runs a Step in the background.
type Loop struct {
	name string
	step Step
	opts Options
	log  *slog.Logger
	errs *logging.Repeats
	wake chan struct{}

	now func() time.Duration // Options.Monotonic

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

// New returns a loop named name (for logs) that runs step.
func New(name string, step Step, opts Options) *Loop {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 200 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Monotonic == nil {
		opts.Monotonic = monotonic()
	}
	if opts.RetryAfter <= 0 {
		opts.RetryAfter = time.Second
	}
	return &Loop{
		name: name, step: step, opts: opts, log: opts.Logger,
		errs: logging.NewRepeats(opts.Logger, opts.Clock, name, 0),
		wake: make(chan struct{}, 1),
		now:  opts.Monotonic,
	}
}

// monotonic returns the time since its call, read from the monotonic
// clock, which the poll's ticker also follows.
func monotonic() func() time.Duration {
	start := time.Now()
	return func() time.Duration { return time.Since(start) }
}

// Look remembers when a step last looked for one kind of work everything
// the poll would have it look for (all events to route, all ready
// entities, all due effects). A poll that comes shortly after such a look
// need not look again: the look found all that was there, and what became
// ready since either wakes the loop or is found by the next poll. At
// 100 webhooks a second the wakes alone look for everything many times
// between two polls, and every poll was one more empty claim
// (docs/architecture.md, "Background loops and shutdown").
type Look struct {
	at atomic.Int64 // the loop's now at the look, plus one; 0: never
}

// Looked records, for a step that began looking at began (taken from
// Began) and found what there was without error, that it looked.
func (l *Loop) Looked(k *Look, began time.Duration) {
	k.at.Store(int64(began) + 1)
}

// Began is the moment a look begins, for Looked.
func (l *Loop) Began() time.Duration { return l.now() }

// Fresh reports whether k looked within the last half poll interval:
// then a poll need not ask for that kind of work, and it is looked for
// at most one and a half poll intervals after it became ready.
func (l *Loop) Fresh(k *Look) bool {
	at := k.at.Load()
	return at != 0 && l.now()-time.Duration(at-1) < l.opts.PollInterval/2
}

// Wake makes an idle loop run its step now. It never blocks: a pending
// wake-up already covers this one.
func (l *Loop) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Start runs the loop until Stop or until ctx ends. A second call returns
// ErrStarted and starts nothing.
func (l *Loop) Start(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return ErrStarted
	}
	l.started = true
	ctx, l.cancel = context.WithCancel(ctx)
	l.done = make(chan struct{})
	go l.run(ctx)
	return nil
}

func (l *Loop) run(ctx context.Context) {
	defer close(l.done)
	t := time.NewTicker(l.opts.PollInterval)
	defer t.Stop()
	failures := 0 // failed rounds in a row
	for {
		more, err := l.safeStep(ctx)
		switch {
		case errors.Is(err, ErrIdle):
		case err != nil && ctx.Err() == nil:
			failures++
			l.errs.Fail(l.name+" step failed", err)
			l.opts.Stage.Fail(err)
		case err == nil:
			failures = 0
			l.errs.OK()
			l.opts.Stage.OK()
		}
		if ctx.Err() != nil {
			return
		}
		if more && err == nil {
			continue
		}
		var retryC <-chan time.Time
		if d := retryDelay(failures, l.opts.RetryAfter, l.opts.PollInterval); d > 0 && err != nil && !errors.Is(err, ErrIdle) {
			retryC = time.After(d) // a timer only after a failure, collected once unreferenced
		}
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		case <-retryC:
			// A retry looks for everything, as a poll does: the round
			// that failed may have been a wake's, asked for less.
			if l.opts.OnPoll != nil {
				l.opts.OnPoll()
			}
		case <-t.C:
			if l.opts.OnPoll != nil {
				l.opts.OnPoll()
			}
		}
	}
}

// retryDelay is how long the loop waits before trying again after
// failures failed rounds in a row: first, doubled for each further
// failure, or 0 (no retry of its own: the poll comes as soon) once that
// reaches poll.
func retryDelay(failures int, first, poll time.Duration) time.Duration {
	d := first
	for i := 1; i < failures && d < poll; i++ {
		d *= 2
	}
	if failures < 1 || d >= poll {
		return 0
	}
	return d
}

// safeStep runs the step; a panic the step itself did not contain is an
// error of this round, and the loop goes on.
func (l *Loop) safeStep(ctx context.Context) (more bool, err error) {
	err = Safe(l.log, l.name+" step", func() error {
		var e error
		more, e = l.step(ctx)
		return e
	})
	return more, err
}

// Stop ends the loop: the current step's context is canceled and Stop
// waits for the step to return, or for ctx. Calling it again, or on a loop
// never started, is safe.
func (l *Loop) Stop(ctx context.Context) error {
	l.mu.Lock()
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop %s: %w", l.name, ctx.Err())
	}
}

// panicError is a panic recovered from code run under Safe.
type panicError struct {
	Value any
	Stack []byte
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// Safe runs fn and turns a panic into a *panicError, logging the stack at
// ERROR (the stack goes to the log only: it is evidence for a developer,
// not text for an effect's reason).
func Safe(log *slog.Logger, what string, fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &panicError{Value: v, Stack: debug.Stack()}
			if log != nil {
				log.Error("recovered from a panic", "in", what, "panic", fmt.Sprint(v), "stack", string(pe.Stack))
			}
			err = pe
		}
	}()
	return fn()
}
