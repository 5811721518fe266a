package senderkind_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/envelope"
	"github.com/hookledger/hookledger/internal/senderkind"
)

// Every built-in sample, filled by its kind, is a body of the kind's
// contract: it extracts, each fill names new events, a fixed id names the
// same events again, the time is the send time where the kind carries one,
// and the source's account lands where the kind reads the tenant.
func TestSamplesFillAsTheirKindReadsThem(t *testing.T) {
	now := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	accounts := map[string]string{
		senderkind.Stripe: "acct_1", senderkind.HubSpot: "4711", senderkind.Klaviyo: "Kx1",
		senderkind.Pipedrive: "99", senderkind.Slack: "T0TEAM", senderkind.Square: "M1", senderkind.Mailgun: "acct-mg",
	}
	kinds := 0
	for _, k := range senderkind.Builtin().Kinds() {
		if k.Sample == "" {
			continue
		}
		kinds++
		if !slices.Contains(k.SampleNames(), k.Sample) {
			t.Errorf("%s: default sample %q is not among %v", k.Name, k.Sample, k.SampleNames())
		}
		for _, name := range k.SampleNames() {
			raw, _ := k.SampleBody(name)
			fill := func(id string) []envelope.Event {
				t.Helper()
				o := senderkind.SampleOptions{Source: senderkind.Source{Kind: k.Name}, Account: accounts[k.Name], ID: id, Now: now}
				body, hdrID, extra, err := k.FillSample(raw, o)
				if err != nil {
					t.Fatalf("%s/%s: %v", k.Name, name, err)
				}
				h := http.Header{}
				for n, vs := range extra {
					h[n] = vs
				}
				h.Set("Webhook-Id", hdrID)
				evs, err := envelope.Extract(k.Name, envelope.Paths{}, h, body)
				if err != nil {
					t.Fatalf("%s/%s: the filled sample does not extract: %v\n%s", k.Name, name, err, body)
				}
				return evs
			}
			a, b, f1, f2 := fill(""), fill(""), fill("fixed-1"), fill("fixed-1")
			for i := range a {
				if a[i].EventID == b[i].EventID {
					t.Errorf("%s/%s: two fills share the event id %q", k.Name, name, a[i].EventID)
				}
				if f1[i].EventID != f2[i].EventID {
					t.Errorf("%s/%s: a fixed id names two events: %q, %q", k.Name, name, f1[i].EventID, f2[i].EventID)
				}
				if want := accounts[k.Name]; want != "" && a[i].Account != want {
					t.Errorf("%s/%s: account %q, want the source's %q", k.Name, name, a[i].Account, want)
				}
				if !a[i].OccurredAt.IsZero() && k.Name != senderkind.HubSpot && !a[i].OccurredAt.Equal(now) {
					t.Errorf("%s/%s: occurred at %s, want the send time", k.Name, name, a[i].OccurredAt)
				}
			}
		}
	}
	if kinds < 10 {
		t.Fatalf("only %d kinds have samples", kinds)
	}
}

// Stripe's common events each have a sample, so a forward or a flow can
// be tried with the event it will see without writing one.
func TestStripeSamplesCoverTheCommonEvents(t *testing.T) {
	k, _ := senderkind.Builtin().Lookup(senderkind.Stripe)
	names := k.SampleNames()
	for _, want := range []string{"invoice.paid", "invoice.payment_failed", "customer.subscription.created",
		"customer.subscription.updated", "customer.subscription.deleted", "charge.refunded", "checkout.session.completed",
		"payment_intent.succeeded", "customer.created", "customer.updated"} {
		if !slices.Contains(names, want) {
			t.Errorf("no Stripe sample %s (samples: %v)", want, names)
		}
		raw, _ := k.SampleBody(want)
		evs, err := envelope.Extract(k.Name, envelope.Paths{}, http.Header{}, raw)
		if err != nil || len(evs) != 1 || evs[0].Type != want {
			t.Errorf("sample %s extracts as %+v, %v; want one event of its own type", want, evs, err)
		}
	}
	for _, kind := range []string{senderkind.StandardWebhooks, senderkind.HMAC, senderkind.Paddle, senderkind.Square, senderkind.Mailgun, senderkind.Pipedrive, senderkind.Slack, senderkind.HubSpot} {
		if k, _ := senderkind.Builtin().Lookup(kind); len(k.SampleNames()) < 2 {
			t.Errorf("kind %s has samples %v, want its common events", kind, k.SampleNames())
		}
	}
}
