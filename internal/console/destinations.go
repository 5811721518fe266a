package console

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/hookledger/hookledger/internal/store"
)

// The destinations and sources page: how each destination has answered
// lately, what waits for it, and when each source last sent. Every read is
// bounded by rows, not by the size of the store (store.Stats).

const (
	// statsWindow is the recent window the page describes.
	statsWindow = 24 * time.Hour
	// statsAttempts and statsEvents bound the rows read for it: enough for
	// a p99 and a picture of the recent mix, few enough that the page
	// answers in tens of milliseconds on a store of a million events.
	statsAttempts = 2000
	statsEvents   = 5000
	// requestsMetric is the receiver's counter of requests by source and
	// status.
	requestsMetric = "hookledger_receive_requests_total"
)

// destRow is one destination on the page.
type destRow struct {
	Name  string
	Calls int
	OK    int
	// Rate is the share of calls that succeeded, in percent (-1: no call).
	Rate          float64
	P50, P90, P99 time.Duration
	Classes       []classCount
	Last          time.Time
	RetryWait     int64
	Dead          int64
	Unknown       int64
	Owners        []ownerCount
	Limit         *DestinationLimit
	Link          string
}

type classCount struct {
	Class store.ErrorClass
	Count int
}

type ownerCount struct {
	Owner string
	Count int64
}

// sourceRow is one source on the page.
type sourceRow struct {
	Name         string
	Last         *store.Event
	LastLink     string
	Dispositions []dispositionCount
	Recent       int
	// Requests by HTTP status since the server started (the receiver's
	// counter), with the rejections spelled out.
	Requests     []statusCount
	Signature    int64
	Tenant       int64
	Malformed    int64
	TenantAudits int
	Link         string
}

type dispositionCount struct {
	Disposition store.Disposition
	Count       int
	Link        string
}

type statusCount struct {
	Code  string
	Count int64
}

// destinationsData is the page.
type destinationsData struct {
	Since        time.Time
	Attempts     int
	AttemptsFull bool
	Events       int
	EventsFull   bool
	Destinations []*destRow
	Sources      []*sourceRow
	NoLimits     bool
	NoMetrics    bool
	Off          string
}

// destinationsPage serves GET /destinations.
func (c *Console) destinationsPage(w http.ResponseWriter, r *http.Request) {
	st, ok := c.st.(store.Stats)
	d := &destinationsData{NoLimits: c.extra.Limits == nil, NoMetrics: c.extra.Metrics == nil}
	if !ok {
		d.Off = "This store cannot report recent activity."
		c.render(w, r, http.StatusOK, "destinations", &view{Title: "Destinations and sources", Nav: "destinations", Data: d})
		return
	}
	ctx := r.Context()
	now := c.clk.Now()
	d.Since = now.Add(-statsWindow)

	dests := map[string]*destRow{}
	dest := func(name string) *destRow {
		if dests[name] == nil {
			dests[name] = &destRow{Name: name, Rate: -1,
				Link: "/effects?" + url.Values{"state": {"any"}, "destination": {name}}.Encode()}
		}
		return dests[name]
	}
	for _, n := range c.extra.Destinations {
		dest(n)
	}
	// The three bounded reads are independent: they run at once, on the
	// store's reader connections.
	var (
		attempts []*store.RecentAttempt
		parked   []*store.ParkedCount
		counts   []*store.EventCount
		errs     [3]error
		wg       sync.WaitGroup
	)
	wg.Add(3)
	go func() {
		defer wg.Done()
		attempts, errs[0] = st.AttemptRecent(ctx, &store.AttemptRecentParams{Since: d.Since, Limit: statsAttempts})
	}()
	go func() { defer wg.Done(); parked, errs[1] = st.EffectParked(ctx) }()
	go func() {
		defer wg.Done()
		counts, errs[2] = st.EventRecentCounts(ctx, &store.EventRecentParams{Limit: statsEvents})
	}()
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		c.storeFailed(w, r, "recent activity", err)
		return
	}
	d.Attempts, d.AttemptsFull = len(attempts), len(attempts) == statsAttempts
	durations := map[string][]time.Duration{}
	classes := map[string]map[store.ErrorClass]int{}
	for _, a := range attempts {
		row := dest(a.Destination)
		row.Calls++
		if a.Class == store.ClassNone {
			row.OK++
		} else {
			if classes[a.Destination] == nil {
				classes[a.Destination] = map[store.ErrorClass]int{}
			}
			classes[a.Destination][a.Class]++
		}
		if a.StartedAt.After(row.Last) {
			row.Last = a.StartedAt
		}
		durations[a.Destination] = append(durations[a.Destination], a.Duration)
	}
	for name, row := range dests {
		if row.Calls > 0 {
			row.Rate = 100 * float64(row.OK) / float64(row.Calls)
		}
		ds := durations[name]
		slices.Sort(ds)
		row.P50, row.P90, row.P99 = quantile(ds, 0.50), quantile(ds, 0.90), quantile(ds, 0.99)
		for cl, n := range classes[name] {
			row.Classes = append(row.Classes, classCount{cl, n})
		}
		slices.SortFunc(row.Classes, func(a, b classCount) int { return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Class, b.Class)) })
	}
	owners := map[string]map[string]int64{}
	for _, p := range parked {
		row := dest(p.Destination)
		switch p.State {
		case store.EffectRetryWait:
			row.RetryWait += p.Count
		case store.EffectDead:
			row.Dead += p.Count
		case store.EffectNeedsReconciliation:
			row.Unknown += p.Count
		}
		if p.Owner != "" {
			if owners[p.Destination] == nil {
				owners[p.Destination] = map[string]int64{}
			}
			owners[p.Destination][p.Owner] += p.Count
		}
	}
	for name, os := range owners {
		for o, n := range os {
			dests[name].Owners = append(dests[name].Owners, ownerCount{o, n})
		}
		slices.SortFunc(dests[name].Owners, func(a, b ownerCount) int { return cmp.Compare(a.Owner, b.Owner) })
	}
	if c.extra.Limits != nil {
		for _, l := range c.extra.Limits() {
			dest(l.Destination).Limit = &l
		}
	}
	for _, row := range dests {
		d.Destinations = append(d.Destinations, row)
	}
	slices.SortFunc(d.Destinations, func(a, b *destRow) int { return cmp.Compare(a.Name, b.Name) })

	if err := c.sourceRows(r, st, d, counts); err != nil {
		c.storeFailed(w, r, "recent events", err)
		return
	}
	c.render(w, r, http.StatusOK, "destinations", &view{Title: "Destinations and sources", Nav: "destinations", Data: d})
}

