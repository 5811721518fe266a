package senderkind_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/envelope"
	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/signature"
)

type mailgunVector struct {
	Name   string            `json:"name"`
	Body   string            `json:"body"`
	Header map[string]string `json:"headers"`
	Secret string            `json:"secret"`
	Now    int64             `json:"now"`
	Valid  bool              `json:"valid"`
}

func mailgunVectors(t *testing.T) []mailgunVector {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "signature", "testdata", "mailgun", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct{ Vectors []mailgunVector }
	if err := json.Unmarshal(raw, &f); err != nil || len(f.Vectors) == 0 {
		t.Fatalf("mailgun vectors: %v", err)
	}
	return f.Vectors
}

// The vectors verified by mailgun-js go through the mailgun kind with only
// the signing key configured: each valid one verifies (the
// 20-minutes-old one too, at the kind's default window) and names its
// event by event-data.id and event-data.timestamp, with the type, the
// message as entity, the account and the time to the microsecond; two
// events never share an identity, and a retry (the same body again) keeps
// it. The vector whose signature object was moved onto other event-data
// verifies too and is another event: Mailgun signs none of the event.
func TestMailgunVectorsThroughTheKind(t *testing.T) {
	k, ok := senderkind.Builtin().Lookup(senderkind.Mailgun)
	if !ok {
		t.Fatal("no mailgun kind")
	}
	ids := map[string]string{}
	for _, v := range mailgunVectors(t) {
		s, err := k.NewScheme(senderkind.Source{Name: "mg", Kind: senderkind.Mailgun}, []string{v.Secret})
		if err != nil {
			t.Fatal(err)
		}
		req := &signature.Request{Method: http.MethodPost, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(v.Body)}
		err = s.Verify(req, time.Unix(v.Now, 0))
		stale := strings.Contains(v.Name, "20 minutes old")
		if (v.Valid || stale) != (err == nil) {
			t.Fatalf("%s: valid %v, Verify: %v", v.Name, v.Valid, err)
		}
		if err != nil {
			continue
		}
		evs, err := envelope.Extract(senderkind.Mailgun, envelope.Paths{}, req.Header, req.Body)
		if err != nil || len(evs) != 1 {
			t.Fatalf("%s: %v %v", v.Name, evs, err)
		}
		ev := evs[0]
		if ev.Account != "1234567890303a4bd1f33898" || ev.Entity != "20260101000000.000be97f99f8cea1@sample.mailgun.com" || ev.OccurredAt.Nanosecond()%1000 != 0 || ev.OccurredAt.Nanosecond() == 0 {
			t.Errorf("%s: %+v", v.Name, ev)
		}
		if prev, ok := ids[ev.EventID]; ok && prev != ev.Type {
			t.Errorf("%s: event id %s already named a %s event", v.Name, ev.EventID, prev)
		}
		ids[ev.EventID] = ev.Type
	}
	want := map[string]string{
		"MXcc2gEpS-eN8HfkOnmK2w:1767225595.658528": "delivered",
		"CCXMjJ7nQi2N3BPigGOdgQ:1767225590.372891": "failed",
		"forged-event-id:1767225590.372891":        "failed",
	}
	if len(ids) != len(want) {
		t.Fatalf("identities %v, want %v", ids, want)
	}
	for id, typ := range want {
		if ids[id] != typ {
			t.Errorf("%s: type %q, want %q", id, ids[id], typ)
		}
	}
}

