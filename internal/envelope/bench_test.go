package envelope

import (
	"fmt"
	"testing"

	"github.com/hookledger/hookledger/internal/senderkind"
)

// invoiceEvent is a Stripe invoice event with its object expanded, the
// size (about 2 KB) most of a receiver's bodies have.
var invoiceEvent = []byte(`{
  "id": "evt_1PkZ3yQ9RKHgCVdKc2Tn8Vx1",
  "object": "event",
  "api_version": "2024-06-20",
  "created": 1767225600,
  "type": "invoice.paid",
  "livemode": false,
  "pending_webhooks": 1,
  "request": {"id": null, "idempotency_key": null},
  "data": {
    "object": {
      "id": "in_1PkZ3xQ9RKHgCVdKx8f2",
      "object": "invoice",
      "account_country": "DE",
      "account_name": "Example GmbH",
      "amount_due": 4900,
      "amount_paid": 4900,
      "attempt_count": 1,
      "billing_reason": "subscription_cycle",
      "created": 1767225600,
      "currency": "eur",
      "customer": "cus_QbRk2bW8mD1xYz",
      "customer_email": "billing@example.com",
      "hosted_invoice_url": "https://invoice.stripe.com/i/acct_1Nv0FGQ9RKHgCVdK/test_YWNjdF8xTnYwRkdROVJLSGdDVmRLLF9RYlJrMmJXOG1EMXhZeg",
      "lines": {
        "object": "list",
        "data": [
          {
            "id": "il_1PkZ3xQ9RKHgCVdKa8c1Yx2B",
            "object": "line_item",
            "amount": 4900,
            "currency": "eur",
            "description": "1 x Team plan (at EUR 49.00 / month)",
            "period": {"end": 1769817600, "start": 1767225600},
            "price": {"id": "price_1Nv0HbQ9RKHgCVdKp0Rk9Lmn", "object": "price", "product": "prod_OiQ4nTeamPlan", "unit_amount": 4900, "recurring": {"interval": "month", "interval_count": 1}},
            "quantity": 1,
            "subscription": "sub_1PkZ3xQ9RKHgCVdKw1Qe7TnB",
            "type": "subscription"
          }
        ],
        "has_more": false,
        "total_count": 1,
        "url": "/v1/invoices/in_1PkZ3xQ9RKHgCVdKx8f2/lines"
      },
      "number": "8F2C1A7E-0042",
      "paid": true,
      "status": "paid",
      "subscription": "sub_1PkZ3xQ9RKHgCVdKw1Qe7TnB",
      "total": 4900
    }
  }
}`)

// BenchmarkExtractStripeInvoice is the receiver's per-request parsing
// cost, with the source's kind resolved once as the receiver does.
func BenchmarkExtractStripeInvoice(b *testing.B) {
	k, _ := senderkind.Builtin().Lookup(senderkind.Stripe)
	b.SetBytes(int64(len(invoiceEvent)))
	b.ReportAllocs()
	for b.Loop() {
		evs, err := ExtractIdentity(k.Identity, Paths{}, nil, invoiceEvent)
		if err != nil || len(evs) != 1 || evs[0].Entity != "in_1PkZ3xQ9RKHgCVdKx8f2" {
			b.Fatal(fmt.Sprint(evs, err))
		}
	}
}

// BenchmarkExtractHubSpotBatch is a batch kind's: every element is read.
func BenchmarkExtractHubSpotBatch(b *testing.B) {
	k, _ := senderkind.Builtin().Lookup(senderkind.HubSpot)
	body := []byte(hubspotBatch)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if evs, err := ExtractIdentity(k.Identity, Paths{}, nil, body); err != nil || len(evs) != 2 {
			b.Fatal(fmt.Sprint(evs, err))
		}
	}
}

// twilioCallStatus is a call status callback as Twilio posts it: 32
// parameters, each checked against Twilio's documented set and shapes.
var twilioCallStatus = []byte("AccountSid=" + twAC + "&AnsweredBy=human&ApiVersion=2010-04-01&CallDuration=49&CallSid=" + twCA + "&CallStatus=completed&CallbackSource=call-progress-events&Called=%2B15558675310&CalledCity=&CalledCountry=US&CalledState=CA&CalledZip=&Caller=%2B14158141829&CallerCity=SAN+FRANCISCO&CallerCountry=US&CallerState=CA&CallerZip=94103&Direction=outbound-api&Duration=1&From=%2B14158141829&FromCity=SAN+FRANCISCO&FromCountry=US&FromState=CA&FromZip=94103&SequenceNumber=3&SipResponseCode=200&Timestamp=Thu%2C+01+Jan+2026+00%3A00%3A00+%2B0000&To=%2B15558675310&ToCity=&ToCountry=US&ToState=CA&ToZip=")

// BenchmarkExtractTwilioCallStatus is a form kind's cost, the parameter
// check included.
func BenchmarkExtractTwilioCallStatus(b *testing.B) {
	k, _ := senderkind.Builtin().Lookup(senderkind.Twilio)
	b.SetBytes(int64(len(twilioCallStatus)))
	b.ReportAllocs()
	for b.Loop() {
		evs, err := ExtractIdentity(k.Identity, Paths{}, nil, twilioCallStatus)
		if err != nil || len(evs) != 1 || evs[0].EventID != twCA+":completed:3" {
			b.Fatal(fmt.Sprint(evs, err))
		}
	}
}
