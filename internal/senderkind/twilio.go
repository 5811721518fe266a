package senderkind

import (
	"bytes"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/vendors"
)

// Twilio is Twilio's webhooks for messaging and voice.
const Twilio = "twilio"

// twilio verifies X-Twilio-Signature: the base64 HMAC-SHA1, keyed with the
// auth token, of the URL Twilio called followed by the sorted form
// parameters, or of the URL alone with its bodySHA256 parameter for a JSON
// body. The source needs public_url, the URL configured at Twilio.
//
// Twilio posts form bodies. The identity is the resource's sid
// (MessageSid, else CallSid) joined with its status and, for a call,
// SequenceNumber (twilioEventID): an inbound message is one event, and each
// status callback of a message or call is an event of its own, which the
// sid alone would collapse. A retry resends the same parameters, so it
// keeps the identity. I-Twilio-Idempotency-Token is kept as evidence only:
// Twilio's reference does not document it. The account is AccountSid.
//
// The signature does not separate names from values, so a form may name
// only the parameters Twilio documents (twilioParams, plus the source's
// extra_params), each value of its documented shape: see twilioForm.
func twilio() Kind {
	return Kind{
		Name:  Twilio,
		Title: "Twilio",
		Scheme: Scheme{
			Name:        signature.KindTwilio,
			Placeholder: "operator-load-placeholder",
		},
		Identity: Identity{
			Account: "AccountSid",
			Rules: Rules{
				Form: twilioForm, Reshape: twilioCloudEvent,
				EventID: twilioEventID, Type: twilioType, Entity: twilioSid,
			},
			Form:   true,
			Unit:   time.Second,
			Params: twilioParams(),
		},
		Keep: []string{signature.TwilioIdempotencyHeader},
		Check: func(s Source) []Problem {
			ps := append(untimed("Twilio")(s), requirePublicURL(s, "Twilio")...)
			if u, err := url.Parse(s.PublicURL); err == nil && strings.Contains(u.RawQuery, signature.TwilioFirstParam) {
				// The scheme refuses such a URL: it is what a URL that
				// took the start of a form's signed parameters looks like.
				ps = append(ps, Problem{Field: "public_url", Msg: "public_url's query must not hold " + signature.TwilioFirstParam + ", the first parameter of every form Twilio signs"})
			}
			return append(ps, checkExtraParams(s, twilioParams())...)
		},
		Contract: &vendors.Contract{
			Name:       Twilio,
			Title:      "Twilio webhooks (messaging and voice)",
			Kind:       vendors.KindSender,
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
					return signature.TwilioURLWithBodySHA256(u, body)
				}
				return u
			},
		},
	}
}

// Shapes of Twilio's parameter values, from its documentation: SIDs are
// two capital letters (the resource type) and 32 hex digits, statuses
// one of the documented values.
var (
	twilioAccountSID = pattern("an account SID (AC and 32 hex digits)", `AC[0-9a-fA-F]{32}`)
	twilioCallSID    = pattern("a call SID (CA and 32 hex digits)", `CA[0-9a-fA-F]{32}`)
	twilioDigits     = pattern("a number (digits only)", `[0-9]+`)
	twilioDecimal    = pattern("a decimal number", `-?[0-9]+(\.[0-9]+)?`)
	twilioAPIVersion = pattern("an API version (a date, YYYY-MM-DD)", `[0-9]{4}-[0-9]{2}-[0-9]{2}`)
	twilioWord       = pattern("a lower-case word (letters joined by - or _)", `[a-z]+([-_][a-z]+)*`)
	// The Message resource's status values (SmsStatus takes the same).
	twilioMessageStatus = oneOf("a message status Twilio documents",
		"accepted", "scheduled", "canceled", "queued", "sending", "sent", "failed",
		"delivered", "undelivered", "receiving", "received", "read", "partially_delivered")
	// The Call resource's status values.
	twilioCallStatus = oneOf("a call status Twilio documents",
		"queued", "initiated", "ringing", "in-progress", "completed", "busy", "failed", "no-answer", "canceled")
)

