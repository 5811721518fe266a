// Package delivertest is a fault-injecting destination for delivery tests:
// a real net/http server on 127.0.0.1 that answers each call with a
// scripted or seeded fault, keeps idempotency keys the way Stripe does,
// answers lookups by key, and counts how many times the work behind each
// episode key was actually done, so a test can assert "exactly one effect
// per episode key at the destination".
//
// # Faults
//
// Every POST to any path other than the lookup prefix is one call. Its
// fault is, in order: the next scripted fault for its episode key (Script),
// else the seeded mix (Options.Mix, drawn from a hash of the seed, the key
// and the call's number for that key, so the outcome does not depend on
// which goroutine arrived first), else Success.
//
// # Idempotency (Stripe's rules)
//
// When Options.IdempotencyHeader is set and a POST carries it:
//   - the first response produced after execution began is saved and
//     replayed for every later request with the same key, including a
//     saved 500 (Fail500Saved) and the success of a call whose client timed
//     out or whose connection was cut (TimeoutAfterWork, ResetAfterWork);
//   - faults that happen before execution begins (Fail500, Fail429*,
//     TimeoutBeforeWork, ResetBeforeWork, Fail400 — Stripe saves no result
//     when validation fails or a rate limit refuses) save nothing, so the
//     key stays free;
//   - a key reused with a different body is refused with 400 and a Stripe
//     style {"error":{"type":"idempotency_error",...}} body, and does no
//     work;
//   - a key whose first request is still executing answers 409 (Stripe and
//     the IETF draft both do), doing no work;
//   - keys expire Options.Window after their first use on Options.Now
//     (zero: never), after which a resend is a new request.
//
// Other methods ignore the header, as Stripe does for GET and DELETE.
//
// # Lookup
//
// GET {LookupPrefix}{key} (default /effects/{key}) answers 200 with the
// record ({"id","key","executions"}) when the work was done for key, else
// 404, so a worker configured with lookup: can settle an unknown outcome.
package delivertest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Fault is what the destination does with one call.
type Fault int

// The faults.
const (
	// Success does the work and answers 201 {"id": ..., "key": ...}.
	Success Fault = iota
	// Fail500 answers 500 before execution begins (a proxy or an
	// overloaded front end): nothing is done, nothing is saved.
	Fail500
	// Fail500Saved begins execution, fails with 500 and saves that answer
	// under the idempotency key: Stripe replays it for the key's lifetime.
	// No work is done.
	Fail500Saved
	// Fail429Seconds answers 429 with Retry-After in seconds.
	Fail429Seconds
	// Fail429Millis answers 429 with Retry-After in milliseconds (a
	// destination configured retry_after.unit: milliseconds).
	Fail429Millis
	// Fail429Date answers 429 with Retry-After as an HTTP date.
	Fail429Date
	// TimeoutBeforeWork stalls until the client gives up (or calls
	// Options.Hang), then does nothing.
	TimeoutBeforeWork
	// TimeoutAfterWork does the work, saves the success under the key,
	// then stalls until the client gives up (or calls Options.Hang).
	TimeoutAfterWork
	// HiddenFailure answers 200 with a Marketo-style failure body
	// ({"success":false,"errors":[...]}): no work is done.
	HiddenFailure
	// BatchPartial does the work for the batch but reports a per-record
	// failure in a 200 body ({"results":[{"status":"created"},
	// {"status":"error",...}]}).
	BatchPartial
	// Fail400 refuses the request as invalid: no work is done.
	Fail400
	// ResetBeforeWork reads the whole request, then resets the connection
	// without answering: the client sent it and cannot know that nothing
	// was done.
	ResetBeforeWork
	// ResetAfterWork does the work, saves the success under the key, then
	// resets the connection without answering.
	ResetAfterWork
)

