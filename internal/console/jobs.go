package console

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/replay"
)

// Background operations: a bulk retry or a replay runs on the server in a
// goroutine, so that it goes on while the operator's page polls its
// progress, and a closed browser tab neither stops nor repeats it. Every
// job's context derives from the console's, which Close cancels: a
// shutdown stops the jobs between two effects and waits for them to write
// their audit row.

// maxJobs bounds the jobs kept for their pages: past it the oldest
// finished one is forgotten (its audit row stays).
const maxJobs = 100

// jobPoll is how often a replay job reads the audit trail for its work's
// outcome, and how often a job's page asks for its progress.
const jobPoll = time.Second

// Job kinds, also their audit actions.
const (
	jobBulkRetry = "bulk_retry"
	jobReplay    = "replay"
)

var (
	errJobRunning = errors.New("a job of this session is still running")
	errClosed     = errors.New("the console is shutting down")
)

// job is one background operation started from one session.
type job struct {
	ID    string
	Kind  string
	owner *session
	// stop cancels the job; byOperator says an operator asked for it.
	stop       context.CancelFunc
	stopped    <-chan struct{}
	done       chan struct{}
	mu         sync.Mutex
	byOperator bool
	p          jobProgress
}

// jobProgress is what a job's page shows. Total is what the plan
// counted; Done, Failed and Skipped add up to what was handled so far.
type jobProgress struct {
	Kind                  string
	Title                 string
	Filter                string
	Total                 int
	Done, Failed, Skipped int
	// Phase words what the job does now; Outcome how it ended.
	Phase    string
	Outcome  string
	Finished bool
	Started  time.Time
	Ended    time.Time
	// Replay is a replay's outcome so far (nil for a bulk retry).
	Replay *replay.Outcome
}

// Handled is how far the progress bar is.
func (p jobProgress) Handled() int { return p.Done + p.Failed + p.Skipped }

func (j *job) progress() jobProgress {
	j.mu.Lock()
	defer j.mu.Unlock()
	p := j.p
	if p.Replay != nil {
		r := *p.Replay
		p.Replay = &r
	}
	return p
}

// ctxDone is closed once the job is told to stop.
func (j *job) ctxDone() <-chan struct{} { return j.stopped }

func (j *job) update(fn func(p *jobProgress)) {
	j.mu.Lock()
	fn(&j.p)
	j.mu.Unlock()
}

func (j *job) cancelByOperator() {
	j.mu.Lock()
	j.byOperator = true
	j.mu.Unlock()
	j.stop()
}

// ended says why a job stopped early: the operator, or the shutdown.
func (j *job) ended(ctx context.Context) string {
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case j.byOperator:
		return "cancelled by the operator"
	case ctx.Err() != nil:
		return "stopped by the server's shutdown"
	}
	return ""
}

// jobs is the console's set of background operations.
type jobs struct {
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex
	closed bool
	byID   map[string]*job
	order  []*job // oldest first
	// poll is jobPoll; pause waits that long between two polls of a
	// replay's work, or until the job's context ends (tests replace it, to
	// step a job without waiting on the wall clock).
	poll  time.Duration
	pause func(ctx context.Context) error
}

func newJobs() *jobs {
	ctx, stop := context.WithCancel(context.Background())
	js := &jobs{ctx: ctx, stop: stop, byID: map[string]*job{}, poll: jobPoll}
	js.pause = func(ctx context.Context) error { return clock.Sleep(ctx, js.poll) }
	return js
}

// start runs fn in the background as a job of owner, unless owner has one
// running (then it returns that one and errJobRunning) or the console is
// closed. fn updates the progress; start marks it finished when fn returns.
func (js *jobs) start(owner *session, kind string, p jobProgress, fn func(ctx context.Context, j *job)) (*job, error) {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.closed {
		return nil, errClosed
	}
	for _, j := range js.order {
		if j.owner == owner && !j.progress().Finished {
			return j, errJobRunning
		}
	}
	ctx, stop := context.WithCancel(js.ctx)
	p.Kind = kind
	j := &job{ID: randomToken()[:22], Kind: kind, owner: owner, stop: stop, stopped: ctx.Done(), done: make(chan struct{}), p: p}
	js.byID[j.ID] = j
	js.order = append(js.order, j)
	js.pruneLocked()
	js.wg.Add(1)
	go func() {
		defer js.wg.Done()
		defer close(j.done)
		defer stop()
		fn(ctx, j)
		j.update(func(p *jobProgress) { p.Finished = true })
	}()
	return j, nil
}

