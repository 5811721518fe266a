package sim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/hookledger/hookledger/internal/receive"
	"github.com/hookledger/hookledger/internal/store"
)

// The engine's rule for values no driver can store or send: the receiver
// refuses them at the door (400 naming the field), or the event ends in a
// terminal disposition with a reason (a flow that computes such an entity,
// revision or state from it dead-letters the event, naming the field);
// a harmless value (U+2028, -0) is simply applied. The simulation sends a
// small share of events carrying such values, through the real receiver,
// and checks the rule for each (checkHostile) beside every invariant of
// the healthy events, which must not notice them.

// hostileWant is what the rule requires of one hostile event.
type hostileWant int

const (
	// wantRefused: answered 400 naming the field, and nothing stored.
	wantRefused hostileWant = iota
	// wantDead: stored, and dead-lettered by a flow with a reason naming
	// the field.
	wantDead
	// wantApplied: stored and applied in every flow.
	wantApplied
)

func (w hostileWant) String() string {
	return [...]string{"refused", "dead_lettered", "applied"}[w]
}

// hostileCase is one hostile value in one field of an order event. raw is
// the JSON text sent for the field (n numbers the event, to keep ids
// apart); named is how the field is named in the receiver's answer or the
// dead letter's reason.
type hostileCase struct {
	name  string
	field string // eventId, order_id, revision or intent
	raw   func(n int) string
	want  hostileWant
	named string
}

// padded is a JSON string of exactly size bytes (once decoded) that starts
// with prefix.
func padded(prefix string, size int) string {
	return `"` + prefix + strings.Repeat("x", size-len(prefix)) + `"`
}

// nested is a JSON value nested depth arrays deep.
func nested(depth int) string {
	return strings.Repeat("[", depth) + `"CREATED"` + strings.Repeat("]", depth)
}

// beyondFloat is what a dead letter says of a number beyond float64: the
// payload cannot be read, so every flow dead-letters the event.
const beyondFloat = "beyond the range of a 64-bit float"

