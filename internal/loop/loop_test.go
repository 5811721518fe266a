package loop

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/health"
)

func TestStartTwiceStartsOnce(t *testing.T) {
	var steps atomic.Int64
	l := New("test", func(ctx context.Context) (bool, error) { steps.Add(1); return false, nil }, Options{PollInterval: time.Hour})
	before := runtime.NumGoroutine()
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background()); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	if n := runtime.NumGoroutine() - before; n > 1 {
		t.Errorf("%d goroutines started, want 1", n)
	}
	if err := l.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestStopIsIdempotentAndSafeBeforeStart(t *testing.T) {
	l := New("test", func(ctx context.Context) (bool, error) { return false, nil }, Options{})
	if err := l.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := l.Stop(context.Background()); err != nil {
			t.Fatalf("Stop %d: %v", i+1, err)
		}
	}
}

// Stop cancels the running step's context and is bounded by its own.
func TestStopCancelsTheStepAndIsBounded(t *testing.T) {
	entered := make(chan struct{})
	var once sync.Once
	release := make(chan struct{})
	l := New("stuck", func(ctx context.Context) (bool, error) {
		once.Do(func() { close(entered) })
		<-release // ignores its context, as a stuck driver call might
		return false, nil
	}, Options{})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Stop(ctx); err == nil || !strings.Contains(err.Error(), "stop stuck") {
		t.Fatalf("Stop with an ended context while the step hangs: %v, want a bounded error", err)
	}
	close(release)
	if err := l.Stop(context.Background()); err != nil {
		t.Fatalf("Stop once the step returned: %v", err)
	}

	// A step that honours its context ends at once.
	saw := make(chan error, 1)
	l2 := New("polite", func(ctx context.Context) (bool, error) {
		<-ctx.Done()
		select {
		case saw <- ctx.Err():
		default:
		}
		return false, ctx.Err()
	}, Options{})
	if err := l2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l2.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-saw; !errors.Is(err, context.Canceled) {
		t.Fatalf("step saw %v, want its context canceled", err)
	}
}

func TestWakeRunsAnIdleLoop(t *testing.T) {
	ran := make(chan struct{}, 10)
	l := New("test", func(ctx context.Context) (bool, error) { ran <- struct{}{}; return false, nil }, Options{PollInterval: time.Hour})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Stop(context.Background())
	<-ran // the first round runs at start
	l.Wake()
	select {
	case <-ran:
	case <-time.After(30 * time.Second):
		t.Fatal("Wake did not run the step (the poll interval is an hour)")
	}
}

// A round that returns ErrIdle neither logs a failure nor ends one: the
// failure before it is still the one logged when the next round fails.
func TestIdleRoundIsNeitherFailureNorRecovery(t *testing.T) {
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	results := make(chan error)
	l := New("test", func(ctx context.Context) (bool, error) {
		select {
		case err := <-results:
			return false, err
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}, Options{PollInterval: time.Millisecond, Logger: log})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Stop(context.Background())
	for _, err := range []error{ErrIdle, errors.New("store down"), ErrIdle, ErrIdle, errors.New("store down"), ErrIdle} {
		results <- err
	}
	results <- nil // recovered
	results <- nil // a round after it, so the recovery above was handled
	logs := buf.String()
	if strings.Contains(logs, ErrIdle.Error()) || !strings.Contains(logs, "store down") {
		t.Errorf("an idle round was logged as a failure, or the failure was not:\n%s", logs)
	}
	if n := strings.Count(logs, "step failed"); n != 1 {
		t.Errorf("%q logged %d times, want once:\n%s", "step failed", n, logs)
	}
	if n := strings.Count(logs, "recovered"); n != 1 {
		t.Errorf("recovery logged %d times, want once:\n%s", n, logs)
	}
}

// OnPoll runs before the rounds the poll starts, and not before a round a
// wake starts.
func TestOnPollRunsOnlyOnThePoll(t *testing.T) {
	var polls atomic.Int64
	ran := make(chan int64, 100)
	l := New("test", func(ctx context.Context) (bool, error) { ran <- polls.Load(); return false, nil },
		Options{PollInterval: time.Hour, OnPoll: func() { polls.Add(1) }})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Stop(context.Background())
	if got := <-ran; got != 0 {
		t.Errorf("the first round saw %d polls, want 0", got)
	}
	l.Wake()
	if got := <-ran; got != 0 {
		t.Errorf("a woken round saw %d polls, want 0", got)
	}

	polled := New("test", func(ctx context.Context) (bool, error) { ran <- polls.Load(); return false, nil },
		Options{PollInterval: time.Millisecond, OnPoll: func() { polls.Add(1) }})
	if err := polled.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer polled.Stop(context.Background())
	<-ran // the first round runs at start
	select {
	case got := <-ran:
		if got < 1 {
			t.Errorf("a polled round saw %d polls, want at least 1", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the poll did not run the step")
	}
}

// A panic in a step is an error of that round: it is logged with its
// stack, and the loop runs again.
func TestPanicInStepKeepsTheLoopRunning(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), nil))
	var n atomic.Int64
	second := make(chan struct{})
	l := New("test", func(ctx context.Context) (bool, error) {
		switch n.Add(1) {
		case 1:
			panic("custom action exploded")
		case 2:
			close(second)
		}
		return false, nil
	}, Options{PollInterval: time.Millisecond, Logger: log})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Stop(context.Background())
	select {
	case <-second:
	case <-time.After(30 * time.Second):
		t.Fatal("the loop did not run again after a panic")
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "custom action exploded") || !strings.Contains(buf.String(), "stack=") {
		t.Fatalf("the panic is not logged with its stack:\n%s", buf.String())
	}
}