func (js *jobs) pruneLocked() {
	for len(js.order) > maxJobs {
		i := -1
		for k, j := range js.order {
			if j.progress().Finished {
				i = k
				break
			}
		}
		if i < 0 {
			return
		}
		delete(js.byID, js.order[i].ID)
		js.order = append(js.order[:i:i], js.order[i+1:]...)
	}
}

func (js *jobs) get(id string) *job {
	js.mu.Lock()
	defer js.mu.Unlock()
	return js.byID[id]
}

// close cancels every job and waits for them to end, or for ctx.
func (js *jobs) close(ctx context.Context) error {
	js.mu.Lock()
	js.closed = true
	js.mu.Unlock()
	js.stop()
	done := make(chan struct{})
	go func() { js.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the console's background jobs (bulk retries, replays)
// between two steps and waits for each to record how far it got. The
// server calls it after the listener has shut down; no job starts after.
func (c *Console) Close() error {
	return c.jobs.close(context.Background())
}

// Shutdown is Close bounded by ctx.
func (c *Console) Shutdown(ctx context.Context) error {
	return c.jobs.close(ctx)
}

// jobPage serves GET /jobs/{id}: the job's progress, cancel button and
// outcome.
func (c *Console) jobPage(w http.ResponseWriter, r *http.Request) {
	j := c.jobs.get(r.PathValue("id"))
	if j == nil {
		c.fail(w, r, http.StatusNotFound, "No such job: jobs are kept in memory until the server restarts; the audit trail keeps what each did.")
		return
	}
	p := j.progress()
	nav := "effects"
	if j.Kind == jobReplay {
		nav = "replay"
	}
	c.render(w, r, http.StatusOK, "job", &view{Title: p.Title, Nav: nav, Data: c.jobView(r, j)})
}

// jobView is a job's page and progress fragment.
type jobView struct {
	ID   string
	CSRF string
	P    jobProgress
	Poll string
}

func (c *Console) jobView(r *http.Request, j *job) jobView {
	v := jobView{ID: j.ID, P: j.progress(), Poll: "every " + c.jobs.poll.String()}
	if s := sessionOf(r); s != nil {
		v.CSRF = s.csrf
	}
	return v
}

// jobProgressFragment serves GET /jobs/{id}/progress: the progress block
// alone, which polls itself until the job has finished.
func (c *Console) jobProgressFragment(w http.ResponseWriter, r *http.Request) {
	j := c.jobs.get(r.PathValue("id"))
	if j == nil {
		http.Error(w, "no such job", http.StatusNotFound)
		return
	}
	c.execute(w, http.StatusOK, "job", "job-progress", c.jobView(r, j))
}

// cancelJob serves POST /jobs/{id}/cancel (CSRF-checked): the job stops
// before its next step and records how far it got.
func (c *Console) cancelJob(w http.ResponseWriter, r *http.Request) {
	j := c.jobs.get(r.PathValue("id"))
	if j == nil {
		c.fail(w, r, http.StatusNotFound, "No such job.")
		return
	}
	j.cancelByOperator()
	c.log.Info("console: job cancelled", "job", j.ID, "kind", j.Kind, "actor", actor)
	http.Redirect(w, r, "/jobs/"+j.ID, http.StatusSeeOther)
}

// operationRoutes adds the pages of the repairs that run as jobs, and the
// destinations and sources page.
func (c *Console) operationRoutes() {
	c.handle("GET /effects/bulk-retry", c.bulkRetryPlan)
	c.handle("POST /effects/bulk-retry", c.bulkRetryStart)
	c.handle("GET /replay", c.replayPage)
	c.handle("POST /replay", c.replayStart)
	c.handle("GET /jobs/{id}", c.jobPage)
	c.handle("GET /jobs/{id}/progress", c.jobProgressFragment)
	c.handle("POST /jobs/{id}/cancel", c.cancelJob)
	c.handle("GET /destinations", c.destinationsPage)
	c.handle("GET /endpoints", c.endpointsPage)
	c.handle("POST /endpoints/{id}/{action}", c.endpointAction)
	c.handle("POST /effects/{id}/compensate", c.compensate)
}
