package senderkind

import (
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/vendors"
)

// Shopify is Shopify's HTTPS webhook subscriptions.
const Shopify = "shopify"

// shopify verifies X-Shopify-Hmac-Sha256 (base64 HMAC-SHA256 of the raw
// body, keyed with the app's client secret) and reads the identity from
// Shopify's headers.
//
// The event is named by X-Shopify-Event-Id, which Shopify documents as the
// same on every delivery of one event ("Ignore duplicate webhooks"), never
// by X-Shopify-Webhook-Id, which is new on every retry (IP02). The type is
// the topic; the account is the shop's myshopify.com domain, so a source's
// account: restricts it to one shop. The headers are not signed: see
// docs/signatures.md.
func shopify() Kind {
	return Kind{
		Name:   Shopify,
		Title:  "Shopify",
		Scheme: Scheme{Name: signature.KindShopify, Placeholder: "operator-load-placeholder"},
		Identity: Identity{
			EventID:      "header:" + signature.ShopifyEventIDHeader,
			Type:         "header:" + signature.ShopifyTopicHeader,
			TypeRequired: true,
			Account:      "header:" + signature.ShopifyShopDomainHeader,
			OccurredAt:   "header:" + signature.ShopifyTriggeredAtHeader,
			// Every REST resource payload carries its GraphQL id; a topic
			// without one (app/uninstalled ...) has no entity.
			Entity: "admin_graphql_api_id",
			Unit:   time.Second,
		},
		Keep: []string{
			signature.ShopifyEventIDHeader, signature.ShopifyWebhookIDHeader, signature.ShopifyTopicHeader,
			signature.ShopifyShopDomainHeader, signature.ShopifyTriggeredAtHeader, signature.ShopifyAPIVersionHeader,
		},
		Check: untimed("Shopify"),
		Contract: &vendors.Contract{
			Name:        Shopify,
			Title:       "Shopify webhook subscriptions (HTTPS)",
			Kind:        vendors.KindSender,
			Source:      "shopify.dev webhooks pages (best practices, ignore duplicates, retry mechanism changelog)",
			Read:        "2026-12-01",
			AckTimeout:  5 * time.Second,
			Retries:     8,
			RetryWindow: 4 * time.Hour,
			DedupeKey:   "X-Shopify-Event-Id, the same on every delivery of one event (X-Shopify-Webhook-Id is per delivery)",
			Notes: []string{
				"1 second to connect and 5 seconds in total to answer with a 2xx, else the delivery failed.",
				"8 retries with exponential backoff over 4 hours, with the original payload; a subscription made through the Admin API is deleted after 8 consecutive failures.",
				"Delivery is not guaranteed: Shopify recommends reconciliation jobs against the Admin API.",
				"No ordering guarantee: compare X-Shopify-Triggered-At or the resource's updated_at to spot stale payloads.",
				"Several subscriptions to one topic each receive the event, with the same X-Shopify-Event-Id.",
			},
		},
		Sign: Sign{IDHeader: signature.ShopifyEventIDHeader},
	}
}