// Mailgun's id is unique within a day only: the same id a day later is
// another event, and the occurrence time is read to the microsecond. A
// body without the id or the time, or with a time that is not unix
// seconds, is refused naming the field; fields: still override.
func TestMailgunIdentity(t *testing.T) {
	body := func(id, ts string) []byte {
		return []byte(`{"signature":{},"event-data":{"event":"opened","id":` + id + `,"timestamp":` + ts + `}}`)
	}
	one := func(b []byte, p envelope.Paths) (envelope.Event, error) {
		evs, err := envelope.Extract(senderkind.Mailgun, p, nil, b)
		if err != nil {
			return envelope.Event{}, err
		}
		return evs[0], nil
	}
	a, err := one(body(`"x1"`, `1767225600.5`), envelope.Paths{})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := one(body(`"x1"`, `1767312000.5`), envelope.Paths{})
	if a.EventID == b.EventID || a.EventID != "x1:1767225600.5" {
		t.Fatalf("ids %q, %q", a.EventID, b.EventID)
	}
	if !a.OccurredAt.Equal(time.Unix(1767225600, 500_000_000)) {
		t.Fatalf("occurred at %s", a.OccurredAt)
	}
	if ev, _ := one(body(`"x1"`, `"1767225600"`), envelope.Paths{}); !ev.OccurredAt.Equal(time.Unix(1767225600, 0)) {
		t.Fatalf("a string of seconds: %s", ev.OccurredAt)
	}
	for name, c := range map[string]struct {
		body  []byte
		field string
	}{
		"no id":          {[]byte(`{"event-data":{"event":"opened","timestamp":1.5}}`), "event-data.id"},
		"no time":        {[]byte(`{"event-data":{"event":"opened","id":"x"}}`), "event-data.timestamp"},
		"no type":        {[]byte(`{"event-data":{"id":"x","timestamp":1.5}}`), "event-data.event"},
		"time not unix":  {body(`"x"`, `"2026-01-01T00:00:00Z"`), "event-data.timestamp"},
		"time ends in .": {body(`"x"`, `"1767225600."`), "event-data.timestamp"},
		"negative time":  {body(`"x"`, `-1.5`), "event-data.timestamp"},
		"year 10000":     {body(`"x"`, `253402300800.5`), "event-data.timestamp"},
	} {
		_, err := one(c.body, envelope.Paths{})
		var m *envelope.MalformedError
		if !errors.As(err, &m) || m.Field != c.field {
			t.Errorf("%s: %v, want a refusal of %s", name, err, c.field)
		}
	}
	ev, err := one(body(`"x1"`, `1767225600.5`), envelope.Paths{EventID: "event-data.id", OccurredAt: "$.t"})
	if err != nil || ev.EventID != "x1" || !ev.OccurredAt.IsZero() {
		t.Fatalf("fields over the rules: %+v %v", ev, err)
	}
}

// A configured tolerance is bounded: 0 and more than a day are refused,
// less than Mailgun's 8h5m retry schedule is a warning, and the default
// covers the schedule.
func TestMailgunToleranceChecks(t *testing.T) {
	k, _ := senderkind.Builtin().Lookup(senderkind.Mailgun)
	if k.Tolerance != signature.MailgunDefaultTolerance || k.Tolerance < 8*time.Hour+5*time.Minute {
		t.Fatalf("default tolerance %s", k.Tolerance)
	}
	// Every source is warned, at its kind, that the signature covers no
	// event; the tolerance has problems of its own.
	signsNoEvent := func(ps []senderkind.Problem) bool {
		for _, p := range ps {
			if p.Field == "kind" && p.Warning && strings.Contains(p.Msg, "never the event") {
				return true
			}
		}
		return false
	}
	for tol, want := range map[time.Duration]string{
		0:               "error",
		25 * time.Hour:  "error",
		5 * time.Minute: "warning",
		8 * time.Hour:   "warning",
		9 * time.Hour:   "",
		24 * time.Hour:  "",
	} {
		ps := k.Problems(senderkind.Source{Tolerance: &tol})
		var got string
		var tolerance []senderkind.Problem
		for _, p := range ps {
			if p.Field == "tolerance" {
				tolerance = append(tolerance, p)
			}
		}
		if len(tolerance) == 1 {
			got = "error"
			if tolerance[0].Warning {
				got = "warning"
			}
		}
		if got != want || len(tolerance) > 1 || (want != "error" && !signsNoEvent(ps)) {
			t.Errorf("tolerance %s: %+v, want %s and the signing warning", tol, ps, want)
		}
	}
	if ps := k.Problems(senderkind.Source{}); len(ps) != 1 || !signsNoEvent(ps) {
		t.Errorf("no tolerance: %+v, want the signing warning alone", ps)
	}
	if c, ok := senderkind.Builtin().Contract(senderkind.Mailgun); !ok || c.RetryWindow != 8*time.Hour+5*time.Minute || len(c.RetrySchedule) != c.Retries {
		t.Fatalf("contract %+v", c)
	}
}
