package envelope

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"regexp"
	"testing"

	"github.com/hookledger/hookledger/internal/senderkind"
)

// fuzzExtract checks the invariants every Extract result must hold: either
// a *MalformedError, or at least one event, each with an id, valid JSON
// bytes and an occurrence time that is zero or in range.
func fuzzExtract(f *testing.F, kind string, paths Paths, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s), "01KP4928STE8FKCWB6WDHZ4ZB7")
	}
	f.Fuzz(func(t *testing.T, body []byte, hdr string) {
		checkExtract(t, kind, paths, body, hdr)
	})
}

// checkExtract runs Extract on body, with hdr in the headers senders name
// events in, and checks the invariants of fuzzExtract.
func checkExtract(t *testing.T, kind string, paths Paths, body []byte, hdr string) {
	h := http.Header{}
	h.Set("webhook-id", hdr)
	h.Set("Klaviyo-Webhook-Id", hdr)
	h.Set("X-Shopify-Event-Id", hdr)
	h.Set("X-Shopify-Topic", hdr)
	evs, err := Extract(kind, paths, h, body)
	if err != nil {
		var me *MalformedError
		if !errors.As(err, &me) {
			t.Fatalf("non-malformed error for a body: %v", err)
		}
		return
	}
	if len(evs) == 0 {
		t.Fatal("no events and no error")
	}
	for _, ev := range evs {
		if ev.EventID == "" {
			t.Fatal("empty event id accepted")
		}
		// Twilio posts forms; every other kind's event is JSON.
		if kind != senderkind.Twilio && !json.Valid(ev.Body) {
			t.Fatalf("event body is not JSON: %q", ev.Body)
		}
		if !ev.OccurredAt.IsZero() && (ev.OccurredAt.Year() < 1970 || ev.OccurredAt.Year() > 9999) {
			t.Fatalf("occurredAt out of range: %s", ev.OccurredAt)
		}
	}
}