// hostileCases is every hostile value, in the fields the flows compute
// from. Bytes that are not UTF-8, and a lone surrogate escape, reach the
// engine as U+FFFD (JSON decoding replaces them), which every driver
// stores: those are applied.
var hostileCases = []hostileCase{
	{"nul", "eventId", func(n int) string { return fmt.Sprintf(`"evt-hx-%d\u0000"`, n) }, wantRefused, "event id"},
	{"c0", "eventId", func(n int) string { return fmt.Sprintf(`"evt-hx-%d\u0001"`, n) }, wantRefused, "event id"},
	{"c1", "eventId", func(n int) string { return fmt.Sprintf(`"evt-hx-%d\u0085"`, n) }, wantRefused, "event id"},
	{"bad-utf8", "eventId", func(n int) string { return fmt.Sprintf("\"evt-hx-%d\xff\xfe\"", n) }, wantApplied, "event id"},
	{"surrogate", "eventId", func(n int) string { return fmt.Sprintf(`"evt-hx-%d\ud800"`, n) }, wantApplied, "event id"},
	{"u2028", "eventId", func(n int) string { return fmt.Sprintf(`"evt-hx-%d\u2028"`, n) }, wantApplied, "event id"},
	{"255", "eventId", func(n int) string { return padded(fmt.Sprintf("evt-hx-%d-", n), 255) }, wantApplied, "event id"},
	{"256", "eventId", func(n int) string { return padded(fmt.Sprintf("evt-hx-%d-", n), 256) }, wantApplied, "event id"},
	{"600", "eventId", func(n int) string { return padded(fmt.Sprintf("evt-hx-%d-", n), 600) }, wantRefused, "event id"},

	{"nul", "order_id", func(n int) string { return fmt.Sprintf(`"hx-%d\u0000"`, n) }, wantDead, "entity"},
	{"c0", "order_id", func(n int) string { return fmt.Sprintf(`"hx-%d\u001f"`, n) }, wantDead, "entity"},
	{"c1", "order_id", func(n int) string { return fmt.Sprintf(`"hx-%d\u009b"`, n) }, wantDead, "entity"},
	{"bad-utf8", "order_id", func(n int) string { return fmt.Sprintf("\"hx-%d\xc3\"", n) }, wantApplied, "entity"},
	{"surrogate", "order_id", func(n int) string { return fmt.Sprintf(`"hx-%d\ud800"`, n) }, wantApplied, "entity"},
	{"u2028", "order_id", func(n int) string { return fmt.Sprintf(`"hx-%d\u2028"`, n) }, wantApplied, "entity"},
	{"255", "order_id", func(n int) string { return padded(fmt.Sprintf("hx-%d-", n), 255) }, wantApplied, "entity"},
	{"256", "order_id", func(n int) string { return padded(fmt.Sprintf("hx-%d-", n), 256) }, wantApplied, "entity"},
	{"600", "order_id", func(n int) string { return padded(fmt.Sprintf("hx-%d-", n), 600) }, wantDead, "entity"},
	{"long", "order_id", func(n int) string { return padded(fmt.Sprintf("hx-%d-", n), 64<<10) }, wantDead, "entity"},
	{"deep", "order_id", func(int) string { return nested(500) }, wantDead, "entity"},

	{"1e400", "revision", func(int) string { return `1e400` }, wantDead, beyondFloat},
	{"-0", "revision", func(int) string { return `-0` }, wantApplied, "version.revision"},
	{"2^63", "revision", func(int) string { return `9223372036854775808` }, wantDead, "version.revision"},
	{"deep", "revision", func(int) string { return nested(500) }, wantDead, "version.revision"},

	{"nul", "intent", func(int) string { return `"CREATED\u0000"` }, wantDead, "state"},
	{"c0", "intent", func(int) string { return `"CREATED\u0007"` }, wantApplied, "state"},
	{"c1", "intent", func(int) string { return `"CREATED\u0085"` }, wantApplied, "state"},
	{"bad-utf8", "intent", func(int) string { return "\"CREATED\xff\"" }, wantApplied, "state"},
	{"surrogate", "intent", func(int) string { return `"\ud800"` }, wantApplied, "state"},
	{"u2028", "intent", func(int) string { return `"CREATED\u2028"` }, wantApplied, "state"},
	{"1e400", "intent", func(int) string { return `1e400` }, wantDead, beyondFloat},
	{"-0", "intent", func(int) string { return `-0` }, wantApplied, "state"},
	{"2^63", "intent", func(int) string { return `9223372036854775808` }, wantApplied, "state"},
	{"deep", "intent", func(int) string { return nested(500) }, wantApplied, "state"},
	{"long", "intent", func(int) string { return padded("CREATED", 64<<10) }, wantApplied, "state"},
}

// hostileEvent is one hostile event sent, and what became of it.
type hostileEvent struct {
	c       hostileCase
	n       int
	body    []byte
	eventID string // as the engine reads it
	entity  string // as the engine reads it; "" when it is not a string
	// codes are the receiver's answers, in order; errs their error texts.
	codes []int
	errs  []string
	// pending is set while the event waits to be sent (again): the store
	// failed under it (an injected fault), and a sender retries a 5xx.
	pending bool
}

// hostiles is the hostile side of a run.
type hostiles struct {
	rand *rand.Rand
	left int // still to send during the schedule
	recv *receive.Handler
	sent []*hostileEvent
	// byID is every hostile event id as the engine reads it, for the
	// checks of the healthy events to leave them alone.
	byID map[string]*hostileEvent
}

// newHostiles decides, from a stream of its own (the healthy schedule of a
// seed stays what it was), how many hostile events the run sends: one or
// two in one seed of three, none in the others (about one event in twenty).
func newHostiles(seed uint64) hostiles {
	h := hostiles{rand: newRand(seed ^ 0x3c6ef372fe94f82b), byID: map[string]*hostileEvent{}}
	if h.rand.IntN(3) == 0 {
		h.left = 1 + h.rand.IntN(2)
	}
	return h
}

// decodedString is the string a JSON text decodes to, as the engine reads
// it; ok is false when it is not a string.
func decodedString(raw string) (string, bool) {
	var s string
	err := json.Unmarshal([]byte(raw), &s)
	return s, err == nil
}

