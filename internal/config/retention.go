package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/hookledger/hookledger/internal/vendors"
)

// Defaults of retention (docs/retention.md).
const (
	// DefaultRetention is how long a source's events, deliveries, work
	// rows and audit rows are kept: 30 days covers the longest resend or
	// replay window of every sender in the vendor catalogue that hookledger
	// verifies (Stripe's CLI resends for 30 days), so a resend still finds
	// its event and is deduplicated.
	DefaultRetention = 30 * 24 * time.Hour
	// DefaultRetentionInterval is how often the maintenance loop prunes:
	// rows live at most one interval past their retention, and an hourly
	// pass is a few thousand short transactions at most.
	DefaultRetentionInterval = time.Hour
	// DefaultRetentionBatch bounds the events (or audit rows) one
	// transaction examines. On SQLite the writer is shared with ingest and
	// a webhook that arrives during a batch waits for it: on a store of a
	// million events, batches of 200 kept the ingest p99 beside a pass at
	// 175 ms against 239 ms with 500, for a pass 8 % longer
	// (docs/retention.md).
	DefaultRetentionBatch = 200
	// maxRetentionBatch keeps a batch a short transaction whatever the
	// file says.
	maxRetentionBatch = 5000
)

// Retention tunes the maintenance loop that deletes what is past its
// sources' retention (docs/retention.md). The retention itself is per
// source (sources[].retention).
type Retention struct {
	// Interval is the time between two passes.
	Interval Duration `yaml:"interval"`
	// BatchSize bounds the events, or audit rows, deleted in one
	// transaction.
	BatchSize int `yaml:"batch_size"`
	// Pause is the least time between two batches of one pass; the loop
	// also waits at least as long as the last batch took, so pruning
	// never holds the writer more than half of the time and ingest gets
	// it between batches.
	Pause Duration `yaml:"pause"`
	// Disabled turns the loop off (nothing is ever deleted).
	Disabled bool `yaml:"disabled"`
}

// RetentionPeriod is how long rows are kept: a Go duration ("720h") or a
// whole number of days ("30d"), the unit retention is usually thought in.
type RetentionPeriod time.Duration

// D returns the value as a time.Duration.
func (r RetentionPeriod) D() time.Duration { return time.Duration(r) }

// String writes whole days as "30d".
func (r RetentionPeriod) String() string {
	d := time.Duration(r)
	if d > 0 && d%(24*time.Hour) == 0 {
		return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d"
	}
	return d.String()
}

// UnmarshalYAML parses "30d" or a Go duration, reporting a bad value with
// its position.
func (r *RetentionPeriod) UnmarshalYAML(node ast.Node) error {
	s, ok := node.(*ast.StringNode)
	if !ok {
		if _, isNull := node.(*ast.NullNode); isNull {
			*r = 0
			return nil
		}
		return posErrorf(node, "expected a retention such as 30d or 720h, got %s", node.Type())
	}
	if days, found := strings.CutSuffix(s.Value, "d"); found {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 100*365 {
			return posErrorf(node, "invalid retention %q: expected a whole number of days such as 30d, or a duration such as 720h", s.Value)
		}
		*r = RetentionPeriod(time.Duration(n) * 24 * time.Hour)
		return nil
	}
	v, err := time.ParseDuration(s.Value)
	if err != nil {
		return posErrorf(node, "invalid retention %q: expected a whole number of days such as 30d, or a duration such as 720h", s.Value)
	}
	*r = RetentionPeriod(v)
	return nil
}

// RetentionOrDefault returns the source's retention, or the default for
// a config that was not loaded (loading sets every source's).
func (s *Source) RetentionOrDefault() time.Duration {
	if s.Retention <= 0 {
		return DefaultRetention
	}
	return s.Retention.D()
}

func (c *Config) setRetentionDefaults() {
	r := &c.Retention
	setDur(&r.Interval, DefaultRetentionInterval)
	if r.BatchSize == 0 {
		r.BatchSize = DefaultRetentionBatch
	}
	if r.Pause == 0 {
		r.Pause = Duration(10 * time.Millisecond)
	}
	// A source left at the default keeps its rows for 30 days, or for its
	// vendor's longest window when that is longer (a source named after a
	// vendor that replays for 60 days): the default never fails IP03.
	for i := range c.Sources {
		s := &c.Sources[i]
		if s.Retention != 0 {
			continue
		}
		s.Retention = RetentionPeriod(DefaultRetention)
		if w, _, ok := sourceReplayWindow(s); ok && w.Duration > DefaultRetention {
			s.Retention = RetentionPeriod(w.Duration)
		}
	}
}

// sourceReplayWindow returns the longest window in which the vendor behind
// a source can send an event again (retry, manual resend or replay), as
// the linter's rule IP03 reads it from the vendor catalogue: the vendor is
// looked up by the source's kind and by its name. ok is false when the
// catalogue knows neither.
func sourceReplayWindow(s *Source) (w vendors.Window, vendorName string, ok bool) {
	ix := vendors.NewIndex()
	for _, name := range []string{s.Kind, s.Name} {
		c, found := ix.Lookup(name)
		if !found {
			continue
		}
		if cw, has := c.LongestWindow(); has && cw.Duration > w.Duration {
			w, vendorName, ok = cw, c.Name, true
		}
	}
	return w, vendorName, ok
}

// validateRetention refuses a retention shorter than the source vendor's
// longest resend or replay window (IP03): an event resent after its row
// was deleted is taken as new, and its effects run again.
func (c *Config) validateRetention(add func(path, format string, args ...any)) {
	r := &c.Retention
	if r.Interval < 0 {
		add("$.retention.interval", "retention.interval must be positive")
	}
	if r.Pause < 0 {
		add("$.retention.pause", "retention.pause must not be negative")
	}
	if r.BatchSize < 0 || r.BatchSize > maxRetentionBatch {
		add("$.retention.batch_size", "retention.batch_size must be from 1 to %d, got %d", maxRetentionBatch, r.BatchSize)
	}
	for i := range c.Sources {
		s := &c.Sources[i]
		p := fmt.Sprintf("$.sources[%d].retention", i)
		if s.Retention < 0 {
			add(p, "source %q: retention must be positive", s.Name)
			continue
		}
		if s.Retention.D() < 24*time.Hour {
			add(p, "source %q: retention %s is under a day; rows are pruned hourly, and a sender's retries alone last longer", s.Name, s.Retention)
			continue
		}
		w, name, ok := sourceReplayWindow(s)
		if !ok {
			continue
		}
		if keep := s.RetentionOrDefault(); keep < w.Duration {
			add(p, "source %q: IP03: retention %s is shorter than %s's %s of %s: an event sent again after its row is deleted is taken as new and its effects run again; keep at least %s",
				s.Name, RetentionPeriod(keep), name, w.Name, RetentionPeriod(w.Duration), RetentionPeriod(w.Duration))
		}
	}
}
