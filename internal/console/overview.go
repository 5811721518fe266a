package console

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
)

// WithSignals gives the console the config's signals section: the
// thresholds the overview judges the nine signals by (the same as GET
// /api/v1/signals and the monitor's), and the window of the signals that
// count occurrences. Without it the defaults apply.
func WithSignals(cfg config.Signals) Option {
	return func(c *Console) { c.signals = cfg }
}

// OverviewStore is what the overview reads besides Store; store.Store
// implements it. A store without it shows the overview's links only.
type OverviewStore interface {
	signals.Store
	SignalHistoryList(ctx context.Context, p *store.SignalHistoryListParams) ([]*store.SignalPoint, error)
}

// historySpan is what the sparklines and trend charts show: the minute
// buckets the store keeps.
const historySpan = 24 * time.Hour

func (c *Console) overviewRoutes() {
	c.handle("GET /{$}", c.overview)
	c.handle("GET /overview/rows", c.overviewRows)
	c.handle("GET /overview/series.json", c.overviewSeries)
	c.handle("GET /audit", c.auditPage)
}

// signalInfo is how the overview words a signal and where its numbers
// lead.
type signalInfo struct {
	title, help string
}

var signalInfos = map[string]signalInfo{
	store.SignalRevisionLag:              {"Revision lag", "Entities whose newest routed event is not applied yet."},
	store.SignalUnfinishedEvents:         {"Unfinished events", "Events accepted and not yet in a final disposition."},
	store.SignalDeadlineRisk:             {"Deadline risk", "Pending effects near or past their business deadline."},
	store.SignalUnknownOutcomes:          {"Unknown outcomes", "Effects whose call may or may not have happened."},
	store.SignalKeyConflicts:             {"Key conflicts", "Episode keys or versions that collided, in the window."},
	store.SignalDeadLetters:              {"Dead letters", "Dead effects and dead-lettered events, waiting for a person."},
	store.SignalReconciliationMismatches: {"Reconciliation mismatches", "Done effects the destination does not have."},
	store.SignalCompensationOutstanding:  {"Compensation outstanding", "Compensations approved and not finished."},
	store.SignalLoopBlocks:               {"Loop blocks", "Feedback loops and hop limits stopped, in the window."},
}

// link is one number's way to the list behind it.
type link struct {
	Label, Href string
}

// breakdownItem is one key of a breakdown, with the list it stands for
// when the lists can filter by it.
type breakdownItem struct {
	Dim, Key string
	Count    int64
	Href     string
}

// signalCard is one signal on the overview.
type signalCard struct {
	Name, Title, Help string
	Value             int64
	// Age is the oldest counted item's age in words, "" when none.
	Age    string
	Status string
	// Href is where the value leads; Also are further lists.
	Href      string
	Also      []link
	Breakdown []breakdownItem
}

// StatusLabel is the status as a word: colour only repeats it.
func (s *signalCard) StatusLabel() string {
	switch s.Status {
	case signals.StatusOK:
		return "OK"
	case signals.StatusWarn:
		return "Warn"
	}
	return "Alert"
}

// Badge is the status's badge class.
func (s *signalCard) Badge() string {
	switch s.Status {
	case signals.StatusOK:
		return "badge ok"
	case signals.StatusWarn:
		return "badge pending"
	}
	return "badge alert"
}

// trendInfo is one trend chart: its series, label and the DOM id of its
// latest value.
type trendInfo struct {
	ID, Title string
	Series    []trendSeries
}

type trendSeries struct {
	Name, Label, Unit string
	// Latest is the newest minute's value in words ("—" without one).
	Latest string
}

// SeriesAttr lists the series for the chart script.
func (t *trendInfo) SeriesAttr() string {
	names := make([]string, 0, len(t.Series))
	for _, s := range t.Series {
		names = append(names, s.Name)
	}
	return strings.Join(names, ",")
}

