package envelope

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
)

// fuzzExtract checks the invariants every Extract result must hold: either
// a *MalformedError, or at least one event, each with an id, valid JSON
// bytes and an occurrence time that is zero or in range.
func fuzzExtract(f *testing.F, kind string, paths Paths, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s), "01KP4928STE8FKCWB6WDHZ4ZB7")
	}
	f.Fuzz(func(t *testing.T, body []byte, hdr string) {
		h := http.Header{}
		h.Set("webhook-id", hdr)
		h.Set("Klaviyo-Webhook-Id", hdr)
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
			if !json.Valid(ev.Body) {
				t.Fatalf("event body is not JSON: %q", ev.Body)
			}
			if !ev.OccurredAt.IsZero() && (ev.OccurredAt.Year() < 1970 || ev.OccurredAt.Year() > 9999) {
				t.Fatalf("occurredAt out of range: %s", ev.OccurredAt)
			}
		}
	})
}

func FuzzExtractStripe(f *testing.F) {
	fuzzExtract(f, KindStripe, Paths{}, stripeEvent, `{"id":"evt_1","type":"x","created":"1767225600"}`, `{"id":1e400}`)
}

func FuzzExtractHubSpot(f *testing.F) {
	fuzzExtract(f, KindHubSpot, Paths{}, hubspotBatch, `[]`, `[{"eventId":1,"subscriptionId":1,"portalId":1,"occurredAt":1,"subscriptionType":"a","propertyName":"p"}]`, `[[]]`)
}

func FuzzExtractKlaviyo(f *testing.F) {
	fuzzExtract(f, KindKlaviyo, Paths{}, klaviyoBatch, `{"data":[{"external_id":"e","topic":"t"}],"meta":{"klaviyo_webhook_id":"01KP4928STE8FKCWB6WDHZ4ZB7"}}`)
}

func FuzzExtractStandardWebhooks(f *testing.F) {
	fuzzExtract(f, KindStandardWebhooks, Paths{}, swEvent, `{}`, `{"timestamp":"2026-01-01 00:00:00"}`)
}

func FuzzExtractPipedrive(f *testing.F) {
	fuzzExtract(f, KindPipedrive, Paths{}, pipedriveEvent, `{"v":1,"meta":{"id":1}}`, `{"meta":{"id":1,"entity":"deal","action":"create","timestamp":1767225600}}`)
}

func FuzzExtractHMAC(f *testing.F) {
	fuzzExtract(f, KindHMAC, Paths{Entity: "items.0.id", Account: "$.tenant"}, genericEvent, `{"eventId":"a","items":[{"id":5}],"tenant":7}`)
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
