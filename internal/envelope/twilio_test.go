package envelope

import (
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/signature"
)

func twilioIdentity(t *testing.T, extra ...string) senderkind.Identity {
	t.Helper()
	k, ok := senderkind.Builtin().Lookup(senderkind.Twilio)
	if !ok {
		t.Fatal("no twilio kind")
	}
	return k.IdentityFor(senderkind.Source{ExtraParams: extra})
}

// A Twilio form names only the parameters Twilio documents, each value of
// its shape; AccountSid and the status are required; what the identity
// reads is sent once; and no parameter the identity reads is written
// inside the value sorted before where it would stand. Each refusal names
// the parameter.
func TestTwilioFormContract(t *testing.T) {
	id := twilioIdentity(t)
	msg := "AccountSid=" + twAC + "&ApiVersion=2010-04-01&From=%2B15558675310&MessageSid=" + twSM + "&MessageStatus=delivered&SmsSid=" + twSM + "&SmsStatus=delivered&To=%2B14158141829"
	call := "AccountSid=" + twAC + "&ApiVersion=2010-04-01&CallSid=" + twCA + "&CallStatus=completed&CallbackSource=call-progress-events&From=%2B14158141829&FromZip=94103&SequenceNumber=3&SipResponseCode=200&To=%2B15558675310"
	for _, c := range []struct{ name, body, field, text string }{
		{"undocumented name", strings.Replace(call, "&SequenceNumber=3&", "&SequenceNumber3=&", 1), "SequenceNumber3", "is not a parameter Twilio documents"},
		{"name merged into a status", strings.Replace(msg, "&MessageStatus=delivered&SmsSid=", "&MessageStatus=deliveredSmsSid", 1), "MessageStatus", `"deliveredSmsSid` + twSM + `", not a message status Twilio documents`},
		{"name merged into a number", strings.Replace(call, "&SequenceNumber=3&SipResponseCode=200", "&SequenceNumber=3SipResponseCode200", 1), "SequenceNumber", "not a number"},
		{"name merged into a call status", strings.Replace(call, "&CallStatus=completed&CallbackSource=", "&CallStatus=completedCallbackSource", 1), "CallStatus", "not a call status"},
		{"name merged into a SID", strings.Replace(msg, "&MessageSid="+twSM+"&MessageStatus=", "&MessageSid="+twSM+"MessageStatus", 1), "MessageSid", "not a Twilio SID"},
		{"SequenceNumber inside FromZip", strings.Replace(call, "&FromZip=94103&SequenceNumber=3&", "&FromZip=94103SequenceNumber3&", 1), "FromZip", "holds the name SequenceNumber"},
		{"MessageSid inside From", strings.Replace(msg, "&From=%2B15558675310&MessageSid=", "&From=%2B15558675310MessageSid", 1), "From", "holds the name MessageSid"},
		{"no AccountSid", strings.Replace(msg, "AccountSid="+twAC+"&", "", 1), "AccountSid", "is required"},
		{"AccountSid moved", strings.Replace(msg, "AccountSid="+twAC, "AccountSid="+twAC+"ApiVersion2010-04-01", 1), "AccountSid", "not an account SID"},
		{"no status", strings.Replace(strings.Replace(msg, "&MessageStatus=delivered", "", 1), "&SmsStatus=delivered", "", 1), "MessageStatus", "is required"},
		{"no call status", strings.Replace(call, "&CallStatus=completed", "", 1), "CallStatus", "is required"},
		{"status sent twice", msg + "&MessageStatus=sent", "MessageStatus", "is sent 2 times"},
		{"sequence sent twice", call + "&SequenceNumber=4", "SequenceNumber", "is sent 2 times"},
		{"account sent twice", msg + "&AccountSid=" + strings.Replace(twAC, "0", "1", 1), "AccountSid", "is sent 2 times"},
		{"nameless parameter", msg + "&=x", "body", "without a name"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := ExtractIdentity(id, Paths{}, nil, []byte(c.body))
			wantMalformed(t, err, c.field, c.text)
		})
	}
	for _, body := range []string{msg, call} {
		if _, err := ExtractIdentity(id, Paths{}, nil, []byte(body)); err != nil {
			t.Errorf("genuine %s: %v", body, err)
		}
	}
	// A parameter that is not read may be repeated (twilio's libraries
	// sign each value), and left empty.
	ev, err := ExtractIdentity(id, Paths{}, nil, []byte(call+"&StirVerstat=a&StirVerstat=b&CalledZip="))
	if err != nil || ev[0].EventID != twCA+":completed:3" {
		t.Fatalf("repeated unread parameter: %+v %v", ev, err)
	}
	// A repeated parameter named by fields: is refused like the kind's own.
	_, err = ExtractIdentity(id, Paths{Entity: "StirVerstat"}, nil, []byte(call+"&StirVerstat=a&StirVerstat=b"))
	wantMalformed(t, err, "StirVerstat", "is sent 2 times")
}

