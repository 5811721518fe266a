package api

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
)

// signalHistoryStore is what the history resource reads.
type signalHistoryStore interface {
	SignalHistoryList(ctx context.Context, p *store.SignalHistoryListParams) ([]*store.SignalPoint, error)
}

// defaultHistorySpan is the range of GET /api/v1/signals/history when the
// query names none: the minute buckets the store keeps.
const defaultHistorySpan = 24 * time.Hour

// ServeSignals enables GET /api/v1/signals (the outcome signals of cfg's
// registry, measured now with its thresholds) and GET
// /api/v1/signals/history. The server calls it with its config; without
// it the resources do not exist.
func (h *Handler) ServeSignals(cfg config.Signals) {
	h.handle("GET /api/v1/signals", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.getSignals(w, r, &cfg) }))
	names := cfg.SignalSet().Names()
	h.handle("GET /api/v1/signals/history", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.getSignalHistory(w, r, names)
	}))
}

// getSignals measures the signals at the time of the request rather than
// answering the monitor's last round, so a client that just repaired
// something sees the effect at once.
func (h *Handler) getSignals(w http.ResponseWriter, r *http.Request, cfg *config.Signals) {
	st, ok := h.st.(signals.Store)
	if !ok {
		writeError(w, http.StatusNotFound, "this store has no signals")
		return
	}
	if names := slices.Sorted(maps.Keys(r.URL.Query())); len(names) > 0 {
		h.badParam(w, &ParamError{Param: names[0], Msg: "unknown parameter; this resource takes none"})
		return
	}
	report, _, err := signals.Compute(r.Context(), st, cfg, h.now())
	if err != nil {
		h.storeFailed(w, "measure signals", err)
		return
	}
	writeJSON(w, http.StatusOK, report)
}

// SignalPointJSON is one bucket of a signal's history: the highest value
// and the worst status within it.
type SignalPointJSON struct {
	At     string `json:"at"`
	Value  int64  `json:"value"`
	Status string `json:"status"`
}

// SignalHistoryJSON is the answer of GET /api/v1/signals/history.
type SignalHistoryJSON struct {
	Name       string            `json:"name"`
	Resolution string            `json:"resolution"`
	Points     []SignalPointJSON `json:"points"`
}

// signalHistoryParams lists the parameters of GET /api/v1/signals/history.
var signalHistoryParams = []string{"name", "from", "to", "resolution"}

// SignalHistoryFilter reads the query of GET /api/v1/signals/history at
// now for the built-in signals (signalHistoryFilter).
func SignalHistoryFilter(v url.Values, now time.Time) (*store.SignalHistoryListParams, error) {
	return signalHistoryFilter(v, now, store.SignalNames())
}

// signalHistoryFilter reads the query of GET /api/v1/signals/history at
// now: name is required, one of names; from defaults to the
// DefaultHistorySpan before to, and to to now, extended to the end of
// now's bucket; the resolution defaults to minute for a range of at most
// 24 h (the minute buckets the store keeps) and to hour beyond.
func signalHistoryFilter(v url.Values, now time.Time, names []string) (*store.SignalHistoryListParams, error) {
	q := newQuery(v, signalHistoryParams...)
	p := &store.SignalHistoryListParams{Name: oneOf(q, "name", names)}
	if q.str("name") == "" {
		q.fail("name", "required: one of "+joinSet(names))
	}
	p.Resolution = oneOf(q, "resolution", []string{store.ResolutionMinute, store.ResolutionHour})
	p.From, p.To = q.span("from", "to")
	toNow := p.To.IsZero()
	if toNow {
		p.To = now
		if !p.From.IsZero() && !p.To.After(p.From) {
			q.fail("from", "must be before now when to is not given")
		}
	}
	if p.From.IsZero() {
		p.From = p.To.Add(-defaultHistorySpan)
	}
	if p.Resolution == "" {
		p.Resolution = store.ResolutionMinute
		if p.To.Sub(p.From) > defaultHistorySpan {
			p.Resolution = store.ResolutionHour
		}
	}
	if toNow {
		// Up to the end of the bucket now is in, so the newest bucket
		// (which started before now, or exactly at it) is part of the
		// answer.
		step := time.Minute
		if p.Resolution == store.ResolutionHour {
			step = time.Hour
		}
		p.To = now.Truncate(step).Add(step)
	}
	if err := q.result(); err != nil {
		return nil, err
	}
	return p, nil
}

// getSignalHistory serves GET /api/v1/signals/history for the signals
// named.
func (h *Handler) getSignalHistory(w http.ResponseWriter, r *http.Request, names []string) {
	st, ok := h.st.(signalHistoryStore)
	if !ok {
		writeError(w, http.StatusNotFound, "this store has no signal history")
		return
	}
	p, err := signalHistoryFilter(r.URL.Query(), h.now(), names)
	if err != nil {
		h.badParam(w, err)
		return
	}
	points, err := st.SignalHistoryList(r.Context(), p)
	if err != nil {
		h.storeFailed(w, "list signal history", err)
		return
	}
	out := SignalHistoryJSON{Name: p.Name, Resolution: p.Resolution, Points: make([]SignalPointJSON, 0, len(points))}
	for _, pt := range points {
		out.Points = append(out.Points, SignalPointJSON{At: pt.Bucket.UTC().Format(time.RFC3339), Value: pt.Value, Status: pt.Status})
	}
	writeJSON(w, http.StatusOK, out)
}
