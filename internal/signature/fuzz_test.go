package signature

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// Fuzz targets for every parser of untrusted header input. `go test` runs
// the seeds; `go test -fuzz=FuzzX` explores.

func FuzzParseStripeSignature(f *testing.F) {
	for _, s := range []string{
		"t=1767225600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd",
		"t=1767225600,v1=aa,v1=bb,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
		"t=,v1=", "t=1,t=2", ",,,", "v1=zz", "t=99999999999999999999",
		"t=1767225600,v1=aa,v1=bb,v1=cc,v0=dd,v1=ee,v1=ff",
		"t=1767225600" + strings.Repeat(",v1=00", maxSignatures),
		"t=1767225600" + strings.Repeat(",v1=00", maxSignatures+1),
		"t=1767225600" + strings.Repeat(",v9=x", 40),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		sig, err := parseStripeSignature(v)
		if err == nil && sig.Timestamp < 0 {
			t.Fatalf("negative timestamp accepted from %q", v)
		}
		if err == nil && len(sig.V1) > maxSignatures {
			t.Fatalf("%d v1 entries accepted from %q", len(sig.V1), v)
		}
	})
}

func FuzzParseWebhookSignatures(f *testing.F) {
	for _, s := range []string{
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		"v1,AAAA v1a,BBBB v2,CCCC",
		"v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==",
		"v1", " ", "v1,=", "v1,,,",
		"v1,AAAA v1,BBBB v1,CCCC v1a,DDDD v1,EEEE",
		strings.Repeat("v1,AAAA ", maxSignatures),
		strings.Repeat("v1,AAAA ", maxSignatures+1),
		strings.Repeat("junk ", 40),
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		sigs, err := parseWebhookSignatures(v, WebhookSignatureHeader)
		if err != nil {
			return
		}
		if len(sigs) > maxSignatures {
			t.Fatalf("%d entries accepted from %q", len(sigs), v)
		}
		for _, s := range sigs {
			if (s.Version == "v1" || s.Version == "v1a") && s.Sig == nil {
				t.Fatalf("known version without signature bytes from %q", v)
			}
		}
	})
}

func FuzzHubSpotDecodeURI(f *testing.F) {
	for _, s := range []string{"https://h.example/p?a=%3A%2f%40", "%", "%%3A", "%3", "https://h.example/%E2%82%AC"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d := hubSpotDecodeURI(v)
		if len(d) > len(v) {
			t.Fatalf("decoding grew %q to %q", v, d)
		}
	})
}

func FuzzParseKlaviyoTimestamp(f *testing.F) {
	for _, s := range []string{"Thu, 01 Jan 2026 00:00:00 GMT", "2026-01-01T00:00:00+00:00", "1767225600", "1767225600000", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) { parseKlaviyoTimestamp(v) })
}