// twilioParams is the set of parameters Twilio documents for the requests
// a twilio source takes: an incoming message (SMS, MMS, WhatsApp), a
// message status callback, an incoming call and a call status callback
// (read 2026-12-03: twilio.com/docs/messaging/guides/webhook-request,
// .../messaging/guides/track-outbound-message-status,
// .../voice/twiml#request-parameters and
// .../voice/api/call-resource#statuscallback), and two that WhatsApp
// requests are seen to carry though those pages do not list them
// (EventType, ExternalUserId). Every other name is refused
// until a source lists it in extra_params: Twilio signs names and values
// with no separator, so an undocumented name is what a moved boundary
// looks like (twilioForm). Every name ending in Sid holds a SID.
func twilioParams() Params {
	p := Params{
		"AccountSid":     twilioAccountSID,
		"ApiVersion":     twilioAPIVersion,
		"AddOns":         {},
		"From":           {},
		"To":             {},
		"SmsStatus":      twilioMessageStatus,
		"MessageStatus":  twilioMessageStatus,
		"CallStatus":     twilioCallStatus,
		"CallSid":        twilioCallSID,
		"ParentCallSid":  twilioCallSID,
		"Direction":      twilioWord,
		"AnsweredBy":     twilioWord,
		"CallbackSource": twilioWord,
		"Latitude":       twilioDecimal,
		"Longitude":      twilioDecimal,
	}
	sids := []string{
		"MessageSid", "SmsSid", "SmsMessageSid", "MessagingServiceSid",
		"OriginalRepliedMessageSid", "ChannelInstallSid",
		"ApplicationSid", "RecordingSid",
	}
	numbers := []string{
		// messaging
		"NumMedia", "NumSegments", "ReferralNumMedia", "ErrorCode", "RawDlrDoneDate",
		// voice
		"SequenceNumber", "CallDuration", "Duration", "RecordingDuration",
		"SipResponseCode", "MachineDetectionDuration", "QueueTime",
	}
	text := []string{
		// messaging
		"Body", "ProfileName", "WaId", "Forwarded", "FrequentlyForwarded",
		"ButtonText", "ButtonPayload", "Address", "Label", "MessageType",
		"ChannelMetadata", "OriginalRepliedMessageSender",
		"ReferralBody", "ReferralHeadline", "ReferralSourceId", "ReferralSourceType",
		"ReferralSourceUrl", "ReferralMediaId", "ReferralMediaContentType",
		"ReferralMediaUrl", "ReferralCtwaClid",
		"ErrorMessage", "ChannelToAddress", "ChannelPrefix", "ChannelStatusMessage",
		"StructuredMessage", "EventType", "ExternalUserId",
		// voice
		"Called", "Caller", "CallerName", "ForwardedFrom", "CallToken", "StirVerstat",
		"RecordingUrl", "Timestamp",
	}
	for _, party := range []string{"From", "To", "Called", "Caller"} {
		for _, geo := range []string{"City", "State", "Zip", "Country"} {
			text = append(text, party+geo)
		}
	}
	for n := range 10 {
		text = append(text, fmt.Sprintf("MediaContentType%d", n), fmt.Sprintf("MediaUrl%d", n))
	}
	for _, name := range sids {
		p[name] = sidShape
	}
	for _, name := range numbers {
		p[name] = twilioDigits
	}
	for _, name := range text {
		p[name] = Shape{}
	}
	return p
}

// paramName is what extra_params accepts as a parameter name: Twilio's
// names are letters and digits (MediaUrl0); '_', '.' and '-' are allowed
// for the senders' newer products.
var paramName = regexp.MustCompile(`\A[A-Za-z][A-Za-z0-9_.-]*\z`)

// checkExtraParams checks a source's extra_params against the kind's
// documented set: names well formed and listed once; a name the set
// already holds is a warning, since it changes nothing.
func checkExtraParams(s Source, documented Params) []Problem {
	var out []Problem
	seen := map[string]bool{}
	for i, name := range s.ExtraParams {
		field := fmt.Sprintf("extra_params[%d]", i)
		switch {
		case !paramName.MatchString(name):
			out = append(out, Problem{Field: field, Msg: fmt.Sprintf("extra_params[%d] %q is not a parameter name (a letter, then letters, digits, '_', '.' or '-')", i, name)})
		case seen[name]:
			out = append(out, Problem{Field: field, Msg: fmt.Sprintf("extra_params lists %s twice", name)})
		default:
			if _, ok := documented[name]; ok {
				out = append(out, Problem{Field: field, Warning: true, Msg: fmt.Sprintf("extra_params lists %s, which the kind already accepts", name)})
			}
		}
		seen[name] = true
	}
	return out
}