// FuzzExtractEveryKind runs every kind of the registry, a new one
// included, on bodies seeded from every kind's built-in samples.
func FuzzExtractEveryKind(f *testing.F) {
	kinds := senderkind.Builtin().Kinds()
	for _, k := range kinds {
		for _, name := range k.SampleNames() {
			body, _ := k.SampleBody(name)
			for i := range kinds {
				f.Add(body, "01KP4928STE8FKCWB6WDHZ4ZB7", uint8(i))
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, hdr string, i uint8) {
		checkExtract(t, kinds[int(i)%len(kinds)].Name, Paths{}, body, hdr)
	})
}

func FuzzExtractStripe(f *testing.F) {
	fuzzExtract(f, senderkind.Stripe, Paths{}, stripeEvent, `{"id":"evt_1","type":"x","created":"1767225600"}`, `{"id":1e400}`)
}

func FuzzExtractHubSpot(f *testing.F) {
	fuzzExtract(f, senderkind.HubSpot, Paths{}, hubspotBatch, `[]`, `[{"eventId":1,"subscriptionId":1,"portalId":1,"occurredAt":1,"subscriptionType":"a","propertyName":"p"}]`, `[[]]`)
}

func FuzzExtractKlaviyo(f *testing.F) {
	fuzzExtract(f, senderkind.Klaviyo, Paths{}, klaviyoBatch, `{"data":[{"external_id":"e","topic":"t"}],"meta":{"klaviyo_webhook_id":"01KP4928STE8FKCWB6WDHZ4ZB7"}}`)
}

func FuzzExtractStandardWebhooks(f *testing.F) {
	fuzzExtract(f, senderkind.StandardWebhooks, Paths{}, swEvent, `{}`, `{"timestamp":"2026-01-01 00:00:00"}`)
}

func FuzzExtractPipedrive(f *testing.F) {
	fuzzExtract(f, senderkind.Pipedrive, Paths{}, pipedriveEvent, `{"v":1,"meta":{"id":1}}`, `{"meta":{"id":1,"entity":"deal","action":"create","timestamp":1767225600}}`)
}

func FuzzExtractHMAC(f *testing.F) {
	fuzzExtract(f, senderkind.HMAC, Paths{Entity: "items.0.id", Account: "$.tenant"}, genericEvent, `{"eventId":"a","items":[{"id":5}],"tenant":7}`)
}

func FuzzExtractShopify(f *testing.F) {
	fuzzExtract(f, senderkind.Shopify, Paths{}, `{"id":1,"admin_graphql_api_id":"gid://shopify/Order/1"}`, `{}`)
}

func FuzzExtractSlack(f *testing.F) {
	fuzzExtract(f, senderkind.Slack, Paths{}, `{"event_id":"Ev1","team_id":"T1","event":{"type":"message"},"event_time":1767225600}`, `{"event_id":"Ev1","event":{}}`)
}

func FuzzExtractTwilio(f *testing.F) {
	fuzzExtract(f, senderkind.Twilio, Paths{}, "AccountSid="+twAC+"&MessageSid="+twSM+"&SmsStatus=received", "AccountSid="+twAC+"&CallSid="+twCA+"&CallStatus=completed&SequenceNumber=2", `{"specversion":"1.0","id":"EZ1","type":"t","time":"2026-01-01T00:00:00Z"}`, "%zz", "MessageSid=&CallSid=", "AccountSid=AC1&MessageSid=SM1&SmsStatus=received")
}

// FuzzTwilioForm holds every Twilio form the check accepts to what
// Twilio's signature cannot prove: every other form with the same signed
// parameters that the check also accepts names the same event, entity and
// account. An accepted form names only documented parameters, and its
// event id is a SID, a documented status and, for a call, digits.
func FuzzTwilioForm(f *testing.F) {
	for _, s := range []string{
		"AccountSid=" + twAC + "&Body=hi&From=%2B1&MessageSid=" + twSM + "&SmsStatus=received",
		"AccountSid=" + twAC + "&CallSid=" + twCA + "&CallStatus=completed&FromZip=9&SequenceNumber=3&To=x",
		"AccountSid=" + twAC + "&Body=xCallSid" + twCA + "CallStatusbusy&From=&FromZip=MessageSid&MessageSid=" + twSM + "&SmsStatus=received",
		"AccountSid=" + twAC + "&MessageSid=" + twSM + "&ProfileName=SequenceNumber1&SmsStatus=read&WaId=1",
	} {
		f.Add(s)
	}
	k, _ := senderkind.Builtin().Lookup(senderkind.Twilio)
	id := k.Identity
	eventID := regexp.MustCompile(`\A[A-Z]{2}[0-9a-fA-F]{32}:[a-z_-]+(:[0-9]+)?\z`)
	f.Fuzz(func(t *testing.T, body string) {
		evs, err := ExtractIdentity(id, Paths{}, nil, []byte(body))
		if err != nil {
			var me *MalformedError
			if !errors.As(err, &me) {
				t.Fatalf("non-malformed error: %v", err)
			}
			return
		}
		want := evs[0]
		if looksJSON([]byte(body)) {
			return
		}
		if !eventID.MatchString(want.EventID) {
			t.Fatalf("%q named %q", body, want.EventID)
		}
		q, _ := url.ParseQuery(body)
		for name := range q {
			if _, ok := id.Params[name]; !ok {
				t.Fatalf("%q: undocumented %s accepted", body, name)
			}
		}
		s := signedParams(q)
		if len(s) > 300 {
			return // parses grow fast with length; short forms show the same cuts
		}
		reparse(s, id.Params, func(g url.Values) {
			evs, err := ExtractIdentity(id, Paths{}, nil, []byte(g.Encode()))
			if err != nil {
				return
			}
			if ev := evs[0]; ev.EventID != want.EventID || ev.Entity != want.Entity || ev.Account != want.Account {
				t.Fatalf("%q and %q share a signature and name %s/%s/%s and %s/%s/%s", body, g.Encode(), want.EventID, want.Entity, want.Account, ev.EventID, ev.Entity, ev.Account)
			}
		})
	})
}

func FuzzExtractPaddle(f *testing.F) {
	fuzzExtract(f, senderkind.Paddle, Paths{}, `{"event_id":"evt_1","event_type":"t","occurred_at":"2026-01-01T00:00:00.000000Z","data":{"id":"x"}}`)
}

func FuzzExtractSquare(f *testing.F) {
	fuzzExtract(f, senderkind.Square, Paths{}, `{"merchant_id":"M","type":"payment.updated","event_id":"e","created_at":"2026-01-01T00:00:00.000Z","data":{"id":"p"}}`)
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{"data.object.id", "$.meta.id", "items.0.id", "a..b", "$.", ".", "", "header:X-GitHub-Delivery", "header:"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parsePath(s)
		if err != nil {
			return
		}
		for _, seg := range p.segs {
			if seg == "" {
				t.Fatalf("empty segment accepted in %q", s)
			}
		}
		p.lookup(map[string]any{"a": []any{1}}, nil, http.Header{"X-A": {"1"}})
	})
}

