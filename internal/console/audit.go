package console

import (
	"net/http"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/store"
)

// auditTimeParams are the audit list's time filters, read like the other
// lists' (a datetime-local value is UTC).
var auditTimeParams = []string{"from", "to"}

// auditActions are the actions the filter suggests: the ones the overview
// links to, and the effect repairs. Any other action can be typed.
var auditActions = []string{store.ActionKeyConflict, store.ActionLoopBlocked, store.ActionLoopHopLimit,
	store.ActionReconciliationMismatch, store.ActionDeadlineMissed, store.ActionEffectDead, store.ActionTenantMismatch}

// auditData is the audit list page.
type auditData struct {
	Filter      filterForm
	Actions     []string
	Rows        []*store.AuditEntry
	First, Next string
	Paged       bool
}

// auditPage serves GET /audit: the audit trail filtered as GET
// /api/v1/audit filters it (action, source, entity, event_id, from, to),
// oldest first, paged by id. The overview's key_conflicts, loop_blocks
// and reconciliation_mismatches lead here.
func (c *Console) auditPage(w http.ResponseWriter, r *http.Request) {
	v := cleanQuery(r.URL.Query())
	for _, k := range auditTimeParams {
		if v.Has(k) {
			v.Set(k, rfc3339(v.Get(k)))
		}
	}
	d := &auditData{Filter: newFilterForm(v), Actions: auditActions}
	for _, k := range auditTimeParams {
		if v.Has(k) {
			d.Filter[k] = formTime(v.Get(k))
		}
	}
	view := &view{Title: "Audit trail", Nav: "audit", Data: d}
	p, err := api.AuditFilter(v)
	if err != nil {
		view.Error = paramMessage(err)
		c.render(w, r, http.StatusBadRequest, "audit", view)
		return
	}
	if !v.Has("limit") {
		p.Limit = pageSize
	}
	// One row more than shown tells whether a next page exists.
	limit := p.Limit
	p.Limit++
	rows, err := c.st.AuditList(r.Context(), p)
	if err != nil {
		c.storeFailed(w, r, "list audit", err)
		return
	}
	first := cloneWithout(v, "cursor")
	d.First, d.Paged = "/audit?"+first.Encode(), v.Has("cursor")
	if len(rows) > limit {
		rows = rows[:limit]
		first.Set("cursor", api.EncodeCursor(rows[limit-1].ID))
		d.Next = "/audit?" + first.Encode()
	}
	d.Rows = rows
	c.render(w, r, http.StatusOK, "audit", view)
}
