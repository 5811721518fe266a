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

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signals"
	"github.com/hookledger/hookledger/internal/store"
)

// WithSignals gives the console the config's signals section: the
// signals' registry, the thresholds the overview judges them by (the same
// as GET /api/v1/signals and the monitor's), and the window of the
// signals that count occurrences. Without it the defaults apply.
func WithSignals(cfg config.Signals) Option {
	return func(c *Console) { c.signals = cfg }
}

// overviewStore is what the overview reads besides Store; store.Store
// implements it. A store without it shows the overview's links only.
type overviewStore interface {
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

// overview serves GET /: the signals, their sparklines and the trend
// charts.
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
	st, ok := c.st.(overviewStore)
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
	reg := cfg.SignalSet()
	for _, s := range report.Signals {
		def, _ := reg.Lookup(s.Name)
		d.Signals = append(d.Signals, newSignalCard(def, s, since))
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
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// signalListURL is the address of a signal's list, with extra filters
// (name, value pairs). since is the start of the signals' window.
func signalListURL(l store.SignalList, since string, extra ...string) string {
	kv := slices.Concat(l.Filters, extra)
	if l.Window {
		kv = append(kv, "from", since)
	}
	return listURL(l.Path, kv...)
}

// keyURL is where one breakdown key leads by the signal's key links (the
// first that takes it), "" when none does.
func keyURL(def store.SignalDef, dim, key, since string) string {
	for _, k := range def.Keys {
		if k.Dim != dim || (k.Key != "" && k.Key != key) || (k.Except != "" && k.Except == key) {
			continue
		}
		var extra []string
		switch len(k.As) {
		case 0:
		case 1:
			extra = []string{k.As[0], key}
		default:
			parts := strings.SplitN(key, "/", len(k.As))
			if len(parts) < len(k.As) {
				return ""
			}
			for i, name := range k.As {
				extra = append(extra, name, parts[i])
			}
		}
		return signalListURL(k.List, since, extra...)
	}
	return ""
}

// newSignalCard words one signal as its registry entry says and links
// every number to the list of the items it counts. since is the start of
// the window of the signals that count audit rows, so their list shows
// the rows counted.
func newSignalCard(def store.SignalDef, s signals.Signal, since string) *signalCard {
	card := &signalCard{Name: s.Name, Title: cmp.Or(def.Title, s.Name), Help: def.Help, Value: s.Value, Status: s.Status}
	if s.OldestAgeSeconds != nil {
		card.Age = humanAge(*s.OldestAgeSeconds)
	}
	if def.List.Path != "" {
		card.Href = signalListURL(def.List, since)
	}
	for _, l := range def.Also {
		card.Also = append(card.Also, link{l.Label, signalListURL(l, since)})
	}
	for _, dim := range slices.Sorted(maps.Keys(s.Breakdown)) {
		keys := s.Breakdown[dim]
		// Largest first, then by name, so a refresh does not reorder.
		names := slices.SortedFunc(maps.Keys(keys), func(a, b string) int {
			return cmp.Or(cmp.Compare(keys[b], keys[a]), cmp.Compare(a, b))
		})
		for _, k := range names {
			card.Breakdown = append(card.Breakdown, breakdownItem{Dim: dim, Key: k, Count: keys[k], Href: keyURL(def, dim, k, since)})
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
// the signals and the trend series over the last 24 h, values in
// their display unit (rates per second). It is behind the session like
// every console address.
func (c *Console) overviewSeries(w http.ResponseWriter, r *http.Request) {
	st, ok := c.st.(overviewStore)
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
	for _, name := range append(c.signals.SignalSet().Names(), signals.TrendNames()...) {
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
