package envelope

import (
	"errors"
	"net/http"
	"strings"
	"testing"

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
