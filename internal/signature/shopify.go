package signature

import (
	"net/http"
	"time"
)

// KindShopify is the scheme's name, as Options.Kind takes it.
const KindShopify = "shopify"

// shopifyScheme is Shopify's X-Shopify-Hmac-Sha256; Shopify signs no
// timestamp.
var shopifyScheme = schemeDef{
	name: KindShopify,
	build: func(o Options, _ time.Duration) (Scheme, error) {
		if err := noTolerance(o); err != nil {
			return nil, err
		}
		s, err := newShopify(o.Secrets)
		if err != nil {
			return nil, err
		}
		return s, nil
	},
}

// Shopify webhook headers (HTTPS delivery).
const (
	// shopifyHMACHeader carries the base64 HMAC-SHA256 of the raw body,
	// keyed with the app's client secret (or the webhook signing secret
	// for webhooks made in the shop admin).
	shopifyHMACHeader = "X-Shopify-Hmac-Sha256"
	// ShopifyEventIDHeader identifies the event; Shopify documents it as
	// the same on every retry of that event.
	ShopifyEventIDHeader = "X-Shopify-Event-Id"
	// ShopifyWebhookIDHeader is per delivery and differs between retries;
	// it must never serve as the event identity (IP02).
	ShopifyWebhookIDHeader = "X-Shopify-Webhook-Id"
	// ShopifyTopicHeader holds the topic (orders/create ...).
	ShopifyTopicHeader = "X-Shopify-Topic"
	// ShopifyShopDomainHeader holds the shop's myshopify.com domain.
	ShopifyShopDomainHeader = "X-Shopify-Shop-Domain"
	// ShopifyTriggeredAtHeader holds the time the event was triggered.
	ShopifyTriggeredAtHeader = "X-Shopify-Triggered-At"
	// ShopifyAPIVersionHeader holds the API version of the payload.
	ShopifyAPIVersionHeader = "X-Shopify-API-Version"
)

// shopify is the generic hmac scheme pinned to Shopify's parameters
// (X-Shopify-Hmac-Sha256, base64, body only, no prefix, no timestamp).
// Shopify signs no timestamp, so no tolerance applies; the event identity
// (X-Shopify-Event-Id) catches replays in the inbox.
type shopify struct{ h *hmacScheme }

func newShopify(secrets []string) (*shopify, error) {
	h, err := newHMAC(&HMACOptions{Header: shopifyHMACHeader, Encoding: "base64"}, secrets, 0, 0)
	if err != nil {
		return nil, err
	}
	return &shopify{h: h}, nil
}

func (s *shopify) Verify(req *Request, now time.Time) error {
	return renamed("shopify", s.h.Verify(req, now))
}

func (s *shopify) Sign(req *Request, now time.Time, eventID string) (http.Header, error) {
	return s.h.Sign(req, now, eventID)
}
