package receive_test

import (
	"net/http"
	"strings"
	"testing"
)

// twilioAccount is the AccountSid of the twilio vectors; twilioSM9 is a
// message SID of Twilio's shape.
const (
	twilioAccount = "AC3f1b5e7d9c2a4f6e8d0b1c3a5e7f9d2b"
	twilioSM9     = "SM90000000000000000000000000000009"
)

// Twilio signs the names and values of a form with no separator between
// them, so one captured request also verifies with a parameter boundary
// moved. Each malleated vector carries the genuine request's signature, and
// twilio's own validateRequest accepts it; before the parameter check each
// was stored as a new event. Now each is refused with a 400 that names the
// parameter, nothing more is stored, and the genuine request is still
// accepted.
func TestTwilioMalleatedRequestsRefused(t *testing.T) {
	vs := loadVectors(t, "twilio")
	why := map[string][]string{
		"message status callback, SmsSid merged into MessageStatus":        {"MessageStatus: ", "deliveredSmsSidSM", "not a message status Twilio documents"},
		"call status callback, SequenceNumber merged into a name":          {"SequenceNumber3: ", "is not a parameter Twilio documents", "extra_params"},
		"call status callback, SequenceNumber merged into FromZip":         {"FromZip: ", "SequenceNumber"},
		"call status callback, SipResponseCode merged into SequenceNumber": {"SequenceNumber: ", "3SipResponseCode200", "not a number"},
		"call status callback, CallbackSource merged into CallStatus":      {"CallStatus: ", "not a call status Twilio documents"},
	}
	var malleated []senderVector
	for _, v := range vs {
		if v.Malleated != "" {
			malleated = append(malleated, v)
		}
	}
	if len(malleated) != len(why) {
		t.Fatalf("%d malleated vectors, want the %d this test names", len(malleated), len(why))
	}
	sr := newSenderRig(t, "twilio", vs[0].Secret, "", vs)
	for _, name := range []string{"message status callback", "call status callback"} {
		if code, resp, _ := do(t, sr.request(vectorNamed(t, vs, name))); code != http.StatusOK {
			t.Fatalf("genuine %s: %d %s", name, code, resp)
		}
	}
	before := sr.stored()
	for _, v := range malleated {
		code, resp, _ := do(t, sr.request(v))
		if code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", v.Name, code, resp)
			continue
		}
		for _, frag := range why[v.Name] {
			if !strings.Contains(resp, frag) {
				t.Errorf("%s: answer %s does not say %q", v.Name, resp, frag)
			}
		}
	}
	if after := sr.stored(); len(after) != len(before) {
		t.Fatalf("stored %v after the malleated requests, want only %v", after, before)
	}
	// The genuine requests again: duplicates, as a replay of a captured
	// request always was.
	for _, name := range []string{"message status callback", "call status callback"} {
		if code, resp, _ := do(t, sr.request(vectorNamed(t, vs, name))); code != http.StatusOK || !strings.Contains(resp, `"duplicates":1`) {
			t.Fatalf("genuine %s again: %d %s, want a duplicate", name, code, resp)
		}
	}
}

// A JSON request whose URL is the signed string of an inbound SMS that
// carries a bodySHA256 in its text verifies with twilio's
// validateRequestWithBody; the scheme refuses it (401) and stores nothing,
// and the SMS itself is accepted.
func TestTwilioJSONForgedFromAFormSignatureRefused(t *testing.T) {
	vs := loadVectors(t, "twilio")
	bait := vectorNamed(t, vs, "inbound SMS carrying a bodySHA256 in its text (URL with query)")
	forged := vectorNamed(t, vs, "JSON request forged from the inbound SMS's signature")
	if forged.Refused == "" || forged.Headers["X-Twilio-Signature"] != bait.Headers["X-Twilio-Signature"] {
		t.Fatal("the forged vector must reuse the bait's signature")
	}
	sr := newSenderRig(t, "twilio", bait.Secret, "", []senderVector{bait, forged})
	if code, resp, _ := do(t, sr.request(forged)); code != http.StatusUnauthorized || !strings.Contains(resp, "AccountSid") {
		t.Fatalf("forged JSON request: %d %s, want 401 naming AccountSid in the query", code, resp)
	}
	if n := len(sr.events()); n != 0 {
		t.Fatalf("stored %d events for the forged request", n)
	}
	if code, resp, _ := do(t, sr.request(bait)); code != http.StatusOK {
		t.Fatalf("the SMS itself: %d %s", code, resp)
	}
}

// A parameter Twilio sends that the kind does not list is refused until
// the source lists it in extra_params; then the request is accepted with
// the same identity.
func TestTwilioExtraParams(t *testing.T) {
	body := "AccountSid=" + twilioAccount + "&ApiVersion=2010-04-01&ChannelRegion=us1&From=%2B15558675310&MessageSid=SM1234567890abcdef1234567890abcdef&MessageStatus=sent&SmsSid=SM1234567890abcdef1234567890abcdef&SmsStatus=sent&To=%2B14158141829"
	cfg := `listen: 127.0.0.1:0
store: sqlite:unused
sources:
  - name: twilio
    kind: twilio
    secrets: [twilio-auth-token]
    public_url: https://hooks.example.com/hooks/twilio
  - name: twilio-extra
    kind: twilio
    secrets: [twilio-auth-token]
    public_url: https://hooks.example.com/hooks/twilio-extra
    extra_params: [ChannelRegion]
`
	r := newRig(t, cfg, nil)
	const form = "application/x-www-form-urlencoded"
	code, resp, _ := do(t, r.signedAt("twilio", body, form))
	if code != http.StatusBadRequest || !strings.Contains(resp, "ChannelRegion: is not a parameter Twilio documents") || !strings.Contains(resp, "extra_params") {
		t.Fatalf("undocumented parameter: %d %s, want 400 naming it and extra_params", code, resp)
	}
	if code, resp, _ := do(t, r.signedAt("twilio-extra", body, form)); code != http.StatusOK {
		t.Fatalf("listed in extra_params: %d %s", code, resp)
	}
	evs := r.events()
	if len(evs) != 1 || evs[0].Source != "twilio-extra" || evs[0].EventID != "SM1234567890abcdef1234567890abcdef:sent" {
		t.Fatalf("events = %+v, want the one listed source's SM…:sent", evs)
	}
}
