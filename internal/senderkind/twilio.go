package senderkind

import (
	"bytes"
	"time"

	"github.com/hookledger/hookledger/internal/vendor"
	"github.com/hookledger/hookledger/internal/verify"
)

// Twilio is Twilio's webhooks for messaging and voice.
const Twilio = "twilio"

// twilio verifies X-Twilio-Signature: the base64 HMAC-SHA1, keyed with the
// auth token, of the URL Twilio called followed by the sorted form
// parameters, or of the URL alone with its bodySHA256 parameter for a JSON
// body. The source needs public_url, the URL configured at Twilio.
//
// Twilio posts form bodies. The identity is the resource's sid
// (MessageSid, else CallSid) joined with its status and SequenceNumber
// where sent (RuleTwilio): an inbound message is one event, and each status
// callback of a message or call is an event of its own, which the sid alone
// would collapse. A retry resends the same parameters, so it keeps the
// identity. I-Twilio-Idempotency-Token is kept as evidence only: Twilio's
// reference does not document it. The account is AccountSid.
func twilio() Kind {
	return Kind{
		Name:  Twilio,
		Title: "Twilio",
		Scheme: Scheme{
			Name:        verify.KindTwilio,
			Placeholder: "operator-load-placeholder",
		},
		Identity: Identity{
			Account: "AccountSid",
			Rule:    RuleTwilio,
			Form:    true,
			Unit:    time.Second,
		},
		Keep: []string{verify.TwilioIdempotencyHeader},
		Check: func(s Source) []Problem {
			return append(untimed("Twilio")(s), requirePublicURL(s, "Twilio")...)
		},
		Contract: &vendor.Contract{
			Name:       Twilio,
			Title:      "Twilio webhooks (messaging and voice)",
			Kind:       vendor.KindSender,
			Source:     "twilio.com/docs/usage/webhooks (webhooks connection overrides, webhooks security)",
			Read:       "2026-12-01",
			AckTimeout: 15 * time.Second,
			Retries:    1,
			// The retries happen inside the 15 s total time of one
			// webhook request.
			RetryWindow: 15 * time.Second,
			DedupeKey:   "none documented; MessageSid or CallSid with the status identifies an event",
			Notes: []string{
				"Connect timeout 5 s, read timeout 15 s, 15 s in total including retries; overrides go in the URL fragment (#ct=, #rt=, #tt=, #rc=, #rp=), which is not signed.",
				"One connection retry by default (0 to 5 with #rc=); then the fallback URL, if configured. No long-term retry.",
				"Status callbacks are one request per status of a message or call and may arrive out of order.",
				"The signature covers the URL Twilio called and the form parameters; JSON bodies are bound by a bodySHA256 query parameter.",
			},
		},
		Sign: Sign{
			NeedsURL: true,
			URL: func(u string, body []byte) string {
				if b := bytes.TrimSpace(body); len(b) > 0 && (b[0] == '{' || b[0] == '[') {
					return verify.TwilioURLWithBodySHA256(u, body)
				}
				return u
			},
		},
	}
}