// FuzzRawLookupMatchesDecode holds the walk over a body's text to what a
// full decode answers, for any valid JSON and any path: found or not, the
// same string, number or bool, and an object or array where the decode has
// one (repeated keys, escaped keys, invalid UTF-8 and nesting included).
func FuzzRawLookupMatchesDecode(f *testing.F) {
	seeds := []struct{ body, path string }{
		{`{"id":"a","id":"b"}`, "id"},
		{`{"a":{"id":"x","b":[],"id":"y"}}`, "a.id"},
		{`{"a":{"\u0069d":"x","i\u0064":"y"}}`, "a.id"},
		{`{"\u0069d":"escaped key","x":1}`, "id"},
		{`{"data":{"object":{"id":"in_1","lines":[{"id":"il_1"},{"id":"il_2"}]}}}`, "data.object.lines.1.id"},
		{`{"a":[1,[2,3],{"b":null}]}`, "a.2.b"},
		{` { "n" : 9007199254740993 , "f" : -1.5e+10 } `, "n"},
		{`{"s":"caf\u00e9 \"q\" \\ \/","t":true,"u":false}`, "s"},
		{"{\"bad\":\"\xff\xfe\",\"k\xff\":1}", "bad"},
		{`[{"id":1},{"id":2}]`, "1.id"},
		{`{"a":{"b":{"c":{}}}}`, "a.b.c"},
		{`{"0":"key zero","x":[]}`, "0"},
		{`"just a string"`, "a"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.body), s.path)
	}
	f.Fuzz(func(t *testing.T, body []byte, text string) {
		if !json.Valid(body) {
			return
		}
		p, err := parsePath(text)
		if err != nil || p.hdr != "" {
			return
		}
		full, err := decode(body)
		if err != nil {
			t.Fatalf("decode of valid JSON: %v", err)
		}
		root, err := parseBody(body)
		if err != nil {
			t.Fatalf("parseBody of valid JSON: %v", err)
		}
		want, wantOK := p.lookup(full, full, nil)
		got, gotOK := p.lookup(root, root, nil)
		if wantOK != gotOK {
			t.Fatalf("%s in %q: found %v, want %v", text, body, gotOK, wantOK)
		}
		if !wantOK {
			return
		}
		switch w := want.(type) {
		case map[string]any, []any:
			r, ok := got.(rawJSON)
			if !ok {
				t.Fatalf("%s in %q: got %#v, want an object or array", text, body, got)
			}
			again, err := decode(r)
			if err != nil || !reflect.DeepEqual(again, w) {
				t.Fatalf("%s in %q: got %s (%v), want %#v", text, body, r, err, w)
			}
		default:
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s in %q: got %#v, want %#v", text, body, got, want)
			}
		}
	})
}