var faultNames = [...]string{"success", "500", "500_saved", "429_seconds", "429_millis", "429_date",
	"timeout_before_work", "timeout_after_work", "hidden_failure", "batch_partial", "400",
	"reset_before_work", "reset_after_work"}

func (f Fault) String() string {
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return "fault(" + strconv.Itoa(int(f)) + ")"
}

// Weighted is one entry of a seeded fault mix.
type Weighted struct {
	Fault  Fault
	Weight int
}

// Options configure the server; zero values take defaults.
type Options struct {
	// Seed makes the mix deterministic.
	Seed uint64
	// Mix draws a fault for calls with no script; empty means Success.
	Mix []Weighted
	// IdempotencyHeader is the header keys are saved under (Stripe:
	// Idempotency-Key); empty disables idempotency.
	IdempotencyHeader string
	// Window is how long a key is kept (zero: for the server's life).
	Window time.Duration
	// KeyHeader names the header that carries the episode key when it is
	// not the idempotency header; KeyField a top-level JSON body field.
	// The first that is present wins: idempotency header, KeyHeader,
	// KeyField.
	KeyHeader string
	KeyField  string
	// LookupPrefix is the path lookups are served under (default
	// /effects/).
	LookupPrefix string
	// Stall bounds the timeout faults: they wait for the client to give up,
	// or this long (default 10 s), whichever is first.
	Stall time.Duration
	// HangUp makes the timeout faults drop the connection at once, with no
	// answer, instead of waiting for the client's timeout. To the client it
	// is the same unknown outcome (the request was written, no answer came)
	// without a real-time wait, so tests need no short timeouts that a busy
	// machine could trip on a healthy call.
	HangUp bool
	// RetryAfter is the value of a 429's Retry-After: seconds for
	// Fail429Seconds (default 2), milliseconds for Fail429Millis (default
	// 1500), the distance into the future of Fail429Date (default 3 s).
	RetryAfter time.Duration
	// Now is the server's clock for HTTP dates and key windows (default
	// time.Now); tests pass the fake clock's Now.
	Now func() time.Time
	// Hang, when set, replaces the real-time wait of the timeout faults:
	// the server calls it (a test on a fake clock advances that clock by
	// the client's timeout there), then resets the connection without
	// answering, as the client's own deadline would have ended the call.
	// The client sees its request sent and no answer, as after a timeout,
	// without the test waiting for one.
	Hang func(r *http.Request)
}

// withDefaults fills in the zero options.
func (o Options) withDefaults() Options {
	if o.LookupPrefix == "" {
		o.LookupPrefix = "/effects/"
	}
	if o.Stall <= 0 {
		o.Stall = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Request is one request as the server saw it.
type Request struct {
	Method string
	Path   string
	Header http.Header
	Body   []byte
	Key    string
	At     time.Time // on Options.Now
	// Fault is what was applied; Replayed is set when a saved answer was
	// returned instead.
	Fault    Fault
	Replayed bool
	Status   int
}

type saved struct {
	bodyHash [32]byte
	status   int
	header   http.Header
	body     []byte
	at       time.Time
	running  bool
}

// Server is the fault-injecting destination.
type Server struct {
	*httptest.Server
	opts Options

	mu       sync.Mutex
	script   map[string][]Fault
	calls    map[string]int // POSTs per key, replays included
	executed map[string]int // times the work was done per key
	ids      map[string]string
	keys     map[string]*saved
	lookups  map[string]int
	log      []Request
	nextID   int

	// open counts the connections accepted and not yet closed; quiet is
	// closed when it falls to zero.
	open  int
	quiet chan struct{}
}

// New starts a server on 127.0.0.1; Close stops it (tests register
// t.Cleanup(s.Close)).
func New(opts Options) *Server {
	s := &Server{}
	s.reset(opts)
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.Config.ConnState = s.connState
	s.Start()
	return s
}

func (s *Server) connState(_ net.Conn, state http.ConnState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch state {
	case http.StateNew:
		if s.open++; s.open == 1 {
			s.quiet = make(chan struct{})
		}
	case http.StateClosed, http.StateHijacked:
		if s.open--; s.open == 0 {
			close(s.quiet)
		}
	}
}

// OpenConns is how many client connections are open.
func (s *Server) OpenConns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Quiet waits until no client connection is open. Every request a client
// sent before it closed its connections, or died, is in Requests by then:
// the server reads what the kernel buffered before it sees the close. A
// crash test uses it to tell the killed process's calls from the next
// one's, which a count taken as the process exits cannot do.
func (s *Server) Quiet(ctx context.Context) error {
	for {
		s.mu.Lock()
		n, quiet := s.open, s.quiet
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-quiet:
		case <-ctx.Done():
			return fmt.Errorf("%d connections still open: %w", n, ctx.Err())
		}
	}
}

// Reset forgets every key, script, count and request, and takes opts as
// the server's options, keeping its listener: a test that runs thousands
// of short scenarios (the simulation) reuses one server, and its clients
// their connections, instead of starting a server for each. No call may
// be in flight.
func (s *Server) Reset(opts Options) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reset(opts)
}

