package signals

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/hookledger/hookledger/internal/store"
)

// The trend series the monitor records beside the signals, in the same
// history table (whose names are free text, so no signal may take one of
// these names): the console's trend charts read them. Each is recorded with status ok, because a trend has
// no threshold of its own; the signals carry the verdicts.
const (
	// TrendReceived is webhook requests acknowledged with a 2xx per
	// second, in thousandths (RateScale): a batch request counts once.
	TrendReceived = "rate:received"
	// TrendAckP99 is the 99th percentile of the time to acknowledge a
	// webhook over the interval, in milliseconds, rounded up.
	TrendAckP99 = "ack_p99_ms"
	// TrendEffectsDone is effects entering done per second, in
	// thousandths (RateScale).
	TrendEffectsDone = "rate:effects_done"
	// TrendExceptions is the exception queue's size: effects dead or in
	// needs_reconciliation (read up to queueSample).
	TrendExceptions = "exceptions"
	// TrendExceptionsOldest is the age in seconds of the exception
	// queue's oldest effect, from when it last changed.
	TrendExceptionsOldest = "exceptions_oldest_s"
)

// RateScale is what a rate series is multiplied by before it is stored:
// the history holds integers, and a self-hosted engine's typical traffic
// (a few events a minute) would read 0 per second otherwise.
const RateScale = 1000

// TrendNames returns the trend series in the order the console charts
// them.
func TrendNames() []string {
	return []string{TrendReceived, TrendAckP99, TrendEffectsDone, TrendExceptions, TrendExceptionsOldest}
}

// The metrics the trends are derived from (registered by the receiver and
// the delivery worker on the server's registry).
const (
	metricRequests    = "hookledger_receive_requests_total"
	metricAck         = "hookledger_receive_ack_seconds"
	metricTransitions = "hookledger_effect_transitions_total"
)

// trendSample is the cumulative counters at one time.
type trendSample struct {
	at       time.Time
	received float64
	done     float64
	// ackBuckets is upper bound → cumulative count, summed over sources.
	ackBuckets map[float64]float64
}

// trendSampler derives the rate trends from the server's own Prometheus
// counters rather than from the store: the counters are already kept in
// memory for every request and every transition, so a rate costs one
// gather per interval and no query on the hot tables, and the
// acknowledgement time exists nowhere else (the store keeps receipt times,
// not how long the answer took). The rates are the difference between two
// rounds over the time between them; the first round only takes the
// baseline. The exception queue, which is standing state, is read from the
// store.
type trendSampler struct {
	g    prometheus.Gatherer
	prev *trendSample
}

