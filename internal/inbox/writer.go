// Package inbox is the durable front of the data path: a group-commit writer
// that lets many concurrent requests share one database transaction, so the
// receiver can acknowledge a webhook only after its commit without paying one
// fsync per webhook.
package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/health"
	"github.com/hookledger/hookledger/internal/logging"
	"github.com/hookledger/hookledger/internal/store"
)

// errStopped is returned by Submit after Stop began.
var errStopped = errors.New("inbox writer stopped")

// Committer is the part of the store the writer needs.
type Committer interface {
	InboxCommit(ctx context.Context, p *store.InboxCommitParams) ([]store.SubmissionResult, error)
}

// Options tune the writer; zero values take the defaults.
type Options struct {
	// MaxBatch caps the submissions in one transaction (default 256).
	MaxBatch int
	// Flushers is how many transactions may be in flight at once (default
	// 1). hookledger serve takes its store driver's number
	// (storeopen.Driver.Flushers): two on either database, so that a
	// group is handed to the store while the previous one commits.
	Flushers int
	// CommitTimeout bounds one transaction (default 30 s).
	CommitTimeout time.Duration
	Logger        *slog.Logger
	// Registerer receives the writer's metrics; nil registers nothing.
	Registerer prometheus.Registerer
	// Clock times the windows of repeated-failure logging (default real).
	Clock clock.Clock
	// Health hears whether group commits succeed: the "receiving" stage
	// (nil: nobody).
	Health *health.Board
	// RouteAhead, when set, is handed each group just before the group
	// is given to the store, and must return at once: the processor
	// routes the group's events in the same transaction where it can
	// (flow.Engine.RouteAhead). Of the funcs it returns, each called once
	// when not nil: queued once the group is queued for the database's
	// writer (store.InboxCommitParams.Queued) or else once its commit has
	// ended, and after once the commit has ended, whatever its outcome.
	RouteAhead func(subs []*store.Submission) (queued, after func())
}

type request struct {
	ctx   context.Context
	sub   *store.Submission
	reply chan reply
}

type reply struct {
	res store.SubmissionResult
	err error
}

// Writer batches concurrent submissions into shared commits.
type Writer struct {
	st    Committer
	opts  Options
	log   *slog.Logger
	queue chan *request

	mu      sync.RWMutex // guards closed against sends on a closed queue
	closed  bool
	started bool
	wg      sync.WaitGroup

	// errs logs a failing store once per window and its recovery.
	errs  *logging.Repeats
	stage *health.Stage

	batchSize prometheus.Histogram
	commitDur prometheus.Histogram
	outcomes  *prometheus.CounterVec
}

// New returns a writer; call Start before Submit.
func New(st Committer, opts Options) *Writer {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 256
	}
	if opts.Flushers <= 0 {
		opts.Flushers = 1
	}
	if opts.CommitTimeout <= 0 {
		opts.CommitTimeout = 30 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	w := &Writer{
		st:    st,
		opts:  opts,
		log:   opts.Logger,
		queue: make(chan *request, opts.MaxBatch*opts.Flushers*2),
		errs:  logging.NewRepeats(opts.Logger, opts.Clock, "inbox commits", 0),
		stage: opts.Health.Stage("receiving"),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hookledger_inbox_batch_submissions",
			Help:    "Submissions sharing one group commit.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512},
		}),
		commitDur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hookledger_inbox_commit_seconds",
			Help:    "Duration of one durable group commit.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 14),
		}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hookledger_inbox_submissions_total",
			Help: "Submissions by outcome: committed, failed (this submission alone), error (the whole commit failed), canceled.",
		}, []string{"outcome"}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(w.batchSize, w.commitDur, w.outcomes)
	}
	return w
}

// Start launches the flushers.
func (w *Writer) Start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return
	}
	w.started = true
	for range w.opts.Flushers {
		w.wg.Add(1)
		go w.flushLoop()
	}
}

