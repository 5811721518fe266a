package replay

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// AuditStore is what Watch reads: the audit trail, which records every
// settled work item and every effect created, in the transaction that did
// it.
type AuditStore interface {
	AuditList(ctx context.Context, p *store.AuditListParams) ([]*store.AuditEntry, error)
}

// The audit rows Watch reads. Their details are part of the store contract
// (the conformance suite pins them): "replay N: ..." for a replay,
// "flow F entity E: applied V" or "flow F entity E: DISPOSITION: reason"
// for a settled work item, and the episode key for an approved effect.
const (
	actionReplay   = "replay"
	actionSettled  = "work_settled"
	actionApproved = "effect_approved"
)

// Outcome is what a replay's work items have come to so far.
type Outcome struct {
	ReplayID  int64 `json:"id"`
	Events    int   `json:"events"`
	WorkItems int   `json:"work_items"`
	Skipped   int   `json:"skipped"`
	// Settled counts the work items processed; the dispositions below
	// add up to it.
	Settled      int `json:"settled"`
	Applied      int `json:"applied"`
	Duplicate    int `json:"duplicate"`
	Stale        int `json:"stale"`
	Superseded   int `json:"superseded"`
	DeadLettered int `json:"dead_lettered"`
	// Other counts dispositions this version does not know.
	Other int `json:"other,omitempty"`
	// EffectsCreated counts effects the replay added to the ledger; 0
	// when every effect was already there.
	EffectsCreated int `json:"effects_created"`
}

// Done reports whether every work item is settled.
func (o Outcome) Done() bool { return o.Settled >= o.WorkItems }

// lagPolls is how many polls the re-read window spans. On PostgreSQL an
// audit id is taken when the row is inserted, not when its transaction
// commits, so a row can become visible after rows with larger ids: each
// poll reads again from the largest id seen lagPolls polls earlier, and
// counts every row once.
const lagPolls = 20

type eventKey struct{ source, eventID string }

// Watcher follows one replay's processing through the audit trail.
type Watcher struct {
	st      AuditStore
	res     *Result
	pending map[eventKey][]Item
	seen    map[int64]bool
	floor   int64
	maxSeen int64
	marks   []int64 // maxSeen after each poll, for the re-read window
	out     Outcome
}

// NewWatcher returns a watcher of the replay Run enqueued.
func NewWatcher(st AuditStore, res *Result) *Watcher {
	w := &Watcher{st: st, res: res, pending: map[eventKey][]Item{}, seen: map[int64]bool{},
		out: Outcome{ReplayID: res.ReplayID, Events: res.Events, WorkItems: res.WorkItems, Skipped: res.Skipped}}
	for _, it := range res.Items {
		k := eventKey{it.Source, it.EventID}
		w.pending[k] = append(w.pending[k], it)
	}
	return w
}

// Poll reads the audit rows written since the last poll and returns the
// outcome so far.
func (w *Watcher) Poll(ctx context.Context) (Outcome, error) {
	if w.floor == 0 {
		id, err := w.replayRow(ctx)
		if err != nil {
			return w.out, err
		}
		w.floor, w.maxSeen = id, id
	}
	for _, action := range []string{actionApproved, actionSettled} {
		after := w.floor
		for {
			rows, err := w.st.AuditList(ctx, &store.AuditListParams{Action: action, AfterID: after, Limit: 1000})
			if err != nil {
				return w.out, fmt.Errorf("replay %d: read the audit trail: %w", w.res.ReplayID, err)
			}
			for _, a := range rows {
				after = max(after, a.ID)
				w.maxSeen = max(w.maxSeen, a.ID)
				if w.seen[a.ID] {
					continue
				}
				w.seen[a.ID] = true
				if action == actionSettled {
					w.settle(a)
				} else {
					w.approved(a)
				}
			}
			if len(rows) < 1000 {
				break
			}
		}
	}
	w.marks = append(w.marks, w.maxSeen)
	if len(w.marks) > lagPolls {
		w.floor = w.marks[0]
		w.marks = w.marks[1:]
		for id := range w.seen {
			if id <= w.floor {
				delete(w.seen, id)
			}
		}
	}
	return w.out, nil
}