func (s *Server) reset(opts Options) {
	s.opts = opts.withDefaults()
	s.script, s.calls, s.executed = map[string][]Fault{}, map[string]int{}, map[string]int{}
	s.ids, s.keys, s.lookups = map[string]string{}, map[string]*saved{}, map[string]int{}
	s.log, s.nextID = nil, 0
}

// Script queues faults for a key's next calls, in order; once they are
// used the mix applies again.
func (s *Server) Script(key string, faults ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script[key] = append(s.script[key], faults...)
}

// Executions is how many times the work was done for key.
func (s *Server) Executions(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.executed[key]
}

// Calls is how many POSTs arrived for key, replays included.
func (s *Server) Calls(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[key]
}

// Lookups is how many lookups asked for key.
func (s *Server) Lookups(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lookups[key]
}

// ExecutedKeys returns the number of executions of every key done at least
// once.
func (s *Server) ExecutedKeys() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.executed))
	for k, n := range s.executed {
		out[k] = n
	}
	return out
}

// Requests returns every request seen, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// FaultsFor returns the faults applied to key's calls in order (replays
// are left out: no fault was drawn for them).
func (s *Server) FaultsFor(key string) []Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Fault
	for _, r := range s.log {
		if r.Key == key && r.Method == http.MethodPost && !r.Replayed && r.Status != http.StatusConflict {
			out = append(out, r.Fault)
		}
	}
	return out
}

// Draw is the fault the seeded mix gives the n-th call (1-based) for key;
// it is exported so tests can predict or audit the mix.
func (s *Server) Draw(key string, n int) Fault {
	s.mu.Lock()
	opts := s.opts
	s.mu.Unlock()
	return draw(opts, key, n)
}

func draw(opts Options, key string, n int) Fault {
	total := 0
	for _, w := range opts.Mix {
		total += w.Weight
	}
	if total <= 0 {
		return Success
	}
	h := sha256.New()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], opts.Seed)
	binary.LittleEndian.PutUint64(b[8:], uint64(n))
	h.Write(b[:])
	h.Write([]byte(key))
	r := int(binary.LittleEndian.Uint64(h.Sum(nil)[:8]) % uint64(total))
	for _, w := range opts.Mix {
		if r < w.Weight {
			return w.Fault
		}
		r -= w.Weight
	}
	return Success
}

