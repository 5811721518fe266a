package deliver

import (
	"context"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// NotifyEscalated tells a person, through the worker's notifier, about
// each effect whose business deadline was escalated (the signals monitor
// calls it with what store.EffectDeadlineEscalate returned). Like every
// notification it is queued and sent from the notification loop; without
// a notifier it does nothing.
func (w *Worker) NotifyEscalated(_ context.Context, effects []*store.Effect) {
	if w.notes == nil {
		return
	}
	for _, e := range effects {
		owner := e.Owner
		if d, _ := w.dest(e.Destination); owner == "" && d != nil {
			owner = d.Owner
		}
		n := Notification{EffectID: e.ID, EpisodeKey: e.EpisodeKey, Destination: e.Destination, State: e.State,
			Class: e.ErrorClass, Owner: owner,
			Reason: fmt.Sprintf("its business deadline %s passed", e.DeadlineAt.UTC().Format(time.RFC3339))}
		if e.State == store.EffectDead {
			n.SuggestedRepair = "decide whether the work is still worth doing: retry the effect, or resolve it with a note (hookledger effects retry|resolve)"
		} else {
			n.SuggestedRepair = "it is still being tried; check why it is late (hookledger effects show), or resolve it with a note if it is no longer wanted"
		}
		if n.Class == store.ClassNone {
			n.Class = "deadline"
		}
		w.notes.add(n)
	}
}

// Tell queues a notification that is not about one effect's settlement
// (an endpoint that was disabled); without a notifier it does nothing.
func (w *Worker) Tell(n Notification) {
	if w.notes != nil {
		w.notes.add(n)
	}
}
