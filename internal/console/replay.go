package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/replay"
	"github.com/hookledger/hookledger/internal/store"
)

// The replay page: a selection of stored events, its dry run (the plan:
// what would be enqueued, what the ledger already holds of it), then the
// replay itself as a job whose page follows the work through the audit
// trail, as POST /api/v1/replays and the replay verb do.

// replayStore is what replaying needs of the store; store.Store has it.
type replayStore interface {
	replay.Store
	replay.PlanStore
	replay.AuditStore
}

// replayHistory is how many past replays the page lists.
const replayHistory = 20

// replayPlanScan bounds the events a plan reads while the page waits: a
// larger selection is refused with the advice to narrow it, so a plan
// never describes less than its replay would do.
const replayPlanScan = 20_000

// replayForm is the selection as the form shows it.
type replayForm struct {
	Source, EventID, Flow, Entity, From, To string
}

// replayData is the replay page.
type replayData struct {
	Off     string
	Form    replayForm
	Query   string
	Plan    *replay.Plan
	States  []stateCount
	Nothing bool
	History []*store.AuditEntry
	Running string
	MaxScan int
}

type stateCount struct {
	State store.EffectState
	Count int
}

// readSelection reads a replay's selection from a form; the message names
// the field it cannot use.
func readSelection(in url.Values) (replay.Selection, replayForm, url.Values, string) {
	v := url.Values{}
	for _, k := range []string{"source", "event_id", "flow", "entity", "from", "to"} {
		if s := strings.TrimSpace(in.Get(k)); s != "" {
			v.Set(k, s)
		}
	}
	sel := replay.Selection{Source: v.Get("source"), EventID: v.Get("event_id"), Flow: v.Get("flow"), Entity: v.Get("entity"), Actor: actor}
	form := replayForm{Source: sel.Source, EventID: sel.EventID, Flow: sel.Flow, Entity: sel.Entity, From: v.Get("from"), To: v.Get("to")}
	for _, f := range []struct {
		name string
		dst  *time.Time
		show *string
	}{{"from", &sel.From, &form.From}, {"to", &sel.To, &form.To}} {
		s := v.Get(f.name)
		if s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, rfc3339(s))
		if err != nil {
			return sel, form, v, fmt.Sprintf("Field %s: %q is not a time such as 2026-11-03T09:00:00 (UTC)", f.name, s)
		}
		*f.dst = t.UTC()
		v.Set(f.name, t.UTC().Format(time.RFC3339))
		*f.show = formTime(v.Get(f.name))
	}
	if sel.EventID != "" && sel.Source == "" {
		return sel, form, v, "Field event_id: an event is named by its source too."
	}
	if !sel.From.IsZero() && !sel.To.IsZero() && !sel.From.Before(sel.To) {
		return sel, form, v, "Field to: the range ends before it starts."
	}
	return sel, form, v, ""
}

// replayPage serves GET /replay: the selection form, its plan when asked
// (plan=1), and the replay history.
func (c *Console) replayPage(w http.ResponseWriter, r *http.Request) {
	d := &replayData{MaxScan: replayPlanScan}
	st, ok := c.st.(replayStore)
	if !ok || c.extra.Router == nil {
		d.Off = "Replay needs this server's flow engine; this console runs without one."
		c.render(w, r, http.StatusOK, "replay", &view{Title: "Replay", Nav: "replay", Data: d})
		return
	}
	ctx := r.Context()
	sel, form, v, msg := readSelection(r.URL.Query())
	d.Form, d.Query = form, v.Encode()
	if j := c.runningJob(sessionOf(r)); j != nil {
		d.Running = "/jobs/" + j.ID
	}
	var err error
	if d.History, err = c.replayHistory(ctx, st); err != nil {
		c.storeFailed(w, r, "list replays", err)
		return
	}
	if msg != "" {
		c.render(w, r, http.StatusBadRequest, "replay", &view{Title: "Replay", Nav: "replay", Error: msg, Data: d})
		return
	}
	if r.URL.Query().Get("plan") != "" {
		d.Plan, err = replay.MakePlan(ctx, st, c.extra.Router, sel, replay.PlanOptions{MaxScan: replayPlanScan})
		switch {
		case errors.Is(err, replay.ErrNothingSelected):
			d.Plan, d.Nothing = nil, true
		case err != nil:
			c.storeFailed(w, r, "plan replay", err)
			return
		default:
			for s, n := range d.Plan.ByState {
				d.States = append(d.States, stateCount{s, n})
			}
			slices.SortFunc(d.States, func(a, b stateCount) int { return strings.Compare(string(a.State), string(b.State)) })
		}
	}
	c.render(w, r, http.StatusOK, "replay", &view{Title: "Replay", Nav: "replay", Data: d})
}