func keyOf(opts Options, r *http.Request, body []byte) string {
	if h := opts.IdempotencyHeader; h != "" && r.Header.Get(h) != "" {
		return r.Header.Get(h)
	}
	if h := opts.KeyHeader; h != "" && r.Header.Get(h) != "" {
		return r.Header.Get(h)
	}
	if f := opts.KeyField; f != "" {
		var m map[string]any
		if json.Unmarshal(body, &m) == nil {
			if v, ok := m[f]; ok {
				return fmt.Sprint(v)
			}
		}
	}
	return ""
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	// The options are read under the lock: Reset may have replaced them
	// since this connection's last request.
	s.mu.Lock()
	opts := s.opts
	s.mu.Unlock()
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, opts.LookupPrefix) {
		s.lookup(w, r, opts, strings.TrimPrefix(r.URL.Path, opts.LookupPrefix))
		return
	}
	if r.Method != http.MethodPost {
		writeJSON(w, http.StatusMethodNotAllowed, nil, map[string]any{"error": "only POST creates effects"})
		return
	}
	key := keyOf(opts, r, body)
	rec := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Key: key, At: opts.Now()}
	idem := opts.IdempotencyHeader != "" && r.Header.Get(opts.IdempotencyHeader) != ""
	hash := sha256.Sum256(body)

	s.mu.Lock()
	s.calls[key]++
	if idem {
		if sv := s.keys[key]; sv != nil && opts.Window > 0 && !rec.At.Before(sv.at.Add(opts.Window)) {
			delete(s.keys, key) // pruned: a resend is a new request
		}
		if sv := s.keys[key]; sv != nil {
			var header http.Header
			var b []byte
			rec.Replayed = true
			rec.Status, header, b = replayOf(sv, hash)
			s.log = append(s.log, rec)
			s.mu.Unlock()
			writeRaw(w, rec.Status, header, b)
			return
		}
	}
	var fault Fault
	if q := s.script[key]; len(q) > 0 {
		fault, s.script[key] = q[0], q[1:]
	} else {
		fault = draw(opts, key, s.calls[key])
	}
	rec.Fault = fault
	var sv *saved
	if idem && fault != Fail500 && fault != Fail400 && fault != TimeoutBeforeWork && fault != ResetBeforeWork &&
		fault != Fail429Seconds && fault != Fail429Millis && fault != Fail429Date {
		// Execution begins: the key is taken, and concurrent requests with
		// it get 409 until the answer is saved.
		sv = &saved{bodyHash: hash, at: rec.At, running: true}
		s.keys[key] = sv
	}
	status, header, out := s.answerLocked(fault, key, rec.At, opts)
	rec.Status = status
	b, _ := json.Marshal(out)
	if sv != nil {
		sv.status, sv.header, sv.body, sv.running = status, header, b, false
	}
	s.log = append(s.log, rec)
	s.mu.Unlock()

	switch fault {
	case TimeoutBeforeWork, TimeoutAfterWork:
		if opts.Hang != nil {
			opts.Hang(r)
			resetConn(w)
			return
		}
		if opts.HangUp {
			resetConn(w)
			return
		}
		stall(opts, r)
		return
	case ResetBeforeWork, ResetAfterWork:
		resetConn(w)
		return
	}
	writeRaw(w, status, header, b)
}

// replayOf is the answer to a request whose idempotency key is taken: a
// different body is refused (400), a request still running conflicts
// (409), and a finished one's saved answer is replayed.
func replayOf(sv *saved, hash [sha256.Size]byte) (int, http.Header, []byte) {
	idemErr := func(status int, msg string) (int, http.Header, []byte) {
		b, _ := json.Marshal(map[string]any{"error": map[string]any{"type": "idempotency_error", "message": msg}})
		return status, nil, b
	}
	switch {
	case sv.bodyHash != hash:
		return idemErr(http.StatusBadRequest, "Keys for idempotent requests can only be used with the same parameters they were first used with.")
	case sv.running:
		return idemErr(http.StatusConflict, "a request with this key is still being processed")
	}
	h := sv.header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Idempotent-Replayed", "true")
	return sv.status, h, sv.body
}

