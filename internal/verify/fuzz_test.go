package verify

import (
	"net/http"
	"testing"
)

// Fuzz targets for every parser of untrusted header input. `go test` runs
// the seeds; `go test -fuzz=FuzzX` explores.

func FuzzParseStripeSignature(f *testing.F) {
	for _, s := range []string{
		"t=1767225600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd",
		"t=1767225600,v1=aa,v1=bb,v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39",
		"t=,v1=", "t=1,t=2", ",,,", "v1=zz", "t=99999999999999999999",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		sig, err := ParseStripeSignature(v)
		if err == nil && sig.Timestamp < 0 {
			t.Fatalf("negative timestamp accepted from %q", v)
		}
	})
}

func FuzzParseWebhookSignatures(f *testing.F) {
	for _, s := range []string{
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
		"v1,AAAA v1a,BBBB v2,CCCC",
		"v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==",
		"v1", " ", "v1,=", "v1,,,",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		sigs, err := ParseWebhookSignatures(v)
		if err != nil {
			return
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
		d := HubSpotDecodeURI(v)
		if len(d) > len(v) {
			t.Fatalf("decoding grew %q to %q", v, d)
		}
	})
}

func FuzzParseKlaviyoTimestamp(f *testing.F) {
	for _, s := range []string{"Thu, 01 Jan 2026 00:00:00 GMT", "2026-01-01T00:00:00+00:00", "1767225600", "1767225600000", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) { ParseKlaviyoTimestamp(v) })
}

// FuzzVerify throws arbitrary header values at every scheme: none may
// panic, and none may accept a request whose signature headers were not
// produced with the secret.
func FuzzVerify(f *testing.F) {
	f.Add("t=1767225600,v1=00", "1767225600", "v1,AAAA", "Basic aG9va3VzZXI6cw==", []byte(testBody))
	f.Add("", "", "", "", []byte{})
	f.Add("t=1,v1=zz", "abc", "v1a,****", "Basic ***", []byte("[]"))
	schemes := make([]Scheme, 0, len(kindCases()))
	for _, kc := range kindCases() {
		schemes = append(schemes, mustNew(f, kc.opts))
	}
	f.Fuzz(func(t *testing.T, sig, ts, list, auth string, body []byte) {
		h := http.Header{}
		for _, name := range []string{StripeSignatureHeader, HubSpotSignatureV3Header, HubSpotSignatureHeader, KlaviyoSignatureHeader, "X-Hub-Signature-256", "X-Shopify-Hmac-Sha256", "X-Signature"} {
			h.Set(name, sig)
		}
		for _, name := range []string{HubSpotTimestampHeader, KlaviyoTimestampHeader, WebhookTimestampHeader, "X-Timestamp", HubSpotSignatureVersionHeader, WebhookIDHeader} {
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