// Stop refuses new submissions, commits everything already queued and
// waits for the flushers to finish, or for ctx.
func (w *Writer) Stop(ctx context.Context) error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.queue)
	}
	w.mu.Unlock()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("stop inbox writer: %w", ctx.Err())
	}
}

// Submit queues sub for the next group commit and waits for its outcome.
// A nil error with a nil res.Err means every delivery of sub is durably
// committed; any error means the caller must not acknowledge (the
// submission may or may not have committed if ctx ended while waiting:
// the sender's retry is then recorded as a duplicate delivery).
func (w *Writer) Submit(ctx context.Context, sub *store.Submission) (store.SubmissionResult, error) {
	req := &request{ctx: ctx, sub: sub, reply: make(chan reply, 1)}
	w.mu.RLock()
	if w.closed || !w.started {
		w.mu.RUnlock()
		return store.SubmissionResult{}, errStopped
	}
	select {
	case w.queue <- req:
	case <-ctx.Done():
		w.mu.RUnlock()
		return store.SubmissionResult{}, ctx.Err()
	}
	w.mu.RUnlock()
	select {
	case r := <-req.reply:
		return r.res, r.err
	case <-ctx.Done():
		return store.SubmissionResult{}, ctx.Err()
	}
}

func (w *Writer) flushLoop() {
	defer w.wg.Done()
	batch := make([]*request, 0, w.opts.MaxBatch)
	for first := range w.queue {
		batch = append(batch[:0], first)
		// Take whatever queued up while the previous commit ran: batching
		// comes from the commit latency itself, with no timer that would
		// delay a lone request.
	drain:
		for len(batch) < w.opts.MaxBatch {
			select {
			case r, ok := <-w.queue:
				if !ok {
					break drain
				}
				batch = append(batch, r)
			default:
				break drain
			}
		}
		w.commit(batch)
	}
}

func (w *Writer) commit(batch []*request) {
	live := batch[:0:0]
	subs := make([]*store.Submission, 0, len(batch))
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			// The caller gave up; committing would store an event nobody
			// acknowledges, which is harmless, but skipping it is cheaper.
			w.outcomes.WithLabelValues("canceled").Inc()
			r.reply <- reply{err: err}
			continue
		}
		live = append(live, r)
		subs = append(subs, r.sub)
	}
	if len(live) == 0 {
		return
	}
	// The transaction serves many callers, so it runs on its own context:
	// one caller hanging up must not roll back the others.
	ctx, cancel := context.WithTimeout(context.Background(), w.opts.CommitTimeout)
	defer cancel()
	var queued func()
	if w.opts.RouteAhead != nil {
		var after func()
		queued, after = w.opts.RouteAhead(subs)
		if after != nil {
			defer after()
		}
		if queued != nil {
			// Once only: the store calls it as the group is queued, and a
			// group that failed before that hears it here.
			once := sync.OnceFunc(queued)
			queued = once
			defer once()
		}
	}
	start := time.Now()
	results, err := w.st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: subs, Queued: queued})
	w.commitDur.Observe(time.Since(start).Seconds())
	w.batchSize.Observe(float64(len(live)))
	if err == nil && len(results) != len(live) {
		err = fmt.Errorf("inbox commit returned %d results for %d submissions", len(results), len(live))
	}
	if err != nil {
		w.errs.Fail("group commit failed", err, "submissions", len(live))
		w.stage.Fail(err)
		w.outcomes.WithLabelValues("error").Add(float64(len(live)))
		for _, r := range live {
			r.reply <- reply{err: err}
		}
		return
	}
	w.errs.OK()
	w.stage.OK()
	for i, r := range live {
		if results[i].Err != nil {
			w.outcomes.WithLabelValues("failed").Inc()
		} else {
			w.outcomes.WithLabelValues("committed").Inc()
		}
		r.reply <- reply{res: results[i]}
	}
}
