package signature

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A form request's signed string (the URL, then each name and value) read
// as a URL is the URL of a JSON request, signed by the same signature. An
// inbound SMS whose text is "x&bodySHA256=<hash>&z=" gives that URL a
// bodySHA256 of a JSON body the texter chose. Such a URL's query holds
// AccountSid, the form's first parameter, and bodySHA256 is not its last
// parameter, where Twilio appends it: after it come the SMS's later
// parameters. Either refuses it.
func TestTwilioJSONForgedFromAFormSignature(t *testing.T) {
	s := newSender(t, "twilio", []string{"auth-token-1"}, 0)
	forgedBody := []byte(`{"specversion":"1.0","id":"EZ9","type":"com.twilio.messaging.message.delivered"}`)
	sum := sha256.Sum256(forgedBody)
	form := url.Values{
		"AccountSid": {"AC3f1b5e7d9c2a4f6e8d0b1c3a5e7f9d2b4c"},
		"Body":       {"x&bodySHA256=" + hex.EncodeToString(sum[:]) + "&z="},
		"From":       {"+14158141829"},
		"MessageSid": {"SM1234567890abcdef1234567890abcdef"},
		"SmsStatus":  {"received"},
	}
	sms := &Request{Method: http.MethodPost, URL: "https://hooks.example.com/hooks/twilio?tenant=acme", Header: http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}, Body: []byte(form.Encode())}
	h, err := s.Sign(sms, t0, "")
	if err != nil {
		t.Fatal(err)
	}
	sms.Header.Set(twilioSignatureHeader, h.Get(twilioSignatureHeader))
	if err := s.Verify(sms, t0); err != nil {
		t.Fatalf("the SMS: %v", err)
	}
	signed, _, err := TwilioSignedContent(sms.URL, sms.Body)
	if err != nil {
		t.Fatal(err)
	}
	forged := &Request{Method: http.MethodPost, URL: signed, Header: http.Header{"Content-Type": {"application/json"}}, Body: forgedBody}
	forged.Header.Set(twilioSignatureHeader, h.Get(twilioSignatureHeader))
	wantReason(t, s.Verify(forged, t0), reasonMalformed)

	// Either fact refuses it alone: the query holds the form's first
	// parameter, and bodySHA256 is followed by another.
	for _, c := range []struct{ url, says string }{
		{signed, "AccountSid"},
		{TwilioURLWithBodySHA256("https://hooks.example.com/hooks/twilio", forgedBody) + "&z=1", "last query parameter"},
	} {
		_, _, err := TwilioSignedContent(c.url, forgedBody)
		wantReason(t, err, reasonMalformed)
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: refusal %q does not say %q", c.url, err, c.says)
		}
	}

	// Where Twilio puts it, after the configured URL's own query, it
	// verifies.
	own := &Request{Method: http.MethodPost, URL: TwilioURLWithBodySHA256("https://hooks.example.com/hooks/twilio?tenant=acme", forgedBody), Header: http.Header{}, Body: forgedBody}
	h, err = s.Sign(own, t0, "")
	if err != nil {
		t.Fatal(err)
	}
	own.Header = h
	if err := s.Verify(own, t0); err != nil {
		t.Fatalf("bodySHA256 last: %v", err)
	}
}
