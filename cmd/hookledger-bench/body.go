package main

import (
	"fmt"
	"time"
)

// stripeBody returns a Stripe-shaped invoice.paid event of about 1.6 KB
// (the size of a typical Stripe invoice event with its object expanded),
// so that the benchmarks pay realistic costs for reading, verifying,
// parsing and storing the body. eventID and entity are unique per call.
func stripeBody(eventID, entity string, created time.Time) []byte {
	ts := created.Unix()
	return fmt.Appendf(nil, `{
  "id": %q,
  "object": "event",
  "api_version": "2024-06-20",
  "created": %d,
  "type": "invoice.paid",
  "livemode": false,
  "pending_webhooks": 1,
  "request": {"id": null, "idempotency_key": null},
  "data": {
    "object": {
      "id": %q,
      "object": "invoice",
      "account_country": "DE",
      "account_name": "Example GmbH",
      "amount_due": 4900,
      "amount_paid": 4900,
      "amount_remaining": 0,
      "attempt_count": 1,
      "attempted": true,
      "billing_reason": "subscription_cycle",
      "collection_method": "charge_automatically",
      "created": %d,
      "currency": "eur",
      "customer": "cus_QbRk2bW8mD1xYz",
      "customer_email": "billing@example.com",
      "customer_name": "Example Customer Ltd",
      "hosted_invoice_url": "https://invoice.stripe.com/i/acct_1Nv0FGQ9RKHgCVdK/test_YWNjdF8xTnYwRkdROVJLSGdDVmRLLF9RYlJrMmJXOG1EMXhZeg",
      "invoice_pdf": "https://pay.stripe.com/invoice/acct_1Nv0FGQ9RKHgCVdK/test_YWNjdF8xTnYwRkdROVJLSGdDVmRL/pdf",
      "lines": {
        "object": "list",
        "data": [
          {
            "id": "il_1PkZ3xQ9RKHgCVdKa8c1Yx2B",
            "object": "line_item",
            "amount": 4900,
            "currency": "eur",
            "description": "1 x Team plan (at EUR 49.00 / month)",
            "period": {"end": %d, "start": %d},
            "price": {"id": "price_1Nv0HbQ9RKHgCVdKp0Rk9Lmn", "object": "price", "product": "prod_OiQ4nTeamPlan", "unit_amount": 4900, "recurring": {"interval": "month", "interval_count": 1}},
            "quantity": 1,
            "subscription": "sub_1PkZ3xQ9RKHgCVdKw1Qe7TnB",
            "type": "subscription"
          }
        ],
        "has_more": false,
        "total_count": 1,
        "url": "/v1/invoices/%s/lines"
      },
      "number": "8F2C1A7E-0042",
      "paid": true,
      "period_end": %d,
      "period_start": %d,
      "status": "paid",
      "subscription": "sub_1PkZ3xQ9RKHgCVdKw1Qe7TnB",
      "subtotal": 4900,
      "tax": 0,
      "total": 4900
    }
  }
}
`, eventID, ts, entity, ts, ts+30*86400, ts, entity, ts, ts-30*86400)
}

// orderBody returns a shop order event of about 1.5 KB carrying the order
// id and a revision that increases with every change of the order, the
// shape a revision-mode flow reads.
func orderBody(eventID, orderID string, revision int, created time.Time) []byte {
	return fmt.Appendf(nil, `{
  "id": %q,
  "type": "order.updated",
  "created_at": %q,
  "channel": "web",
  "order_id": %q,
  "revision": %d,
  "status": "processing",
  "currency": "EUR",
  "total": {"amount": 14700, "tax": 2347, "shipping": 490},
  "customer": {
    "id": "cus_81726354",
    "email": "buyer@example.com",
    "name": "Example Buyer",
    "address": {"line1": "Hauptstrasse 12", "line2": null, "city": "Berlin", "postal_code": "10115", "country": "DE"}
  },
  "items": [
    {"sku": "TSHIRT-BLK-M", "name": "T-shirt black, size M", "quantity": 2, "unit_price": 2900, "tax_rate": "19.0", "fulfilment": "warehouse-1"},
    {"sku": "HOODIE-GRY-L", "name": "Hoodie grey, size L", "quantity": 1, "unit_price": 5900, "tax_rate": "19.0", "fulfilment": "warehouse-1"},
    {"sku": "CAP-NAVY", "name": "Cap navy, one size", "quantity": 1, "unit_price": 2510, "tax_rate": "19.0", "fulfilment": "warehouse-2"}
  ],
  "shipping": {"method": "standard", "carrier": "dhl", "tracking": null, "eta_days": 3},
  "payment": {"method": "card", "brand": "visa", "last4": "4242", "captured": true},
  "notes": "Please leave the parcel with the neighbour if nobody is at home. Gift wrapping not required.",
  "metadata": {"campaign": "autumn-sale", "referrer": "newsletter", "ab_bucket": "b", "app_version": "5.14.2"}
}
`, eventID, created.UTC().Format(time.RFC3339Nano), orderID, revision)
}
