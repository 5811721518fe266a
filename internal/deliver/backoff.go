package deliver

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/config"
)

// Backoff is exponential backoff with full jitter (RT04):
// sleep = random(0, min(cap, base × factor^(attempt-1))).
type Backoff struct {
	Base   time.Duration
	Factor float64
	Cap    time.Duration
}

// backoffFor reads a destination's policy.
func backoffFor(p config.RetryPolicy) Backoff {
	return Backoff{Base: p.Base.D(), Factor: p.Factor, Cap: p.Cap.D()}
}

// retryWait is the wait after the attempt-th call (1-based) to d: its
// schedule when it has one (an endpoint's: each wait stretched by up to a
// fifth at random, so endpoints recovering together are not all retried
// in the same second), exponential backoff with full jitter otherwise.
// Full jitter would make a 10 h step anything from 0 to 10 h, which is no
// schedule at all.
func retryWait(d *config.Destination, attempt int, r func() float64) time.Duration {
	if len(d.Schedule) > 0 {
		s := d.Schedule[min(max(attempt, 1), len(d.Schedule))-1]
		return s + time.Duration(r()*float64(s)/5)
	}
	return backoffFor(d.Retry).Wait(attempt, r)
}

// Ceiling is the upper bound of the wait after the attempt-th call (1-based).
func (b Backoff) Ceiling(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	c := float64(b.Base) * math.Pow(b.Factor, float64(attempt-1))
	if c > float64(b.Cap) || math.IsInf(c, 0) || math.IsNaN(c) {
		return b.Cap
	}
	return time.Duration(c)
}

// Wait draws the jittered wait; r returns a number in [0, 1).
func (b Backoff) Wait(attempt int, r func() float64) time.Duration {
	return time.Duration(r() * float64(b.Ceiling(attempt)))
}

// retryAfter is a parsed Retry-After header, kept with its evidence (RT05).
type retryAfter struct {
	Raw  string        // the header as received
	Unit string        // the unit applied to a number: seconds or milliseconds; "date" for an HTTP date
	Wait time.Duration // the wait taken after bounds
	OK   bool          // false when absent or unparseable
}

// parseRetryAfter reads the header: a number in the destination's unit
// (seconds unless it is a receiver behind a HubSpot workflow, which speaks
// milliseconds), or an HTTP date relative to now. The wait is bounded to
// [0, max] so a unit mistake cannot park an effect for days.
func parseRetryAfter(h http.Header, unit string, maxWait time.Duration, now time.Time) retryAfter {
	raw := strings.TrimSpace(h.Get("Retry-After"))
	ra := retryAfter{Raw: raw}
	if raw == "" {
		return ra
	}
	if n, err := strconv.ParseFloat(raw, 64); err == nil && n >= 0 && !math.IsInf(n, 0) {
		ra.Unit = unit
		per := time.Second
		if unit == "milliseconds" {
			per = time.Millisecond
		}
		w := n * float64(per)
		if w > float64(maxWait) {
			w = float64(maxWait)
		}
		ra.Wait, ra.OK = time.Duration(w), true
		return ra
	}
	if t, err := http.ParseTime(raw); err == nil {
		ra.Unit = "date"
		w := t.Sub(now)
		ra.Wait, ra.OK = clamp(w, 0, maxWait), true
		return ra
	}
	return ra
}

func clamp(d, lo, hi time.Duration) time.Duration {
	return min(max(d, lo), hi)
}