// extra_params adds names to the documented set: a SID's shape for a name
// ending in Sid, any text otherwise; a documented name keeps its shape.
func TestTwilioExtraParamsShapes(t *testing.T) {
	body := "AccountSid=" + twAC + "&MessageSid=" + twSM + "&SmsStatus=received"
	if _, err := ExtractIdentity(twilioIdentity(t), Paths{}, nil, []byte(body+"&ChannelRegion=us1")); err == nil {
		t.Fatal("an undocumented parameter was accepted")
	}
	id := twilioIdentity(t, "ChannelRegion", "ConversationSid", "NumMedia")
	if _, err := ExtractIdentity(id, Paths{}, nil, []byte(body+"&ChannelRegion=us1&ConversationSid=CH0123456789abcdef0123456789abcdef")); err != nil {
		t.Fatalf("extra parameters refused: %v", err)
	}
	_, err := ExtractIdentity(id, Paths{}, nil, []byte(body+"&ConversationSid=CH01"))
	wantMalformed(t, err, "ConversationSid", "not a Twilio SID")
	_, err = ExtractIdentity(id, Paths{}, nil, []byte(body+"&NumMedia=one"))
	wantMalformed(t, err, "NumMedia", "not a number")
}

// The set's facts the check relies on: AccountSid is the first name in
// sort order, so a form that starts with it leaves nothing to move into the
// URL's query; and every parameter the identity reads has a shape that no
// merged name fits.
func TestTwilioParamsSet(t *testing.T) {
	ps := twilioIdentity(t).Params
	if names := ps.Names(); names[0] != "AccountSid" {
		t.Fatalf("first name %s, want AccountSid", names[0])
	}
	for _, name := range []string{"AccountSid", "MessageSid", "CallSid", "MessageStatus", "SmsStatus", "CallStatus", "SequenceNumber"} {
		s, ok := ps[name]
		if !ok || s.Text() {
			t.Errorf("%s: documented %v, shaped %v", name, ok, ok && !s.Text())
		}
	}
	for _, name := range ps.Names() {
		if strings.HasSuffix(name, "Sid") && ps[name].Match("SM0123") {
			t.Errorf("%s takes a value that is no SID", name)
		}
	}
}

// reparse calls fn with every form whose Twilio signed parameters (each
// name then value, names sorted, a repeated name's values sorted) are s:
// every way the names in shapes can cut s, with each value of its name's
// shape. A value may run over what was a name; that is the whole point.
func reparse(s string, shapes senderkind.Params, fn func(url.Values)) int {
	names := shapes.Names()
	starts := make([][]string, len(s)+1)
	for i := range s {
		for _, n := range names {
			if strings.HasPrefix(s[i:], n) {
				starts[i] = append(starts[i], n)
			}
		}
	}
	q := url.Values{}
	count := 0
	var walk func(pos int, last, lastVal string)
	walk = func(pos int, last, lastVal string) {
		if pos == len(s) {
			count++
			fn(q)
			return
		}
		for _, n := range starts[pos] {
			if n < last {
				continue
			}
			from := pos + len(n)
			for end := from; end <= len(s); end++ {
				if end < len(s) && len(starts[end]) == 0 {
					continue
				}
				v := s[from:end]
				if (n == last && v <= lastVal) || !shapes[n].Match(v) {
					continue
				}
				q[n] = append(q[n], v)
				walk(end, n, v)
				if q[n] = q[n][:len(q[n])-1]; len(q[n]) == 0 {
					delete(q, n)
				}
			}
		}
	}
	walk(0, "", "")
	return count
}

// signedParams is what Twilio signs of a form after the URL.
func signedParams(q url.Values) string {
	var b strings.Builder
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		vals := slices.Clone(q[k])
		slices.Sort(vals)
		for _, v := range slices.Compact(vals) {
			b.WriteString(k + v)
		}
	}
	return b.String()
}