// maybeHostile sends a hostile event now and then while the schedule runs.
func (r *run) maybeHostile() {
	h := &r.hostile
	if h.left == 0 || h.rand.IntN(15) != 0 {
		return
	}
	h.left--
	r.sendHostile(r.newHostile())
}

// newHostile builds the next hostile event: a new order of its own, which
// the source API knows (so that the refetching flows can read it), with
// one field replaced by a hostile value.
func (r *run) newHostile() *hostileEvent {
	h := &r.hostile
	n := len(h.sent) + 1
	c := hostileCases[h.rand.IntN(len(hostileCases))]
	fields := map[string]string{
		"eventId":  fmt.Sprintf(`"evt-hx-%d"`, n),
		"order_id": fmt.Sprintf(`"hx-%d"`, n),
		"revision": `1`,
		"intent":   `"CREATED"`,
	}
	fields[c.field] = c.raw(n)
	body := `{"eventId":` + fields["eventId"] + `,"type":"order.created","order_id":` + fields["order_id"] +
		`,"revision":` + fields["revision"] + `,"intent":` + fields["intent"] + `}`
	ev := &hostileEvent{c: c, n: n, body: []byte(body)}
	ev.eventID, _ = decodedString(fields["eventId"])
	ev.entity, _ = decodedString(fields["order_id"])
	h.sent = append(h.sent, ev)
	h.byID[ev.eventID] = ev
	if ev.entity != "" && store.CheckID("entity", ev.entity) == nil {
		r.truth.publish(&entity{id: ev.entity, states: []string{"CREATED"}}, 1)
	}
	return ev
}

// sendHostile posts the event to the real receiver, signed as the source
// signs, sometimes twice (a sender's retry).
func (r *run) sendHostile(ev *hostileEvent) {
	times := 1
	if r.hostile.rand.IntN(3) == 0 {
		times = 2
	}
	for range times {
		code, msg := r.postHostile(ev)
		ev.codes, ev.errs = append(ev.codes, code), append(ev.errs, msg)
		// A sender retries a 5xx later; the store failed under it (the
		// writer reports a failure that was not injected).
		ev.pending = code >= 500
		if code == http.StatusOK {
			r.stored[ev.eventID]++
		}
		r.logf("hostile %s=%s (%s) #%d: %d %s", ev.c.field, ev.c.name, ev.c.want, ev.n, code, msg)
		if ev.pending {
			return
		}
	}
}

// postHostile makes one request to the receiver and returns its status
// and error text.
func (r *run) postHostile(ev *hostileEvent) (int, string) {
	h := &r.hostile
	if h.recv == nil {
		recv, err := receive.New(r.cfg, receive.Options{Writer: hostileWriter{r}, Store: r.st, Clock: r.clk})
		if err != nil {
			r.failf("receiver: %v", err)
			return 0, err.Error()
		}
		h.recv = recv
	}
	req := httptest.NewRequestWithContext(r.ctx, http.MethodPost, "/hooks/"+source, bytes.NewReader(ev.body))
	req.SetPathValue("source", source)
	mac := hmac.New(sha256.New, []byte(simSecret))
	mac.Write(ev.body)
	req.Header.Set("X-Signature", hex.EncodeToString(mac.Sum(nil)))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.recv.ServeHTTP(rec, req)
	var resp receive.Response
	_ = json.Unmarshal(rec.Body.Bytes(), &resp)
	return rec.Code, resp.Error
}

// hostileWriter is the receiver's writer: the run's store, one submission
// per commit. A failure that was not injected is a violation: hostile
// values must be refused or stored, never break the store.
type hostileWriter struct{ r *run }

func (w hostileWriter) Submit(ctx context.Context, sub *store.Submission) (store.SubmissionResult, error) {
	res, err := w.r.st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{sub}})
	if err != nil {
		if !onlyInjected(err) {
			w.r.failf("op %d: hostile inbox commit: %v", w.r.ops, err)
		}
		return store.SubmissionResult{}, err
	}
	if e := res[0].Err; e != nil && !onlyInjected(e) && !isRefused(e) {
		w.r.failf("op %d: hostile inbox commit: %v", w.r.ops, e)
	}
	return res[0], nil
}

func isRefused(err error) bool { return errors.Is(err, store.ErrRefused) }