// answerLocked is what the destination answers a request with fault,
// counting the work it does; s.mu is held.
func (s *Server) answerLocked(fault Fault, key string, at time.Time, opts Options) (int, http.Header, any) {
	switch fault {
	case Success, TimeoutAfterWork, ResetAfterWork, BatchPartial:
		s.executed[key]++
		id, ok := s.ids[key]
		if !ok {
			s.nextID++
			id = fmt.Sprintf("obj_%06d", s.nextID)
			s.ids[key] = id
		}
		if fault == BatchPartial {
			return http.StatusOK, nil, map[string]any{"id": id, "results": []any{
				map[string]any{"status": "created", "id": id},
				map[string]any{"status": "error", "reason": "INVALID_EMAIL", "message": "record 2: email is not valid"},
			}}
		}
		return http.StatusCreated, nil, map[string]any{"id": id, "key": key}
	case Fail500, Fail500Saved:
		return http.StatusInternalServerError, nil, map[string]any{"error": map[string]any{"type": "api_error", "message": "internal error"}}
	case Fail429Seconds, Fail429Millis, Fail429Date:
		return http.StatusTooManyRequests, http.Header{"Retry-After": {retryAfter(opts, fault, at)}},
			map[string]any{"error": map[string]any{"type": "rate_limit_error", "message": "too many requests"}}
	case HiddenFailure:
		return http.StatusOK, nil, map[string]any{"success": false, "errors": []any{map[string]any{"code": "1003", "message": "Invalid data"}}}
	case Fail400:
		return http.StatusBadRequest, nil, map[string]any{"error": map[string]any{"type": "invalid_request_error", "message": "invalid parameter"}}
	}
	return 0, nil, nil // TimeoutBeforeWork, ResetBeforeWork: no answer
}

// resetConn ends the connection without an answer, with a TCP reset where
// it can: the client has sent its whole request and gets no response.
func resetConn(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		// Not hijackable (HTTP/2): aborting the handler resets the stream.
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close with RST, not FIN
	}
	_ = conn.Close()
}

// stall waits for the client to give up (its timeout closes the
// connection) or for Options.Stall: the only real-time wait, and it ends
// as soon as the client's deadline has passed.
func stall(opts Options, r *http.Request) {
	t := time.NewTimer(opts.Stall)
	defer t.Stop()
	select {
	case <-r.Context().Done():
	case <-t.C:
	}
}

func retryAfter(opts Options, f Fault, now time.Time) string {
	d := opts.RetryAfter
	switch f {
	case Fail429Millis:
		if d <= 0 {
			d = 1500 * time.Millisecond
		}
		return strconv.FormatInt(d.Milliseconds(), 10)
	case Fail429Date:
		if d <= 0 {
			d = 3 * time.Second
		}
		return now.Add(d).UTC().Format(http.TimeFormat)
	default:
		if d <= 0 {
			d = 2 * time.Second
		}
		return strconv.FormatInt(int64(d/time.Second), 10)
	}
}

func (s *Server) lookup(w http.ResponseWriter, r *http.Request, opts Options, key string) {
	s.mu.Lock()
	s.lookups[key]++
	n, id := s.executed[key], s.ids[key]
	rec := Request{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Key: key, At: opts.Now(), Status: http.StatusOK}
	if n == 0 {
		rec.Status = http.StatusNotFound
	}
	s.log = append(s.log, rec)
	s.mu.Unlock()
	if n == 0 {
		writeJSON(w, http.StatusNotFound, nil, map[string]any{"error": "no such effect", "key": key})
		return
	}
	writeJSON(w, http.StatusOK, nil, map[string]any{"id": id, "key": key, "executions": n})
}

func writeJSON(w http.ResponseWriter, status int, h http.Header, v any) {
	b, _ := json.Marshal(v)
	writeRaw(w, status, h, b)
}

func writeRaw(w http.ResponseWriter, status int, h http.Header, b []byte) {
	for k, vs := range h {
		w.Header()[k] = vs
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.Copy(w, bytes.NewReader(b))
}