// sample reads the counters now; nil without a gatherer.
func (ts *trendSampler) sample(now time.Time) (*trendSample, error) {
	if ts.g == nil {
		return nil, nil
	}
	fams, err := ts.g.Gather()
	if err != nil && len(fams) == 0 {
		return nil, fmt.Errorf("gather metrics: %w", err)
	}
	s := &trendSample{at: now, ackBuckets: map[float64]float64{}}
	for _, f := range fams {
		switch f.GetName() {
		case metricRequests:
			for _, m := range f.GetMetric() {
				if strings.HasPrefix(label(m, "code"), "2") {
					s.received += m.GetCounter().GetValue()
				}
			}
		case metricTransitions:
			for _, m := range f.GetMetric() {
				if label(m, "to") == string(store.EffectDone) {
					s.done += m.GetCounter().GetValue()
				}
			}
		case metricAck:
			for _, m := range f.GetMetric() {
				for _, b := range m.GetHistogram().GetBucket() {
					s.ackBuckets[b.GetUpperBound()] += float64(b.GetCumulativeCount())
				}
				s.ackBuckets[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return s, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// rates turns the sample into points against the previous one, and keeps
// it as the next baseline. No points on the first sample; when the clock
// did not move the baseline stays, so the next interval still counts what
// happened meanwhile.
func (ts *trendSampler) rates(cur *trendSample) []store.SignalHistoryInput {
	prev := ts.prev
	if prev == nil {
		ts.prev = cur
		return nil
	}
	secs := cur.at.Sub(prev.at).Seconds()
	if secs <= 0 {
		return nil
	}
	ts.prev = cur
	rate := func(a, b float64) int64 {
		d := b - a
		if d < 0 { // a counter that restarted counts from zero
			d = b
		}
		return int64(math.Round(d * RateScale / secs))
	}
	// The histogram over the interval is the difference of the cumulative
	// buckets.
	bounds := make([]float64, 0, len(cur.ackBuckets))
	for ub := range cur.ackBuckets {
		bounds = append(bounds, ub)
	}
	slices.Sort(bounds)
	counts := make([]float64, len(bounds))
	for i, ub := range bounds {
		counts[i] = max(cur.ackBuckets[ub]-prev.ackBuckets[ub], 0)
	}
	p99 := quantile(0.99, bounds, counts)
	return []store.SignalHistoryInput{
		{Name: TrendReceived, Value: rate(prev.received, cur.received), Status: StatusOK},
		{Name: TrendAckP99, Value: int64(math.Ceil(p99 * 1000)), Status: StatusOK},
		{Name: TrendEffectsDone, Value: rate(prev.done, cur.done), Status: StatusOK},
	}
}

// quantile estimates the q-quantile from cumulative bucket counts sorted
// by upper bound (the last +Inf), interpolating linearly within the bucket
// as Prometheus's histogram_quantile does; 0 for an empty histogram. A
// rank in the +Inf bucket reads the highest finite bound.
func quantile(q float64, bounds, cum []float64) float64 {
	if len(bounds) == 0 || cum[len(cum)-1] == 0 {
		return 0
	}
	rank := q * cum[len(cum)-1]
	for i, c := range cum {
		if c < rank {
			continue
		}
		if math.IsInf(bounds[i], 1) {
			if i == 0 {
				return 0
			}
			return bounds[i-1]
		}
		lower, below := 0.0, 0.0
		if i > 0 {
			lower, below = bounds[i-1], cum[i-1]
		}
		if c == below {
			return bounds[i]
		}
		return lower + (bounds[i]-lower)*(rank-below)/(c-below)
	}
	return bounds[len(bounds)-1]
}

// exceptions measures the exception queue from the ledger, at most
// queueSample rows, like the effects queue gauge.
func exceptions(ctx context.Context, st MonitorStore, now time.Time) ([]store.SignalHistoryInput, error) {
	list, err := st.EffectList(ctx, &store.EffectListParams{States: store.ExceptionStates(), Limit: queueSample,
		WithoutRequest: true})
	if err != nil {
		return nil, fmt.Errorf("measure the exception queue: %w", err)
	}
	var oldest time.Time
	for _, e := range list {
		if oldest.IsZero() || e.UpdatedAt.Before(oldest) {
			oldest = e.UpdatedAt
		}
	}
	var age int64
	if !oldest.IsZero() {
		age = int64(max(now.Sub(oldest), 0) / time.Second)
	}
	return []store.SignalHistoryInput{
		{Name: TrendExceptions, Value: int64(len(list)), Status: StatusOK},
		{Name: TrendExceptionsOldest, Value: age, Status: StatusOK},
	}, nil
}

// recordTrends records the trend series of one round.
func (m *Monitor) recordTrends(ctx context.Context, now time.Time) error {
	var errs []error
	var points []store.SignalHistoryInput
	if cur, err := m.trends.sample(now); err != nil {
		errs = append(errs, err)
	} else if cur != nil {
		points = append(points, m.trends.rates(cur)...)
	}
	if ex, err := exceptions(ctx, m.st, now); err != nil {
		errs = append(errs, err)
	} else {
		points = append(points, ex...)
	}
	if len(points) > 0 {
		if err := m.st.SignalHistoryRecord(ctx, &store.SignalHistoryRecordParams{Now: now, Points: points}); err != nil {
			errs = append(errs, fmt.Errorf("record trends: %w", err))
		}
	}
	return errors.Join(errs...)
}
