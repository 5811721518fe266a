package replay

import (
	"context"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// AuditStore is what Watch reads: the counts of a replay's work the
// store keeps (its work rows by disposition, the effects they created),
// and the audit trail, which records every settled work item and every
// effect created in the transaction that did it.
type AuditStore interface {
	AuditList(ctx context.Context, p *store.AuditListParams) ([]*store.AuditEntry, error)
	ReplayProgress(ctx context.Context, id int64) (*store.ReplayProgress, error)
}

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

// Watcher follows one replay's processing through the store's counts of
// its work: each poll is a few aggregate reads, and the watcher holds
// nothing per work item, whatever the size of the replay.
type Watcher struct {
	st  AuditStore
	res *Result
	out Outcome
}

// NewWatcher returns a watcher of the replay Run enqueued.
func NewWatcher(st AuditStore, res *Result) *Watcher {
	return &Watcher{st: st, res: res,
		out: Outcome{ReplayID: res.ReplayID, Events: res.Events, WorkItems: res.WorkItems, Skipped: res.Skipped}}
}

// Poll reads what the replay's work has come to and returns the outcome
// so far.
func (w *Watcher) Poll(ctx context.Context) (Outcome, error) {
	p, err := w.st.ReplayProgress(ctx, w.res.ReplayID)
	if err != nil {
		return w.out, fmt.Errorf("replay %d: %w", w.res.ReplayID, err)
	}
	if p == nil {
		return w.out, fmt.Errorf("replay %d: no such replay in the store", w.res.ReplayID)
	}
	out := Outcome{ReplayID: w.res.ReplayID, Events: w.res.Events, WorkItems: w.res.WorkItems, Skipped: w.res.Skipped,
		EffectsCreated: int(p.EffectsCreated)}
	for d, n := range p.Settled {
		out.Settled += int(n)
		switch d {
		case store.DispositionApplied:
			out.Applied += int(n)
		case store.DispositionDuplicate:
			out.Duplicate += int(n)
		case store.DispositionStale:
			out.Stale += int(n)
		case store.DispositionSuperseded:
			out.Superseded += int(n)
		case store.DispositionDeadLettered:
			out.DeadLettered += int(n)
		default:
			out.Other += int(n)
		}
	}
	w.out = out
	return out, nil
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
		start := time.Now()
		out, err := w.Poll(ctx)
		if err != nil {
			return out, err
		}
		// A poll counts the whole replay: on a large one, the reads are
		// kept to a fifth of the time, so watching costs the store a
		// bounded share whatever the size.
		wait := max(opts.Interval, 4*time.Since(start))
		if opts.Progress != nil && (first || out != last) {
			opts.Progress(out)
		}
		first, last = false, out
		if out.Done() {
			return out, nil
		}
		t.Reset(wait)
	}
}