func trendCharts() []*trendInfo {
	return []*trendInfo{
		{ID: "received", Title: "Received events per second", Series: []trendSeries{{Name: signals.TrendReceived, Label: "received", Unit: "/s"}}},
		{ID: "ack", Title: "Acknowledgement p99", Series: []trendSeries{{Name: signals.TrendAckP99, Label: "p99", Unit: "ms"}}},
		{ID: "done", Title: "Effects done per second", Series: []trendSeries{{Name: signals.TrendEffectsDone, Label: "done", Unit: "/s"}}},
		{ID: "exceptions", Title: "Exception queue", Series: []trendSeries{
			{Name: signals.TrendExceptions, Label: "size", Unit: "effects"},
			{Name: signals.TrendExceptionsOldest, Label: "oldest", Unit: "s"}}},
	}
}

// overviewData is the overview page and its refresh.
type overviewData struct {
	// Available is false when the store cannot measure the signals.
	Available bool
	At        string
	Signals   []*signalCard
	Trends    []*trendInfo
	Worst     string
}

// overview serves GET /: the nine signals, their sparklines and the
// trend charts.
func (c *Console) overview(w http.ResponseWriter, r *http.Request) {
	d, err := c.overviewNow(r)
	if err != nil {
		c.storeFailed(w, r, "measure signals", err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", &view{Title: "Overview", Nav: "overview", Data: d})
}

// overviewRows serves GET /overview/rows: the numbers alone, as
// out-of-band swaps, so a refresh leaves the charts in place.
func (c *Console) overviewRows(w http.ResponseWriter, r *http.Request) {
	d, err := c.overviewNow(r)
	if err != nil {
		c.log.Error("console: store failed", "op", "measure signals", "err", err)
		http.Error(w, "store unavailable", http.StatusServiceUnavailable)
		return
	}
	c.execute(w, http.StatusOK, "overview", "overview-rows", d)
}

func (c *Console) signalsConfig() *config.Signals {
	cfg := c.signals
	if cfg.Window <= 0 {
		cfg.Window = config.Duration(config.DefaultSignalsWindow)
	}
	return &cfg
}

// overviewNow measures the signals now, as GET /api/v1/signals does (not
// the monitor's last round: an operator who just repaired something sees
// it on the next refresh), and reads the trends' newest minute.
func (c *Console) overviewNow(r *http.Request) (*overviewData, error) {
	d := &overviewData{Trends: trendCharts()}
	st, ok := c.st.(OverviewStore)
	if !ok {
		return d, nil
	}
	now := c.clk.Now()
	cfg := c.signalsConfig()
	report, _, err := signals.Compute(r.Context(), st, cfg, now)
	if err != nil {
		return nil, err
	}
	d.Available, d.At, d.Worst = true, report.At, report.Worst()
	since := now.Add(-cfg.Window.D()).UTC().Format(time.RFC3339)
	for _, s := range report.Signals {
		d.Signals = append(d.Signals, newSignalCard(s, since))
	}
	// The newest minute bucket of each trend: the one now is in, else the
	// one before (a round may not have run yet this minute).
	for _, t := range d.Trends {
		for i := range t.Series {
			s := &t.Series[i]
			s.Latest = "—"
			pts, err := st.SignalHistoryList(r.Context(), &store.SignalHistoryListParams{Name: s.Name,
				Resolution: store.ResolutionMinute, From: now.Truncate(time.Minute).Add(-time.Minute), To: now.Truncate(time.Minute).Add(time.Minute)})
			if err != nil {
				return nil, fmt.Errorf("read trend %s: %w", s.Name, err)
			}
			if len(pts) > 0 {
				s.Latest = trendValue(s.Name, pts[len(pts)-1].Value)
			}
		}
	}
	return d, nil
}

// trendValue words a stored trend value in its unit.
func trendValue(name string, v int64) string {
	switch name {
	case signals.TrendReceived, signals.TrendEffectsDone:
		return fmt.Sprintf("%.2f/s", float64(v)/signals.RateScale)
	case signals.TrendAckP99:
		return fmt.Sprintf("%d ms", v)
	case signals.TrendExceptionsOldest:
		if v == 0 {
			return "—"
		}
		return humanAge(v)
	}
	return fmt.Sprint(v)
}

// humanAge words an age in seconds with its two largest units.
func humanAge(secs int64) string {
	d := time.Duration(secs) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", secs)
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", secs/60, secs%60)
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh %dm", secs/3600, secs%3600/60)
	}
	return fmt.Sprintf("%dd %dh", secs/86400, secs%86400/3600)
}

// listURL is a console list with its filters.
func listURL(path string, kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return path + "?" + v.Encode()
}

// outstandingStates are the states of a compensation that is not
// finished (compensation_outstanding counts these).
var outstandingStates = func() string {
	var out []string
	for _, s := range store.EffectStates() {
		switch s {
		case store.EffectDone, store.EffectResolved, store.EffectSuperseded:
			continue
		}
		out = append(out, string(s))
	}
	return strings.Join(out, ",")
}()

// newSignalCard words one signal and links every number to the list of
// the items it counts. since is the start of the window of the signals
// that count audit rows, so their list shows the rows counted.
func newSignalCard(s signals.Signal, since string) *signalCard {
	info := signalInfos[s.Name]
	card := &signalCard{Name: s.Name, Title: cmp.Or(info.title, s.Name), Help: info.help, Value: s.Value, Status: s.Status}
	if s.OldestAgeSeconds != nil {
		card.Age = humanAge(*s.OldestAgeSeconds)
	}
	// byKey links a breakdown key; "" leaves it as text.
	var byKey func(dim, key string) string
	switch s.Name {
	case store.SignalRevisionLag:
		card.Href = listURL("/events", "disposition", string(store.DispositionAccepted))
		byKey = func(dim, key string) string {
			if flow, entity, ok := strings.Cut(key, "/"); ok && dim == "largest_gap" {
				return entityLink(flow, entity)
			}
			return ""
		}
	case store.SignalUnfinishedEvents:
		card.Href = listURL("/events", "disposition", string(store.DispositionAccepted))
		byKey = func(dim, key string) string {
			if dim == "source" {
				return listURL("/events", "disposition", string(store.DispositionAccepted), "source", key)
			}
			return ""
		}
	case store.SignalDeadlineRisk:
		// Every state: an escalated effect may still be trying.
		card.Href = listURL("/effects", "state", api.StateAny, "deadline_missed", "true")
		byKey = func(dim, key string) string {
			if dim == "destination" {
				return listURL("/effects", "state", api.StateAny, "deadline_missed", "true", "destination", key)
			}
			return ""
		}
	case store.SignalUnknownOutcomes, store.SignalReconciliationMismatches:
		card.Href = listURL("/effects", "state", string(store.EffectNeedsReconciliation))
		if s.Name == store.SignalReconciliationMismatches {
			card.Also = []link{{"mismatches found", listURL("/audit", "action", "reconciliation_mismatch")}}
		}
		byKey = func(dim, key string) string {
			if dim == "destination" {
				return listURL("/effects", "state", string(store.EffectNeedsReconciliation), "destination", key)
			}
			return ""
		}
	case store.SignalKeyConflicts:
		card.Href = listURL("/audit", "action", "key_conflict", "from", since)
		byKey = func(string, string) string { return "" }
	case store.SignalDeadLetters:
		card.Href = listURL("/effects", "state", string(store.EffectDead))
		card.Also = []link{{"dead-lettered events", listURL("/events", "disposition", string(store.DispositionDeadLettered))}}
		byKey = func(dim, key string) string {
			switch {
			case dim == "kind" && key == "effects":
				return card.Href
			case dim == "kind" && key == "events":
				return card.Also[0].Href
			case dim == "owner" && key != "unassigned":
				return listURL("/effects", "state", string(store.EffectDead), "owner", key)
			}
			return ""
		}
	case store.SignalCompensationOutstanding:
		card.Href = listURL("/effects", "state", outstandingStates, "compensations", "true")
		byKey = func(dim, key string) string {
			if dim == "destination" {
				return listURL("/effects", "state", outstandingStates, "compensations", "true", "destination", key)
			}
			return ""
		}
	case store.SignalLoopBlocks:
		card.Href = listURL("/audit", "action", "loop_blocked", "from", since)
		card.Also = []link{{"hop limits", listURL("/audit", "action", "loop_hop_limit", "from", since)}}
		byKey = func(dim, key string) string {
			if dim == "kind" {
				return listURL("/audit", "action", key, "from", since)
			}
			return ""
		}
	default:
		byKey = func(string, string) string { return "" }
	}
	for _, dim := range slices.Sorted(maps.Keys(s.Breakdown)) {
		keys := s.Breakdown[dim]
		// Largest first, then by name, so a refresh does not reorder.
		names := slices.SortedFunc(maps.Keys(keys), func(a, b string) int {
			return cmp.Or(cmp.Compare(keys[b], keys[a]), cmp.Compare(a, b))
		})
		for _, k := range names {
			card.Breakdown = append(card.Breakdown, breakdownItem{Dim: dim, Key: k, Count: keys[k], Href: byKey(dim, k)})
		}
	}
	return card
}

// seriesJSON is one series of the last 24 h: Unix seconds and values,
// with a null where minutes are missing, so a chart shows the gap rather
// than a line across it.
type seriesJSON struct {
	T []int64    `json:"t"`
	V []*float64 `json:"v"`
	S []string   `json:"s"`
}

// overviewSeries serves GET /overview/series.json: the minute history of
// the nine signals and the trend series over the last 24 h, values in
// their display unit (rates per second). It is behind the session like
// every console address.
func (c *Console) overviewSeries(w http.ResponseWriter, r *http.Request) {
	st, ok := c.st.(OverviewStore)
	if !ok {
		http.Error(w, "this store has no signal history", http.StatusNotFound)
		return
	}
	now := c.clk.Now()
	to := now.Truncate(time.Minute).Add(time.Minute)
	from := to.Add(-historySpan)
	out := struct {
		From   int64                  `json:"from"`
		To     int64                  `json:"to"`
		Series map[string]*seriesJSON `json:"series"`
	}{From: from.Unix(), To: to.Unix(), Series: map[string]*seriesJSON{}}
	for _, name := range append(store.SignalNames(), signals.TrendNames()...) {
		pts, err := st.SignalHistoryList(r.Context(), &store.SignalHistoryListParams{Name: name,
			Resolution: store.ResolutionMinute, From: from, To: to})
		if err != nil {
			c.log.Error("console: store failed", "op", "list signal history", "err", err)
			http.Error(w, "store unavailable", http.StatusServiceUnavailable)
			return
		}
		out.Series[name] = toSeries(name, pts)
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func toSeries(name string, pts []*store.SignalPoint) *seriesJSON {
	s := &seriesJSON{T: []int64{}, V: []*float64{}, S: []string{}}
	scale := 1.0
	if name == signals.TrendReceived || name == signals.TrendEffectsDone {
		scale = signals.RateScale
	}
	var prev time.Time
	for _, p := range pts {
		if !prev.IsZero() && p.Bucket.Sub(prev) > 2*time.Minute {
			s.T, s.V, s.S = append(s.T, prev.Add(time.Minute).Unix()), append(s.V, nil), append(s.S, "")
		}
		v := float64(p.Value) / scale
		s.T, s.V, s.S = append(s.T, p.Bucket.Unix()), append(s.V, &v), append(s.S, p.Status)
		prev = p.Bucket
	}
	return s
}