// flushHostile sends what the schedule left unsent (or unanswered by a
// failing store) once faults have stopped.
func (r *run) flushHostile() {
	h := &r.hostile
	for _, ev := range h.sent {
		if ev.pending {
			r.sendHostile(ev)
		}
	}
	for ; h.left > 0; h.left-- {
		r.sendHostile(r.newHostile())
	}
}

// checkHostile checks the rule for every hostile event, once drained.
func (r *run) checkHostile() {
	h := &r.hostile
	if len(h.sent) == 0 {
		return
	}
	stored := map[string]*store.Event{}
	after := int64(0)
	for {
		page, err := r.st.EventList(r.ctx, &store.EventListParams{Source: source, AfterPK: after, Limit: 1000, WithRoutes: true})
		if err != nil {
			r.failf("event list: %v", err)
			return
		}
		for _, ev := range page.Events {
			if h.byID[ev.EventID] != nil {
				stored[ev.EventID] = ev
			}
		}
		if page.NextAfterPK == 0 {
			break
		}
		after = page.NextAfterPK
	}
	if r.stats.hostile == nil {
		r.stats.hostile = map[string]int{}
	}
	for _, ev := range h.sent {
		r.checkOneHostile(ev, stored[ev.eventID])
	}
}

func (r *run) checkOneHostile(ev *hostileEvent, st *store.Event) {
	what := fmt.Sprintf("hostile event #%d (%s=%s)", ev.n, ev.c.field, ev.c.name)
	last := ev.codes[len(ev.codes)-1]
	outcome := "refused"
	if st != nil {
		outcome = string(st.Disposition)
	}
	r.stats.hostile[fmt.Sprintf("%s=%s:%s", ev.c.field, ev.c.name, outcome)]++
	// A 503 is the answer to a store fault the run injected (hostileWriter
	// reports any other failure); the sender then tries again.
	for i, code := range ev.codes {
		if code != http.StatusOK && code != http.StatusBadRequest && code != http.StatusServiceUnavailable {
			r.failf("%s: the receiver answered %d (%s), want 200, 400 or 503", what, code, ev.errs[i])
		}
	}
	if ev.c.want == wantRefused {
		if last != http.StatusBadRequest || !strings.Contains(ev.errs[len(ev.errs)-1], ev.c.named) {
			r.failf("%s: answered %d %q, want 400 naming %q", what, last, ev.errs[len(ev.errs)-1], ev.c.named)
		}
		if st != nil {
			r.failf("%s: refused, yet stored (disposition %s)", what, st.Disposition)
		}
		return
	}
	if last != http.StatusOK || st == nil {
		r.failf("%s: answered %d %q, stored %v; want 200 and stored, then %s", what, last, ev.errs[len(ev.errs)-1], st != nil, ev.c.want)
		return
	}
	routes := make([]string, 0, len(st.Routes))
	for _, rt := range st.Routes {
		routes = append(routes, fmt.Sprintf("%s %s %q", rt.Flow, rt.Disposition, rt.Reason))
	}
	if len(st.Routes) != len(r.flows()) {
		r.failf("%s: %d routes %v, want one per flow", what, len(st.Routes), routes)
	}
	switch ev.c.want {
	case wantDead:
		named := false
		for _, rt := range st.Routes {
			if rt.Disposition == store.DispositionDeadLettered {
				if rt.Reason == "" {
					r.failf("%s: flow %s dead-lettered it without a reason", what, rt.Flow)
				}
				named = named || strings.Contains(rt.Reason, ev.c.named)
			}
		}
		// Replays, of one flow or of all, leave the failed route standing,
		// and with it the dead letter.
		if st.Disposition != store.DispositionDeadLettered || !named {
			r.failf("%s: disposition %s, routes %v; want dead_lettered with a reason naming %q", what, st.Disposition, routes, ev.c.named)
		}
	case wantApplied:
		ok := st.Disposition == store.DispositionApplied
		for _, rt := range st.Routes {
			ok = ok && (rt.Disposition == store.DispositionApplied || rt.Disposition == store.DispositionDuplicate)
		}
		if !ok {
			r.failf("%s: disposition %s, routes %v; want applied in every flow (a harmless value)", what, st.Disposition, routes)
		}
	}
}
