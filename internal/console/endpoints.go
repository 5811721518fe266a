package console

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The endpoints page: each publishing endpoint, whether it receives
// messages, why not, and what waits for it (docs/publishing.md).

// endpointRow is one endpoint on the page.
type endpointRow struct {
	*store.Endpoint
	Parked, Pending         int
	ParkedLink, PendingLink string
	Kinds                   string
}

type endpointsData struct {
	Endpoints []*endpointRow
	Off       string
}

var endpointMessages = map[string]string{
	"enable":  "Endpoint enabled: its parked messages are being delivered, oldest first.",
	"disable": "Endpoint disabled: its messages park in the exception queue until it is enabled again.",
}

// endpointsPage serves GET /endpoints.
func (c *Console) endpointsPage(w http.ResponseWriter, r *http.Request) {
	d := &endpointsData{}
	v := &view{Title: "Endpoints", Nav: "endpoints", Data: d, Flash: endpointMessages[r.URL.Query().Get("done")]}
	if c.extra.Endpoints == nil {
		d.Off = "This console has no publishing service attached."
		c.render(w, r, http.StatusOK, "endpoints", v)
		return
	}
	list, err := c.extra.Endpoints.List(r.Context())
	if err != nil {
		c.storeFailed(w, r, "list endpoints", err)
		return
	}
	counts, err := c.extra.Endpoints.Backlogs(r.Context())
	if err != nil {
		c.storeFailed(w, r, "count the endpoints' messages", err)
		return
	}
	for _, e := range list {
		row := &endpointRow{Endpoint: e, Parked: counts[e.ID].Parked, Pending: counts[e.ID].Pending}
		dest := store.EndpointDestination(e.ID)
		row.ParkedLink = "/effects?" + url.Values{"destination": {dest}, "state": {string(store.EffectDead)}}.Encode()
		row.PendingLink = "/effects?" + url.Values{"destination": {dest}, "state": {"retry_wait,needs_reconciliation"}}.Encode()
		var kinds []string
		now := c.clk.Now()
		for _, s := range e.Secrets {
			k := s.Kind
			if !s.ExpiresAt.IsZero() {
				if !s.Active(now) {
					continue
				}
				k += " until " + formatTime(s.ExpiresAt)
			}
			kinds = append(kinds, k)
		}
		row.Kinds = strings.Join(kinds, ", ")
		d.Endpoints = append(d.Endpoints, row)
	}
	c.render(w, r, http.StatusOK, "endpoints", v)
}

// endpointAction serves POST /endpoints/{id}/enable|disable.
func (c *Console) endpointAction(w http.ResponseWriter, r *http.Request) {
	action, id := r.PathValue("action"), r.PathValue("id")
	if _, ok := endpointMessages[action]; !ok {
		c.fail(w, r, http.StatusNotFound, "No action "+action+": enable or disable.")
		return
	}
	if c.extra.Endpoints == nil {
		c.fail(w, r, http.StatusNotFound, "This console has no publishing service attached.")
		return
	}
	enable := action == "enable"
	reason := "by " + actor + " at " + c.clk.Now().UTC().Format(time.RFC3339)
	_, err := c.extra.Endpoints.SetEnabled(r.Context(), id, enable, reason, actor)
	switch {
	case errors.Is(err, store.ErrNotFound):
		c.fail(w, r, http.StatusNotFound, "No endpoint "+id+".")
		return
	case err != nil:
		c.storeFailed(w, r, action+" endpoint", err)
		return
	}
	c.log.Info("console: endpoint "+action+"d", "endpoint", id, "actor", actor)
	http.Redirect(w, r, "/endpoints?done="+action, http.StatusSeeOther)
}