// replayHistory returns the newest replays' audit rows, newest first.
// The rows are read by action through its index, a page at a time.
func (c *Console) replayHistory(ctx context.Context, st replayStore) ([]*store.AuditEntry, error) {
	var out []*store.AuditEntry
	after := int64(0)
	for range 20 {
		rows, err := st.AuditList(ctx, &store.AuditListParams{Action: jobReplay, AfterID: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
		if len(out) > replayHistory {
			out = out[len(out)-replayHistory:]
		}
		if len(rows) < 1000 {
			break
		}
		after = rows[len(rows)-1].ID
	}
	slices.Reverse(out)
	return out, nil
}

// replayStart serves POST /replay (CSRF-checked): the selection, planned
// on the page before, runs as a job.
func (c *Console) replayStart(w http.ResponseWriter, r *http.Request) {
	st, ok := c.st.(replayStore)
	if !ok || c.extra.Router == nil {
		c.fail(w, r, http.StatusNotFound, "Replay needs this server's flow engine; this console runs without one.")
		return
	}
	if err := r.ParseForm(); err != nil {
		c.fail(w, r, http.StatusBadRequest, "The replay form could not be read.")
		return
	}
	sel, _, v, msg := readSelection(r.PostForm)
	if msg != "" {
		c.fail(w, r, http.StatusBadRequest, msg)
		return
	}
	query := v.Encode()
	if query == "" {
		query = "every stored event"
	}
	router := c.extra.Router
	j, err := c.jobs.start(sessionOf(r), jobReplay, jobProgress{Title: "Replay", Filter: query, Phase: "selecting events",
		Started: c.clk.Now()}, func(ctx context.Context, j *job) {
		c.runReplay(ctx, j, st, router, sel)
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
	c.log.Info("console: replay started", "job", j.ID, "selection", query, "actor", actor)
	http.Redirect(w, r, "/jobs/"+j.ID, http.StatusSeeOther)
}

// runReplay enqueues the replay (in batches: cancelled halfway, the
// batches already in are processed and the rest is not enqueued) and
// follows its work through the store's counts until every item
// is settled or the job is cancelled; work already enqueued is processed
// either way, since the flow engine owns it.
func (c *Console) runReplay(ctx context.Context, j *job, st replayStore, router replay.Router, sel replay.Selection) {
	finish := func(outcome string) {
		j.update(func(p *jobProgress) { p.Outcome, p.Phase, p.Ended = outcome, outcome, c.clk.Now() })
	}
	res, err := replay.RunWith(ctx, st, router, sel, c.clk.Now(), replay.Options{Progress: func(pr replay.Progress) {
		j.update(func(p *jobProgress) {
			p.Phase = fmt.Sprintf("selecting events: %d read, %d selected", pr.Scanned, pr.Events)
		})
	}})
	switch {
	case errors.Is(err, replay.ErrNothingSelected):
		finish("nothing selected: no stored event of any flow matches")
		return
	case err != nil && res != nil:
		// Stopped between two batches: the batches in are processed.
		why := "stopped: the store failed"
		if ctx.Err() != nil {
			why = j.ended(ctx)
		}
		c.log.Error("console: replay stopped while enqueuing", "job", j.ID, "replay", res.ReplayID, "err", err)
		finish(fmt.Sprintf("%s while replay %d was being enqueued: the work enqueued before is processed, the rest of the selection is not enqueued",
			why, res.ReplayID))
		return
	case err != nil && ctx.Err() != nil:
		finish(j.ended(ctx) + " before anything was enqueued")
		return
	case err != nil:
		c.log.Error("console: replay failed", "job", j.ID, "err", err)
		finish("stopped: the store failed; nothing was enqueued")
		return
	}
	c.log.Info("console: replay enqueued", "job", j.ID, "replay", res.ReplayID, "events", res.Events, "work_items", res.WorkItems)
	if wk, ok := router.(interface{ Wake() }); ok {
		wk.Wake()
	}
	out := replay.Outcome{ReplayID: res.ReplayID, Events: res.Events, WorkItems: res.WorkItems, Skipped: res.Skipped}
	j.update(func(p *jobProgress) { p.Total, p.Replay, p.Phase = res.WorkItems, &out, "processing" })
	w := replay.NewWatcher(st, res)
	for {
		o, err := w.Poll(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			finish(j.ended(ctx) + ": stopped following; the enqueued work is processed anyway")
			return
		case err != nil:
			c.log.Error("console: replay: read its progress", "job", j.ID, "err", err)
			finish("stopped following: the store failed; the enqueued work is processed anyway")
			return
		}
		j.update(func(p *jobProgress) { p.Replay = &o; p.Done = o.Settled })
		if o.Done() {
			finish("finished")
			return
		}
		if c.jobs.pause(ctx) != nil {
			finish(j.ended(ctx) + ": stopped following; the enqueued work is processed anyway")
			return
		}
	}
}
