package demo

import (
	"fmt"
	"strings"
	"time"
)

// The demo's business durations at speed 1, and the floor under any of
// them at high speed: the server's loops need a few of their own poll
// intervals to see a duration pass.
const (
	baseDeadline    = 20 * time.Second // the dunning mail's business deadline (a real one: 30m)
	baseVerifyAfter = 15 * time.Second // verification looks a mail up again after this (default 5m)
	baseCallTimeout = 2 * time.Second  // the hanging destinations' call timeout
	baseRetry       = time.Second      // retry backoff base
	baseSignals     = time.Second      // how often the signals are measured
	minDuration     = 50 * time.Millisecond
)

// demoDurations are the config's demoDurations at one speed.
type demoDurations struct {
	Deadline, VerifyAfter, CallTimeout, Retry, Signals time.Duration
}

// durationsAt divides the demo's durations by speed (1 when speed <= 0).
func durationsAt(speed float64) demoDurations {
	if speed <= 0 {
		speed = 1
	}
	scale := func(d time.Duration) time.Duration {
		return max(time.Duration(float64(d)/speed).Round(time.Millisecond), minDuration)
	}
	return demoDurations{
		Deadline:    scale(baseDeadline),
		VerifyAfter: scale(baseVerifyAfter),
		// A timeout shorter than a loopback round trip under load would
		// turn normal calls into unknown outcomes.
		CallTimeout: max(scale(baseCallTimeout), 250*time.Millisecond),
		Retry:       scale(baseRetry),
		Signals:     scale(baseSignals),
	}
}

// configParams are what the demo config is made of.
type configParams struct {
	Listen     string // the listen address written to the file
	StoreURL   string // sqlite:DIR/hookledger.db
	AdminToken string
	DestURL    string // the fake destination's base URL
	Secret     string // every source's signing secret
	Durations  demoDurations
}

// demoConfig returns the demo's configuration file: the dossier's order flow
// with one effect per misbehaving destination, a refetch flow whose source
// API is down, and two systems that echo each other (as in the server's
// end-to-end signals test).
func demoConfig(p configParams) string {
	d := p.Durations
	r := strings.NewReplacer(
		"LISTEN", p.Listen,
		"STORE", p.StoreURL,
		"TOKEN", p.AdminToken,
		"DEST", p.DestURL,
		"SECRET", p.Secret,
		"DEADLINE", d.Deadline.String(),
		"VERIFY_AFTER", d.VerifyAfter.String(),
		"CALL_TIMEOUT", d.CallTimeout.String(),
		"RETRY_BASE", d.Retry.String(),
		"RETRY_CAP", (10 * d.Retry).String(),
		"SIGNALS", d.Signals.String(),
	)
	return r.Replace(configTemplate)
}

