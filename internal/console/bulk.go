package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/store"
)

// Bulk retry: the effects list's filters name a set; the plan page counts
// what a retry would do to each of them (the store decides in the end, one
// effect at a time, through EffectOperate), and the run retries them in id
// order up to the last effect the plan counted, so that effects arriving
// meanwhile are not swept in unseen.

// maxBulk bounds one bulk retry: the plan reads at most this many effects,
// and a larger set is retried in several runs (the plan says so and where
// this one ends).
const maxBulk = 10_000

// bulkPage is how many effects one EffectList call of a plan or a run
// reads.
const bulkPage = 500

// notRetryable says why an effect in a state is left alone by a retry.
var notRetryable = map[store.EffectState]string{
	store.EffectApproved:     "already waiting for delivery",
	store.EffectSubmitting:   "a call is under way; its outcome is not known yet",
	store.EffectAcknowledged: "the destination accepted it; waiting for its confirmation",
	store.EffectDone:         "delivered",
	store.EffectRetryWait:    "retries by itself at its next attempt time",
	store.EffectSuperseded:   "a newer version of the entity replaced it",
	store.EffectResolved:     "closed by a person",
}

func retryable(s store.EffectState) bool {
	return s == store.EffectDead || s == store.EffectNeedsReconciliation
}

// bulkFilter reads the effects list's filters for a bulk operation: the
// list's query without its paging, the exception queue when no state is
// named.
func bulkFilter(in url.Values) (url.Values, *store.EffectListParams, error) {
	v := cleanQuery(in)
	for _, k := range []string{"cursor", "limit", csrfField, "upto", "planned"} {
		v.Del(k)
	}
	p, err := api.EffectFilter(v, api.StateExceptions)
	if err != nil {
		return v, nil, err
	}
	return v, p, nil
}

// destPlan is one destination's share of a plan.
type destPlan struct {
	Destination  string
	Retryable    int
	NotRetryable int
}

// reasonCount is how many effects a retry leaves alone for one reason.
type reasonCount struct {
	State  store.EffectState
	Reason string
	Count  int
}

// bulkPlan is the dry run: what the retry of a filtered set would do.
type bulkPlan struct {
	// Planned is false on a page that could not plan (a bad filter).
	Planned      bool
	Query        string
	ListURL      string
	Filter       []filterPair
	Matched      int
	Retryable    int
	NotRetryable int
	// UpTo is the last effect the plan counted; Truncated says more
	// effects match beyond it.
	UpTo      int64
	Truncated bool
	Dests     []destPlan
	Reasons   []reasonCount
	Running   string
}

type filterPair struct{ Name, Value string }

func filterPairs(v url.Values) []filterPair {
	var out []filterPair
	for k := range v {
		out = append(out, filterPair{k, v.Get(k)})
	}
	slices.SortFunc(out, func(a, b filterPair) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// planBulkRetry counts the filtered set, at most maxBulk effects.
func (c *Console) planBulkRetry(ctx context.Context, v url.Values, p *store.EffectListParams) (*bulkPlan, error) {
	bp := &bulkPlan{Planned: true, Query: v.Encode(), ListURL: "/effects?" + v.Encode(), Filter: filterPairs(v)}
	dests := map[string]*destPlan{}
	reasons := map[store.EffectState]int{}
	q := *p
	q.Limit, q.WithoutRequest = bulkPage, true
	for {
		list, err := c.st.EffectList(ctx, &q)
		if err != nil {
			return nil, err
		}
		for _, e := range list {
			if bp.Matched == maxBulk {
				bp.Truncated = true
				break
			}
			bp.Matched++
			bp.UpTo = e.ID
			d := dests[e.Destination]
			if d == nil {
				d = &destPlan{Destination: e.Destination}
				dests[e.Destination] = d
			}
			if retryable(e.State) {
				bp.Retryable++
				d.Retryable++
			} else {
				bp.NotRetryable++
				d.NotRetryable++
				reasons[e.State]++
			}
		}
		if bp.Truncated || len(list) < q.Limit {
			break
		}
		q.AfterID = list[len(list)-1].ID
	}
	for _, d := range dests {
		bp.Dests = append(bp.Dests, *d)
	}
	slices.SortFunc(bp.Dests, func(a, b destPlan) int { return cmp.Compare(a.Destination, b.Destination) })
	for s, n := range reasons {
		why := notRetryable[s]
		if why == "" {
			why = "not in a state a retry applies to"
		}
		bp.Reasons = append(bp.Reasons, reasonCount{State: s, Reason: why, Count: n})
	}
	slices.SortFunc(bp.Reasons, func(a, b reasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.State, b.State))
	})
	return bp, nil
}