// FuzzVerify throws arbitrary header values at every scheme: none may
// panic, and none may accept a request whose signature headers were not
// produced with the secret.
func FuzzVerify(f *testing.F) {
	f.Add("t=1767225600,v1=00", "1767225600", "v1,AAAA", "Basic aG9va3VzZXI6cw==", []byte(testBody))
	f.Add("", "", "", "", []byte{})
	f.Add("t=1,v1=zz", "abc", "v1a,****", "Basic ***", []byte("[]"))
	// Lists of several wrong signatures, which must be refused like one.
	f.Add("t=1767225600,v1=00,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd,v0=11,v1=22", "1767225600",
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= v1,AAAA v1a,"+strings.Repeat("A", 86)+"== v2,BBBB", "", []byte(testBody))
	f.Add("t=1767225600"+strings.Repeat(",v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd", maxSignatures), "1767225600",
		strings.Repeat("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE= ", maxSignatures), "", []byte(testBody))
	schemes := make([]Scheme, 0, len(kindCases()))
	for _, kc := range kindCases() {
		schemes = append(schemes, mustNew(f, kc.opts))
	}
	f.Fuzz(func(t *testing.T, sig, ts, list, auth string, body []byte) {
		h := http.Header{}
		for _, name := range []string{stripeSignatureHeader, hubSpotSignatureV3Header, hubSpotSignatureHeader, klaviyoSignatureHeader, "X-Hub-Signature-256", "X-Shopify-Hmac-Sha256", "X-Signature"} {
			h.Set(name, sig)
		}
		for _, name := range []string{hubSpotTimestampHeader, klaviyoTimestampHeader, WebhookTimestampHeader, "X-Timestamp", hubSpotSignatureVersionHeader, WebhookIDHeader} {
			h.Set(name, ts)
		}
		h.Set(WebhookSignatureHeader, list)
		h.Set("Authorization", auth)
		req := &Request{Method: "POST", URL: "https://hooks.example.com/hooks/src?x=1", Header: h, Body: body}
		for i, s := range schemes {
			if err := s.Verify(req, t0); err == nil {
				t.Fatalf("scheme %d accepted forged headers sig=%q ts=%q list=%q auth=%q", i, sig, ts, list, auth)
			}
		}
	})
}

// FuzzVerifySignatureList builds signature lists for every scheme that takes
// one (Standard Webhooks v1 and v1a, Stripe v1) from a plan in which each
// byte picks an entry: a valid signature by a configured secret, one of the
// wrong kinds listCase.invalid makes, or an entry of an unknown version.
// extra is appended to the header as is. An oracle that parses the final
// header on its own and recomputes every configured secret's signature
// decides the outcome: the request may verify only if some entry is a
// valid signature, and within the cap a valid entry must not be reported
// as a mismatch.
func FuzzVerifySignatureList(f *testing.F) {
	for _, seed := range []struct {
		which uint8
		plan  []byte
		extra string
	}{
		{0, []byte{1}, ""},
		{0, []byte{1, 2}, ""},
		{0, []byte{1, 2, 3, 4, 5, 6, 7, 9, 10, 11}, ""},
		{0, []byte{1, 2, 3, 0}, ""},
		{1, []byte{1, 2}, ""},
		{1, []byte{3, 4, 5, 6, 1, 2}, ""},
		{1, []byte{3, 4, 8}, ""},
		{2, []byte{1, 2, 3, 4, 5, 6}, ""},
		{2, []byte{1, 2, 8}, " v1,AAAA"},
		{3, []byte{1}, ""},
		{3, []byte{1, 2, 3, 4}, ",v0=00"},
		{3, []byte{1, 2, 3, 0}, ""},
		{3, []byte{0}, "ab"},
		{0, bytes.Repeat([]byte{1, 2, 3, 4}, 4), ""},
		{3, append(bytes.Repeat([]byte{5}, maxSignatures), 0), ""},
		{2, bytes.Repeat([]byte{6, 7}, 20), " v1a,AAAA"},
	} {
		f.Add(seed.which, seed.plan, seed.extra)
	}
	cases := listCases()
	schemes := make([]Scheme, len(cases))
	for i, c := range cases {
		schemes[i] = mustNew(f, c.opts)
	}
	f.Fuzz(func(t *testing.T, which uint8, plan []byte, extra string) {
		i := int(which) % len(cases)
		c, s := cases[i], schemes[i]
		if len(plan) > 2*maxSignatures {
			plan = plan[:2*maxSignatures]
		}
		entries := make([]listEntry, 0, len(plan))
		for _, b := range plan {
			switch b % 8 {
			case 0:
				entries = append(entries, c.signers[int(b>>3)%len(c.signers)](c.content))
			case 7:
				entries = append(entries, listEntry{"v9", []byte{b}})
			default:
				entries = append(entries, c.invalid(int(b>>3)*4+int(b%8)))
			}
		}
		req := c.request(entries)
		hv := req.Header.Get(c.header) + extra
		req.Header.Set(c.header, hv)
		valid, n := c.oracle(hv, c.content)
		err := s.Verify(req, t0)
		if err == nil && !valid {
			t.Fatalf("%s: accepted %q, which holds no valid signature", c.name, hv)
		}
		if err == nil && n > maxSignatures {
			t.Fatalf("%s: accepted a list of %d entries", c.name, n)
		}
		var ve *Error
		if valid && errors.As(err, &ve) && ve.Reason == reasonMismatch {
			t.Fatalf("%s: %q holds a valid signature but was refused: %v", c.name, hv, err)
		}
	})
}
