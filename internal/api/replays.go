package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/replay"
)

// MaxReplayWait bounds how long POST /api/v1/replays waits for the
// replay's work to settle before it answers.
const MaxReplayWait = 10 * time.Minute

// replayPoll is how often a waiting request reads the replay's progress.
const replayPoll = 200 * time.Millisecond

// replayStore is what the replays resource needs.
type replayStore interface {
	replay.Store
	replay.AuditStore
}

// ReplayRequest is the body of POST /api/v1/replays. Empty fields do not
// filter; from and to are RFC 3339 receipt times (from inclusive, to
// exclusive).
type ReplayRequest struct {
	Source string `json:"source"`
	// EventID selects one event of Source (a dead letter's repair).
	EventID string `json:"event_id,omitempty"`
	Flow    string `json:"flow"`
	Entity  string `json:"entity"`
	// From and To are RFC 3339 times; a client leaves an open end out
	// (the document allows no empty string there).
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
	// Actor names who replays in the audit trail, as operator:ACTOR.
	Actor string `json:"actor"`
	// WaitSeconds is how long to wait for the replay's work to settle
	// (at most MaxReplayWait); 0 answers as soon as it is enqueued.
	WaitSeconds int `json:"wait_seconds"`
}

// ReplayJSON is the answer: what was enqueued and what it came to.
type ReplayJSON struct {
	replay.Outcome
	// Done says every work item is settled; the counts are final.
	Done bool `json:"done"`
}

// replays serves POST /api/v1/replays with router, the flow engine of
// this server, computing each event's routes.
type replays struct {
	h      *Handler
	router replay.Router
}

// ServeReplays enables POST /api/v1/replays: it enqueues a replay of the
// stored events a selection names (replay.Run, as the replay verb does)
// and waits up to wait_seconds for this server's flow engine to process
// it. The answer is 200 with the final outcome, or 202 while work is
// still pending; 400 names a bad field, 422 says the selection matches
// nothing. The server calls it with its flow engine; without it the
// resource does not exist.
func (h *Handler) ServeReplays(router replay.Router) {
	h.handle("POST /api/v1/replays", &replays{h: h, router: router})
}

func (rp *replays) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := rp.h
	st, ok := h.st.(replayStore)
	if !ok {
		writeError(w, http.StatusNotFound, "this store cannot replay")
		return
	}
	var in ReplayRequest
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		writeError(w, http.StatusBadRequest, "body: cannot read it")
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if len(bytes.TrimSpace(body)) > 0 {
		if err := dec.Decode(&in); err != nil {
			writeError(w, http.StatusBadRequest, "body: "+jsonProblem(err))
			return
		}
	}
	if in.EventID != "" && in.Source == "" {
		badField(w, "source", "source: required with event_id: an event is named by its source too")
		return
	}
	sel := replay.Selection{Source: in.Source, EventID: in.EventID, Flow: in.Flow, Entity: in.Entity}
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"from", in.From, &sel.From}, {"to", in.To, &sel.To}} {
		if t.v == "" {
			continue
		}
		parsed, err := time.Parse(time.RFC3339, t.v)
		if err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%s: %q is not an RFC 3339 time such as 2026-11-03T09:00:00Z", t.name, t.v))
			return
		}
		*t.dst = parsed
	}
	wait := time.Duration(in.WaitSeconds) * time.Second
	if in.WaitSeconds < 0 || wait > MaxReplayWait {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("wait_seconds: expected 0 to %d", int(MaxReplayWait/time.Second)))
		return
	}
	if in.Actor == "" {
		in.Actor = "api"
	}
	sel.Actor = "operator:" + in.Actor

	// The replay is enqueued in batches: once begun it is enqueued to its
	// end even if the client goes, rather than left half enqueued.
	res, err := replay.Run(context.WithoutCancel(r.Context()), st, rp.router, sel, h.now())
	switch {
	case errors.Is(err, replay.ErrNothingSelected):
		writeError(w, http.StatusUnprocessableEntity, "the selection matches no stored event of any flow")
		return
	case err != nil:
		h.log.Error("replay", "err", err)
		writeError(w, http.StatusServiceUnavailable, "store unavailable")
		return
	}
	h.log.Info("replay enqueued", "replay", res.ReplayID, "actor", sel.Actor, "events", res.Events, "work_items", res.WorkItems)
	if wk, ok := rp.router.(interface{ Wake() }); ok {
		// Start on the replay now rather than at the next poll.
		wk.Wake()
	}
	out := replay.Outcome{ReplayID: res.ReplayID, Events: res.Events, WorkItems: res.WorkItems, Skipped: res.Skipped}
	if wait > 0 {
		// The server's write timeout is shorter than a long wait; this
		// answer may come late. A connection deadline is wall-clock time.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + 10*time.Second))
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		out, err = replay.Watch(ctx, st, res, replay.WatchOptions{Interval: replayPoll})
		cancel()
		if err != nil && ctx.Err() == nil {
			h.log.Error("replay: watch", "replay", res.ReplayID, "err", err)
			writeError(w, http.StatusServiceUnavailable, "store unavailable")
			return
		}
	}
	code := http.StatusOK
	if !out.Done() {
		code = http.StatusAccepted
	}
	writeJSON(w, code, map[string]ReplayJSON{"replay": {Outcome: out, Done: out.Done()}})
}

// jsonProblem says what is wrong with a request body without Go's type
// names.
func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("%s: wrong type (want %s)", te.Field, te.Type.Kind())
	}
	if msg, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return "unknown field " + msg
	}
	return "expected a JSON object: " + err.Error()
}