// bulkRetryPlan serves GET /effects/bulk-retry?FILTERS: the dry run, with
// the form that starts the run.
func (c *Console) bulkRetryPlan(w http.ResponseWriter, r *http.Request) {
	v, p, err := bulkFilter(r.URL.Query())
	if err != nil {
		c.render(w, r, http.StatusBadRequest, "bulk", &view{Title: "Bulk retry", Nav: "effects", Error: paramMessage(err),
			Data: &bulkPlan{ListURL: "/effects?" + v.Encode()}})
		return
	}
	bp, err := c.planBulkRetry(r.Context(), v, p)
	if err != nil {
		c.storeFailed(w, r, "plan bulk retry", err)
		return
	}
	if j := c.runningJob(sessionOf(r)); j != nil {
		bp.Running = "/jobs/" + j.ID
	}
	c.render(w, r, http.StatusOK, "bulk", &view{Title: "Bulk retry", Nav: "effects", Data: bp})
}

// runningJob is the session's running job, or nil.
func (c *Console) runningJob(s *session) *job {
	c.jobs.mu.Lock()
	defer c.jobs.mu.Unlock()
	for _, j := range c.jobs.order {
		if j.owner == s && !j.progress().Finished {
			return j
		}
	}
	return nil
}

// bulkRetryStart serves POST /effects/bulk-retry (CSRF-checked): the
// plan's filter (filter), its last effect (upto) and its count (planned)
// start the run, which the job page follows.
func (c *Console) bulkRetryStart(w http.ResponseWriter, r *http.Request) {
	filter, err := url.ParseQuery(r.PostFormValue("filter"))
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "The bulk retry's filter is not a query string: start again from the effects list.")
		return
	}
	v, p, err := bulkFilter(filter)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, paramMessage(err))
		return
	}
	upTo, err := strconv.ParseInt(r.PostFormValue("upto"), 10, 64)
	if err != nil || upTo <= 0 {
		c.fail(w, r, http.StatusBadRequest, "The bulk retry needs its plan (upto, the last effect counted): open the dry run first.")
		return
	}
	planned, err := strconv.Atoi(r.PostFormValue("planned"))
	if err != nil || planned < 0 || planned > maxBulk {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("The bulk retry needs its plan (planned, 0 to %d effects): open the dry run first.", maxBulk))
		return
	}
	query := v.Encode()
	j, err := c.jobs.start(sessionOf(r), jobBulkRetry, jobProgress{Title: "Bulk retry", Filter: query, Total: planned,
		Phase: "retrying", Started: c.clk.Now()}, func(ctx context.Context, j *job) {
		c.runBulkRetry(ctx, j, p, upTo, query)
	})
	switch {
	case errors.Is(err, errJobRunning):
		c.render(w, r, http.StatusConflict, "error", &view{Title: "A job is running",
			Error: "This session already runs a job; wait for it or cancel it: /jobs/" + j.ID})
		return
	case err != nil:
		c.fail(w, r, http.StatusServiceUnavailable, "The console is shutting down: no job starts now.")
		return
	}
	c.log.Info("console: bulk retry started", "job", j.ID, "filter", query, "planned", planned, "actor", actor)
	http.Redirect(w, r, "/jobs/"+j.ID, http.StatusSeeOther)
}