func TestSafe(t *testing.T) {
	err := Safe(nil, "x", func() error { panic(errors.New("boom")) })
	var pe *panicError
	if !errors.As(err, &pe) || err.Error() != "panic: boom" || len(pe.Stack) == 0 {
		t.Fatalf("Safe = %v, want a panicError with a stack", err)
	}
	if err := Safe(nil, "x", func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	want := errors.New("plain")
	if err := Safe(nil, "x", func() error { return want }); err != want {
		t.Fatalf("Safe passed %v, want the function's own error", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// syncBuffer is a bytes.Buffer that a loop's goroutine may write while the
// test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A look is fresh for half a poll interval after it began: a poll then
// need not look again, and one after that does; a kind never looked for
// is never fresh.
func TestLookIsFreshForHalfAPollInterval(t *testing.T) {
	var now time.Duration
	l := New("test", func(ctx context.Context) (bool, error) { return false, nil },
		Options{PollInterval: 200 * time.Millisecond, Monotonic: func() time.Duration { return now }})
	var k Look
	if l.Fresh(&k) {
		t.Fatal("a kind never looked for is fresh")
	}
	began := l.Began()
	now = 50 * time.Millisecond // the look took 50 ms
	l.Looked(&k, began)
	now = 99 * time.Millisecond
	if !l.Fresh(&k) {
		t.Error("a look 99 ms ago, with a poll interval of 200 ms, is not fresh")
	}
	now = 100 * time.Millisecond
	if l.Fresh(&k) {
		t.Error("a look that began half a poll interval ago is still fresh")
	}
}

// A failed round is tried again soon, backing off while it keeps failing,
// rather than at the next poll: a loop that polls hourly (retention) would
// otherwise sit on one passing failure for an hour, its stage stalled and
// /readyz unready all that time. Once a round succeeds the stage is well
// again, and the retries stop.
func TestFailedRoundIsRetriedBeforeThePoll(t *testing.T) {
	board := health.NewBoard(health.Options{StallAfter: time.Hour})
	stage := board.Stage("test")
	var rounds atomic.Int64
	var polls atomic.Int64
	ran := make(chan int64, 100)
	l := New("test", func(ctx context.Context) (bool, error) {
		n := rounds.Add(1)
		ran <- n
		if n <= 3 {
			return false, errors.New("store briefly away")
		}
		return false, nil
	}, Options{PollInterval: time.Hour, RetryAfter: time.Millisecond, Stage: stage, OnPoll: func() { polls.Add(1) }})
	if err := l.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer l.Stop(context.Background())
	for want := int64(1); want <= 4; want++ {
		select {
		case got := <-ran:
			if got != want {
				t.Fatalf("round %d, want %d", got, want)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d did not come: a failed round waits for the hourly poll", want)
		}
	}
	select {
	case n := <-ran:
		t.Fatalf("round %d ran after a successful one, before the poll", n)
	case <-time.After(50 * time.Millisecond):
	}
	if polls.Load() != 3 {
		t.Errorf("the retries ran %d OnPoll hooks, want 3: a retry looks for everything, as a poll does", polls.Load())
	}
	if st := board.Stalled(); len(st) != 0 {
		t.Errorf("stalled after the successful round: %+v", st)
	}
}

// The retry delay doubles with each failure in a row, starting at
// RetryAfter, and stops at the poll interval, where the poll takes over;
// no failure, no retry. A long run of failures does not overflow it.
func TestRetryDelayDoublesUpToThePoll(t *testing.T) {
	got := []time.Duration{}
	for failures := range 7 {
		got = append(got, retryDelay(failures, time.Second, 10*time.Second))
	}
	want := []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 0, 0}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("retry delays %v, want %v", got, want)
		}
	}
	if d := retryDelay(200, time.Second, time.Hour); d != 0 {
		t.Errorf("after 200 failures: %v, want 0 (the poll's turn)", d)
	}
	if d := retryDelay(1, time.Second, 200*time.Millisecond); d != 0 {
		t.Errorf("a poll shorter than the first retry: %v, want 0", d)
	}
}