// Every form Twilio's signature cannot tell from a genuine request's, and
// that the check accepts, names the same event, the same entity and the
// same account. The forms are every parse of the genuine request's signed
// string by the documented names; a part of its start moved into the URL's
// query is refused by the scheme. The requests include free text a texter
// or caller writes, made to look like parameters.
func TestTwilioReparsedFormsNameTheGenuineEvent(t *testing.T) {
	id := twilioIdentity(t)
	call := "AccountSid=" + twAC + "&ApiVersion=2010-04-01&CallSid=" + twCA + "&CallStatus=completed&CallbackSource=call-progress-events&Direction=outbound-api&From=%2B14158141829&FromZip=94103&SequenceNumber=3&SipResponseCode=200&Timestamp=Thu%2C+01+Jan+2026+00%3A00%3A00+%2B0000&To=%2B15558675310"
	for _, c := range []struct{ name, body string }{
		{"inbound SMS", "AccountSid=" + twAC + "&ApiVersion=2010-04-01&Body=Hello+%26+good+morning%21&From=%2B14158141829&MessageSid=" + twSM + "&NumMedia=0&SmsStatus=received&To=%2B15558675310"},
		{"message status callback", "AccountSid=" + twAC + "&ApiVersion=2010-04-01&From=%2B15558675310&MessageSid=" + twSM + "&MessageStatus=delivered&SmsSid=" + twSM + "&SmsStatus=delivered&To=%2B14158141829"},
		{"call status callback", call},
		{"call status callback, empty FromZip", strings.Replace(call, "FromZip=94103", "FromZip=", 1)},
		{"incoming call", "AccountSid=" + twAC + "&ApiVersion=2010-04-01&CallSid=" + twCA + "&CallStatus=ringing&Caller=sip%3Aalice%40example.com&Direction=inbound&From=sip%3Aalice%40example.com&To=%2B15558675310"},
		// The texter's words are parameters in the signed string.
		{"SMS spelling a call", "AccountSid=" + twAC + "&ApiVersion=2010-04-01&Body=xCallSid" + twCA + "CallStatuscompletedSequenceNumber7&From=%2B14158141829&FromZip=MessageSid&MessageSid=" + twSM + "&NumMedia=0&SmsStatus=received&To=%2B15558675310"},
		{"WhatsApp profile spelling a sequence", "AccountSid=" + twAC + "&ApiVersion=2010-04-01&Body=hi&From=whatsapp%3A%2B14158141829&MessageSid=" + twSM + "&NumMedia=0&ProfileName=JoeSequenceNumber5&SmsStatus=received&To=whatsapp%3A%2B15558675310&WaId=14158141829"},
		{"SMS spelling an account", "AccountSid=" + twAC + "&ApiVersion=2010-04-01&Body=AccountSid" + strings.Replace(twAC, "0", "9", 1) + "&From=%2B14158141829&MessageSid=" + twSM + "&SmsStatus=received&To=%2B15558675310"},
	} {
		t.Run(c.name, func(t *testing.T) {
			genuine, err := ExtractIdentity(id, Paths{}, nil, []byte(c.body))
			if err != nil {
				t.Fatalf("genuine request refused: %v", err)
			}
			want := genuine[0]
			q, _ := url.ParseQuery(c.body)
			s := signedParams(q)
			// The start of the parameters moved to the end of the URL's
			// query: the scheme refuses every such URL, since what moved
			// starts with AccountSid.
			for cut := 1; cut < len(s); cut++ {
				u := "https://hooks.example.com/hooks/twilio?tenant=acme" + s[:cut]
				if _, _, err := signature.TwilioSignedContent(u, []byte(c.body)); err == nil && reparse(s[cut:], id.Params, func(url.Values) {}) > 0 {
					t.Errorf("the scheme accepts the URL %s, and its rest parses", u)
				}
			}
			parses, accepted := 0, 0
			parses += reparse(s, id.Params, func(f url.Values) {
				evs, err := ExtractIdentity(id, Paths{}, nil, []byte(f.Encode()))
				if err != nil {
					return
				}
				accepted++
				ev := evs[0]
				if ev.EventID != want.EventID || ev.Entity != want.Entity || ev.Account != want.Account || ev.Type != want.Type {
					t.Errorf("%s verifies like the genuine request and names %s %s %s %s, not %s %s %s %s", f.Encode(), ev.EventID, ev.Type, ev.Entity, ev.Account, want.EventID, want.Type, want.Entity, want.Account)
				}
			})
			if accepted == 0 {
				t.Fatal("not even the genuine form was found")
			}
			t.Logf("%d forms with the genuine signature, %d accepted, all %s", parses, accepted, want.EventID)
		})
	}
}