// The demo's configuration. Every destination is the one fake server; its
// paths decide how each call goes (see Destination).
const configTemplate = `# Written by hookledger demo: the recovery dossier, live. The durations
# are shortened so that a deadline or a verification passes while you
# watch (a real deadline would be 30m, verify.after 5m).
listen: LISTEN
store: STORE
admin:
  token: TOKEN
sources:
  - name: shop                        # the order system: the dossier's sender
    kind: hmac
    secrets: [SECRET]
    hmac: {header: X-Signature, prefix: "sha256="}
  - name: inventory                   # its events are refetched from its API, which is down
    kind: hmac
    secrets: [SECRET]
    hmac: {header: X-Signature, prefix: "sha256="}
    api: {base_url: "DEST/inventory-api", timeout: CALL_TIMEOUT, allow_private_networks: true}
  - name: sys_a                       # two systems that echo each other's changes
    kind: hmac
    secrets: [SECRET]
    hmac: {header: X-Signature, prefix: "sha256="}
  - name: sys_b
    kind: hmac
    secrets: [SECRET]
    hmac: {header: X-Signature, prefix: "sha256="}
processing:
  poll_interval: 50ms
  retry_delay: RETRY_BASE
delivery:
  poll_interval: 50ms
causation:
  trusted_sources: [sys_a, sys_b]
signals:
  interval: SIGNALS
# Every system the demo calls is simulated by the demo itself on 127.0.0.1,
# so its destinations (and the inventory API above) set
# allow_private_networks: without it, calls to loopback and private
# addresses are refused when dialled (docs/delivery.md, "Outbound safety").
destinations:
  - name: notifier                    # answers 201
    base_url: "DEST"
    allow_private_networks: true
  - name: mailer                      # dedupes on the key, can be asked for a mail, loses one
    base_url: "DEST"
    allow_private_networks: true
    idempotency: {header: Idempotency-Key, window: 24h}
    lookup:
      path: '"/mail/messages/" + pathEscape(episode_key)'
      found: status == 200
    verify: {sample: 1.0, after: VERIFY_AFTER, per_second: 50}
    retry: {base: RETRY_BASE, cap: RETRY_CAP, attempts: 100}
  - name: crm                         # hangs after creating one contact; a lookup settles it
    base_url: "DEST"
    allow_private_networks: true
    timeout: CALL_TIMEOUT
    idempotency: {header: Idempotency-Key, window: 24h}
    lookup:
      path: '"/crm/contacts/" + pathEscape(episode_key)'
      found: status == 200
    retry: {base: RETRY_BASE, cap: RETRY_CAP}
  - name: ledger                      # hangs after posting one entry; no lookup, no key: a person decides
    base_url: "DEST"
    allow_private_networks: true
    timeout: CALL_TIMEOUT
    owner: team-finance
  - name: carrier                     # 429 with Retry-After once per booking
    base_url: "DEST"
    allow_private_networks: true
    retry_after: {unit: seconds, max: 1m}
    retry: {base: RETRY_BASE, cap: RETRY_CAP}
  - name: warehouse                   # refuses an invoice with a 422 until its VAT number is added (POST /warehouse/vat-numbers {"order": ...})
    base_url: "DEST"
    allow_private_networks: true
    owner: team-data
  - name: marketing                   # answers 200 with an error in the body
    base_url: "DEST"
    allow_private_networks: true
    classify:
      - when: 'status == 200 && has(body.errors) && size(body.errors) > 0'
        class: hidden_failure
        reason: the list API answered 200 with errors in its body
        repair: fix the subscriber's address at the source, then retry
  - name: dunning                     # answers 503 for as long as the demo runs
    base_url: "DEST"
    allow_private_networks: true
    retry: {base: RETRY_BASE, cap: RETRY_CAP, attempts: 100}
  - {name: sys_a, base_url: "DEST", allow_private_networks: true}
  - {name: sys_b, base_url: "DEST", allow_private_networks: true}
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
    state: event.intent               # an event without an intent is dead-lettered
    owner: team-orders                # who repairs the events this flow dead-letters
    effects:
      - name: notify_created
        when: state == "CREATED"
        destination: notifier
        request: {path: '"/notify/created"', body: '{"order": entity, "revision": version}'}
      - name: notify_cancel
        when: state == "CANCELLED"
        destination: notifier
        request: {path: '"/notify/cancelled"', body: '{"order": entity}'}
      - name: confirm
        when: state == "CONFIRMED"
        destination: mailer
        request: {path: '"/mail/messages"', body: '{"order": entity, "template": "confirmation"}'}
        compensation: {path: '"/mail/void"', body: '{"order": entity, "confirmation": original.episode_key}'}
        compensate_when: state == "CANCELLED"
      - name: sync_crm
        when: state == "PAID"
        destination: crm
        request: {path: '"/crm/contacts"', body: '{"order": entity}'}
      - name: post_ledger
        when: state == "PAID"
        destination: ledger
        request: {path: '"/ledger/entries"', body: '{"order": entity}'}
      - name: book_carrier
        when: state == "SHIPPED"
        destination: carrier
        request: {path: '"/carrier/bookings"', body: '{"order": entity}'}
      - name: export_invoice
        when: state == "INVOICED"
        destination: warehouse
        request: {path: '"/warehouse/invoices"', body: '{"order": entity}'}
      - name: subscribe
        when: state == "SUBSCRIBED"
        destination: marketing
        request: {path: '"/marketing/members"', body: '{"order": entity}'}
      - name: dunning_mail
        when: state == "OVERDUE"
        destination: dunning
        request: {path: '"/dunning/mails"', body: '{"order": entity}'}
        deadline: DEADLINE
  - name: stock
    source: inventory
    events: ["stock.*"]
    entity: event.sku
    version: {mode: refetch, path: '"/skus/" + pathEscape(entity)', field: object.revision}
    effects:
      - {name: reorder, destination: warehouse, request: {path: '"/warehouse/reorders"', body: '{"sku": entity}'}}
  - name: a_to_b
    source: sys_a
    events: ["*"]
    entity: event.id
    version: {mode: revision, revision: event.rev}
    effects:
      - {name: push_b, destination: sys_b, request: {path: '"/contacts"', body: '{"id": entity}'}}
  - name: b_to_a
    source: sys_b
    events: ["*"]
    entity: event.id
    version: {mode: revision, revision: event.rev}
    effects:
      - {name: push_a, destination: sys_a, request: {path: '"/contacts"', body: '{"id": entity}'}}
`

// describe says, for the demo's banner, which durations were shortened.
func (d demoDurations) describe() string {
	return fmt.Sprintf("deadline %s (a real one: 30m), verification %s after a mail (default 5m), retries from %s",
		d.Deadline, d.VerifyAfter, d.Retry)
}