// replayRow finds the audit row ReplayCreate wrote with the replay: every
// row about the replay's work comes after it.
func (w *Watcher) replayRow(ctx context.Context) (int64, error) {
	prefix := fmt.Sprintf("replay %d: ", w.res.ReplayID)
	after := int64(0)
	for {
		rows, err := w.st.AuditList(ctx, &store.AuditListParams{Action: actionReplay, AfterID: after, Limit: 1000})
		if err != nil {
			return 0, fmt.Errorf("replay %d: read the audit trail: %w", w.res.ReplayID, err)
		}
		for _, a := range rows {
			if strings.HasPrefix(a.Detail, prefix) {
				return a.ID, nil
			}
			after = a.ID
		}
		if len(rows) == 0 {
			return 0, fmt.Errorf("replay %d: no audit row records it", w.res.ReplayID)
		}
	}
}

// settle counts a work_settled row if it is one of the replay's pending
// items.
func (w *Watcher) settle(a *store.AuditEntry) {
	k := eventKey{a.Source, a.EventID}
	items := w.pending[k]
	for i, it := range items {
		rest, ok := strings.CutPrefix(a.Detail, "flow "+it.Flow+" entity "+it.Entity+": ")
		if !ok {
			continue
		}
		w.pending[k] = append(items[:i:i], items[i+1:]...)
		w.out.Settled++
		d, _, _ := strings.Cut(rest, ": ")
		if strings.HasPrefix(rest, "applied ") {
			d = string(store.DispositionApplied)
		}
		switch store.Disposition(d) {
		case store.DispositionApplied:
			w.out.Applied++
		case store.DispositionDuplicate:
			w.out.Duplicate++
		case store.DispositionStale:
			w.out.Stale++
		case store.DispositionSuperseded:
			w.out.Superseded++
		case store.DispositionDeadLettered:
			w.out.DeadLettered++
		default:
			w.out.Other++
		}
		return
	}
}

// approved counts an effect_approved row of one of the replay's items.
func (w *Watcher) approved(a *store.AuditEntry) {
	for _, it := range w.res.itemsOf(a.Source, a.EventID) {
		if it.Entity == a.Entity && strings.HasPrefix(a.Detail, it.Flow+":") {
			w.out.EffectsCreated++
			return
		}
	}
}

func (r *Result) itemsOf(source, eventID string) []Item {
	var out []Item
	for _, it := range r.Items {
		if it.Source == source && it.EventID == eventID {
			out = append(out, it)
		}
	}
	return out
}

// WatchOptions tune Watch.
type WatchOptions struct {
	// Interval between two reads of the audit trail; default 500ms.
	Interval time.Duration
	// Progress, when set, is called with the outcome after the first read
	// and after every read that changed it.
	Progress func(Outcome)
}

// Watch polls until every work item of the replay is settled, or ctx
// ends (then it returns the outcome so far and ctx's error). The replay
// goes on either way: stopping to watch does not stop the processing.
func Watch(ctx context.Context, st AuditStore, res *Result, opts WatchOptions) (Outcome, error) {
	if opts.Interval <= 0 {
		opts.Interval = 500 * time.Millisecond
	}
	w := NewWatcher(st, res)
	var last Outcome
	first := true
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return w.out, ctx.Err()
		case <-t.C:
		}
		out, err := w.Poll(ctx)
		if err != nil {
			return out, err
		}
		if opts.Progress != nil && (first || out != last) {
			opts.Progress(out)
		}
		first, last = false, out
		if out.Done() {
			return out, nil
		}
		t.Reset(opts.Interval)
	}
}
