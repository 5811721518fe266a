package deliver

// Limit is one destination's rate limit and concurrency as the worker
// holds them now, for the operator console.
type Limit struct {
	Destination string
	// PerSecond and Burst are the token bucket's refill rate and size
	// (0: no rate limit); Tokens is what the bucket holds now.
	PerSecond float64
	Burst     int
	Tokens    float64
	// InFlight counts the calls under way; MaxInFlight bounds them.
	InFlight, MaxInFlight int
}

// Limits reports every configured destination's token bucket and calls in
// flight, in configuration order. The buckets are read at the worker's
// clock, without taking a token.
func (w *Worker) Limits() []Limit {
	now := w.clk.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Limit, 0, len(w.names))
	for _, name := range w.names {
		l := Limit{Destination: name, InFlight: w.inflight[name], MaxInFlight: w.caps[name]}
		if lim := w.limits[name]; lim != nil {
			l.PerSecond, l.Burst, l.Tokens = float64(lim.Limit()), lim.Burst(), lim.TokensAt(now)
		}
		out = append(out, l)
	}
	return out
}