// sourceRows fills the sources: the newest events by disposition, each
// source's last event, the receiver's request counters and the tenant
// rejections the audit trail holds.
func (c *Console) sourceRows(r *http.Request, st store.Stats, d *destinationsData, counts []*store.EventCount) error {
	ctx := r.Context()
	sources := map[string]*sourceRow{}
	src := func(name string) *sourceRow {
		if sources[name] == nil {
			sources[name] = &sourceRow{Name: name, Link: "/events?" + url.Values{"source": {name}}.Encode()}
		}
		return sources[name]
	}
	for _, n := range c.extra.Sources {
		src(n)
	}
	byDisp := map[string]map[store.Disposition]int{}
	for _, n := range counts {
		s := src(n.Source)
		s.Recent += int(n.Count)
		d.Events += int(n.Count)
		if byDisp[n.Source] == nil {
			byDisp[n.Source] = map[store.Disposition]int{}
		}
		byDisp[n.Source][n.Disposition] += int(n.Count)
	}
	d.EventsFull = d.Events == statsEvents
	requests := c.receiverRequests()
	for name, s := range sources {
		// One indexed read per source: its newest event, however long
		// ago it came.
		last, err := st.EventRecent(ctx, &store.EventRecentParams{Source: name, Limit: 1})
		if err != nil {
			return err
		}
		if len(last) == 1 {
			s.Last = last[0]
		}
		if s.Last != nil {
			s.LastLink = eventLink(s.Last.Source, s.Last.EventID)
		}
		for _, disp := range store.Dispositions() {
			if n := byDisp[name][disp]; n > 0 {
				s.Dispositions = append(s.Dispositions, dispositionCount{disp, n,
					"/events?" + url.Values{"source": {name}, "disposition": {string(disp)}}.Encode()})
			}
		}
		for code, n := range requests[name] {
			s.Requests = append(s.Requests, statusCount{code, n})
			switch code {
			case "401":
				s.Signature += n
			case "403":
				s.Tenant += n
			case "400":
				s.Malformed += n
			}
		}
		slices.SortFunc(s.Requests, func(a, b statusCount) int { return cmp.Compare(a.Code, b.Code) })
	}
	rows, err := c.st.AuditList(ctx, &store.AuditListParams{Action: "tenant_mismatch", From: d.Since, Limit: 1000})
	if err != nil {
		return err
	}
	for _, a := range rows {
		src(a.Source).TenantAudits++
	}
	for _, s := range sources {
		d.Sources = append(d.Sources, s)
	}
	slices.SortFunc(d.Sources, func(a, b *sourceRow) int { return cmp.Compare(a.Name, b.Name) })
	return nil
}

// receiverRequests reads the receiver's request counter from the server's
// registry: source -> status -> requests since the server started.
func (c *Console) receiverRequests() map[string]map[string]int64 {
	out := map[string]map[string]int64{}
	if c.extra.Metrics == nil {
		return out
	}
	families, err := c.extra.Metrics.Gather()
	if err != nil {
		c.log.Warn("console: metrics not gathered", "err", err)
	}
	for _, mf := range families {
		if mf.GetName() != requestsMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			source, code := label(m, "source"), label(m, "code")
			if out[source] == nil {
				out[source] = map[string]int64{}
			}
			out[source][code] += int64(m.GetCounter().GetValue())
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// quantile is the nearest-rank q-quantile of sorted durations, 0 for none.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// percent shows a share; "—" when there was nothing to share.
func percent(v float64) string {
	if v < 0 {
		return "—"
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + "%"
}

// rate words a token bucket's refill.
func (l *DestinationLimit) Rate() string {
	if l.PerSecond <= 0 {
		return "no rate limit"
	}
	return fmt.Sprintf("%g/s, burst %d", l.PerSecond, l.Burst)
}
