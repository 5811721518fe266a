package console

import (
	"context"

	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/store"
)

// entityEvent is one work item of the entity's history: an event as this
// flow settled it, in business order.
type entityEvent struct {
	*store.EntityHistoryItem
	Link string
	// Applied marks the item whose version the projection holds now.
	Applied bool
	// Order and Version are the order key and the applied version as the
	// flow names them (r3, an occurrence time, an arrival); the stored
	// keys are encoded for sorting, which no operator should have to read.
	Order, Version string
}

// entityHistory reads the first most work items of the entity in business
// order (the flow's order key, then work id), and whether there are more.
func (c *Console) entityHistory(ctx context.Context, pr *store.Projection, flowName, entity string, most int) ([]entityEvent, bool, error) {
	items, err := c.st.EntityHistory(ctx, &store.EntityHistoryParams{Flow: flowName, Entity: entity, Limit: most + 1})
	if err != nil {
		return nil, false, err
	}
	more := len(items) > most
	if more {
		items = items[:most]
	}
	out := make([]entityEvent, 0, len(items))
	for _, it := range items {
		ee := entityEvent{EntityHistoryItem: it, Link: eventLink(it.Source, it.EventID),
			Order: flow.OrderLabel(c.extra.VersionModes[flowName], it.OrderKey), Version: flow.VersionLabel(it.VersionSort)}
		// A replayed pass of the applied event settles as a duplicate and
		// applies nothing: the mark stays on the pass that applied it.
		ee.Applied = pr != nil && pr.AppliedEventPK == it.EventPK && it.Disposition == store.DispositionApplied &&
			it.VersionSort == pr.VersionSort
		out = append(out, ee)
	}
	return out, more, nil
}
