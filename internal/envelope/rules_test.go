package envelope

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/senderkind"
)

// A kind's identity rules are functions the kind carries: envelope runs
// them for a kind it has never heard of. A rule reads the event and the
// root through paths, a refusal names the field with the batch element's
// index, and a source's fields: still win over the rule.
func TestRulesOfAKindEnvelopeDoesNotKnow(t *testing.T) {
	var bodySeen string
	id := senderkind.Identity{
		Type:  "t",
		Batch: senderkind.Batch{Key: "items"},
		Rules: senderkind.Rules{
			Body: func(b senderkind.Doc) error {
				bodySeen, _ = b.Lookup("meta.v")
				if b.Header("X-Refuse") != "" {
					return &senderkind.MalformedError{Field: "meta.v", Msg: "refused by the kind"}
				}
				return nil
			},
			EventID: func(ev senderkind.Doc) (string, error) {
				a, err := ev.Required("a")
				if err != nil {
					return "", err
				}
				acct, err := ev.Str("$.meta.account")
				return acct + "/" + a, err
			},
			Entity: func(ev senderkind.Doc) (string, error) { return "entity-of-" + ev.Header("X-Obj"), nil },
		},
	}
	h := http.Header{"X-Obj": {" o1 "}}
	body := `{"meta":{"v":"2","account":"acc"},"items":[{"a":"x","t":"one"},{"a":7,"t":"two"}]}`
	evs, err := ExtractIdentity(id, Paths{}, h, []byte(body))
	if err != nil || len(evs) != 2 || bodySeen != "2" {
		t.Fatalf("events %v, err %v, body rule saw %q", evs, err, bodySeen)
	}
	if evs[0].EventID != "acc/x" || evs[1].EventID != "acc/7" || evs[1].Type != "two" || evs[0].Entity != "entity-of-o1" {
		t.Fatalf("events %+v", evs)
	}
	// A rule's refusal names the element.
	_, err = ExtractIdentity(id, Paths{}, h, []byte(strings.Replace(body, `"a":7`, `"a":{}`, 1)))
	var m *MalformedError
	if !errors.As(err, &m) || m.Field != "items[1].a" || m.Msg != "must be a string or a number" {
		t.Fatalf("a rule reading an object: %v", err)
	}
	_, err = ExtractIdentity(id, Paths{}, h, []byte(strings.Replace(body, `"a":"x",`, ``, 1)))
	if !errors.As(err, &m) || m.Field != "items[0].a" || m.Msg != "is required" {
		t.Fatalf("a rule reading an absent value: %v", err)
	}
	_, err = ExtractIdentity(id, Paths{}, http.Header{"X-Refuse": {"1"}}, []byte(body))
	if !errors.As(err, &m) || m.Error() != "meta.v: refused by the kind" {
		t.Fatalf("the body rule's refusal: %v", err)
	}
	// fields: override the rules.
	evs, err = ExtractIdentity(id, Paths{EventID: "t", Entity: "a"}, h, []byte(body))
	if err != nil || evs[0].EventID != "one" || evs[1].Entity != "7" {
		t.Fatalf("fields over rules: %+v %v", evs, err)
	}
}

// A kind's occurrence-time rule reads the time where the kind's unit
// cannot; the zero time means none, a refusal names the field, a time
// outside 1970 to 9999 is refused like any other, and a source's
// fields.occurred_at still wins.
func TestOccurredAtRule(t *testing.T) {
	id := senderkind.Identity{
		EventID: "id", OccurredAt: "at",
		Rules: senderkind.Rules{OccurredAt: func(ev senderkind.Doc) (time.Time, error) {
			s, err := ev.Str("at")
			switch {
			case err != nil || s == "":
				return time.Time{}, err
			case s == "bad":
				return time.Time{}, &senderkind.MalformedError{Field: "at", Msg: "is bad"}
			case s == "far":
				return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), nil
			}
			return time.Date(2026, 1, 1, 0, 0, 0, 5, time.FixedZone("x", 3600)), nil
		}},
	}
	one := func(body string, p Paths) (Event, error) {
		evs, err := ExtractIdentity(id, p, nil, []byte(body))
		if err != nil {
			return Event{}, err
		}
		return evs[0], nil
	}
	if ev, err := one(`{"id":"e","at":"x"}`, Paths{}); err != nil || !ev.OccurredAt.Equal(time.Date(2025, 12, 31, 23, 0, 0, 5, time.UTC)) || ev.OccurredAt.Location() != time.UTC {
		t.Fatalf("the rule's time: %v %v", ev.OccurredAt, err)
	}
	if ev, err := one(`{"id":"e"}`, Paths{}); err != nil || !ev.OccurredAt.IsZero() {
		t.Fatalf("no time: %v %v", ev.OccurredAt, err)
	}
	var m *MalformedError
	if _, err := one(`{"id":"e","at":"bad"}`, Paths{}); !errors.As(err, &m) || m.Error() != "at: is bad" {
		t.Fatalf("the rule's refusal: %v", err)
	}
	if _, err := one(`{"id":"e","at":"far"}`, Paths{}); !errors.As(err, &m) || m.Field != "at" {
		t.Fatalf("year 10000: %v", err)
	}
	if ev, err := one(`{"id":"e","at":"bad","t2":"2026-02-03T04:05:06Z"}`, Paths{OccurredAt: "t2"}); err != nil || ev.OccurredAt.Month() != 2 {
		t.Fatalf("fields.occurred_at over the rule: %v %v", ev.OccurredAt, err)
	}
}
