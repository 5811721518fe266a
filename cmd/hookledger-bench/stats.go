package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// latencies holds every sample of one cell. Samples are kept whole rather
// than bucketed: a cell yields at most a few hundred thousand of them, and
// exact percentiles keep p99.9 honest.
type latencies []time.Duration

func mergeLatencies(parts []latencies) latencies {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	all := make(latencies, 0, n)
	for _, p := range parts {
		all = append(all, p...)
	}
	slices.Sort(all)
	return all
}

// pct returns the q-quantile (0 < q <= 1) of sorted samples by the
// nearest-rank method, or 0 when there are none.
func (l latencies) pct(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(q*float64(len(l))+0.999999) - 1
	i = max(0, min(i, len(l)-1))
	return l[i]
}

// ms formats a duration in milliseconds with enough digits for sub-ms values.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// parseCounts parses "1,32,128".
func parseCounts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive count", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no counts in %q", s)
	}
	return out, nil
}