// runBulkRetry retries the filtered effects up to upTo, one at a time, and
// writes one audit row for the whole operation (each effect's own
// effect_retry row is EffectOperate's).
func (c *Console) runBulkRetry(ctx context.Context, j *job, p *store.EffectListParams, upTo int64, query string) {
	q := *p
	q.Limit, q.AfterID, q.WithoutRequest = bulkPage, 0, true
	var failure error
	stopped := false
loop:
	for {
		list, err := c.st.EffectList(ctx, &q)
		if err != nil {
			if ctx.Err() == nil {
				failure = err
			}
			stopped = true
			break
		}
		for _, e := range list {
			if e.ID > upTo {
				break loop
			}
			if ctx.Err() != nil {
				stopped = true
				break loop
			}
			q.AfterID = e.ID
			if !retryable(e.State) {
				j.update(func(p *jobProgress) { p.Skipped++ })
				continue
			}
			_, err := c.st.EffectOperate(ctx, &store.EffectOperateParams{EffectID: e.ID, Action: store.OperateRetry,
				Actor: actor, Now: c.clk.Now()})
			switch {
			case err == nil:
				j.update(func(p *jobProgress) { p.Done++ })
			case errors.Is(err, store.ErrInvalidTransition), errors.Is(err, store.ErrNotFound):
				// Changed since the plan (delivered, resolved,
				// retried by someone else): nothing to do.
				j.update(func(p *jobProgress) { p.Skipped++ })
			case ctx.Err() != nil:
				stopped = true
				break loop
			default:
				c.log.Warn("console: bulk retry: effect not retried", "job", j.ID, "effect", e.ID, "err", err)
				j.update(func(p *jobProgress) { p.Failed++ })
			}
		}
		if len(list) < q.Limit {
			break
		}
	}
	if c.extra.Wake != nil && j.progress().Done > 0 {
		c.extra.Wake()
	}
	outcome := "finished"
	switch {
	case failure != nil:
		c.log.Error("console: bulk retry: store failed", "job", j.ID, "err", failure)
		outcome = "stopped: the store failed"
	case stopped:
		outcome = j.ended(ctx)
	}
	pr := j.progress()
	detail := fmt.Sprintf("bulk retry %s: %d retried, %d failed, %d skipped of %d planned (effects up to #%d); filter %s",
		outcome, pr.Done, pr.Failed, pr.Skipped, pr.Total, upTo, query)
	c.auditJob(j, jobBulkRetry, detail)
	j.update(func(p *jobProgress) { p.Outcome, p.Phase, p.Ended = outcome, outcome, c.clk.Now() })
}

// auditJob writes a job's one audit row, also after a cancel or during a
// shutdown (its own short deadline, not the job's context).
func (c *Console) auditJob(j *job, action, detail string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	aw, ok := c.st.(auditWriter)
	if !ok {
		c.log.Error("console: job's audit row not written: the store cannot write audit rows", "job", j.ID, "detail", detail)
		return
	}
	if _, err := aw.AuditInsert(ctx, &store.AuditInsertParams{At: c.clk.Now(), Actor: actor,
		Action: action, Detail: detail}); err != nil {
		c.log.Error("console: job's audit row not written", "job", j.ID, "detail", detail, "err", err)
	}
}

// auditWriter is the store's audit insert; store.Store has it.
type auditWriter interface {
	AuditInsert(ctx context.Context, p *store.AuditInsertParams) (int64, error)
}

// bulkRetryLink turns an effects list address into its bulk retry's dry
// run with the same filters.
func bulkRetryLink(listURL string) string {
	_, q, _ := strings.Cut(listURL, "?")
	if q == "" {
		return "/effects/bulk-retry"
	}
	return "/effects/bulk-retry?" + q
}
