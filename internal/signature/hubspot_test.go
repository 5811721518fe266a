package signature

import (
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"
)

type hubspotVector struct {
	Name      string `json:"name"`
	Version   string `json:"version"`
	Secret    string `json:"secret"`
	Method    string `json:"method"`
	URL       string `json:"url"`
	SignedURL string `json:"signed_url"`
	Body      string `json:"body"`
	Timestamp int64  `json:"timestamp"`
	Signature string `json:"signature"`
}

func loadHubSpotVectors(t testing.TB) []hubspotVector {
	t.Helper()
	raw, err := os.ReadFile("testdata/hubspot_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Generator string          `json:"generator"`
		Vectors   []hubspotVector `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Vectors) < 8 {
		t.Fatalf("only %d vectors in testdata", len(f.Vectors))
	}
	return f.Vectors
}

func (v hubspotVector) request() *Request {
	r := &Request{Method: v.Method, URL: v.URL, Header: map[string][]string{}, Body: []byte(v.Body)}
	if v.Version == HubSpotV3 {
		r.Header.Set(hubSpotSignatureV3Header, v.Signature)
		r.Header.Set(hubSpotTimestampHeader, strconv.FormatInt(v.Timestamp, 10))
	} else {
		r.Header.Set(hubSpotSignatureHeader, v.Signature)
		r.Header.Set(hubSpotSignatureVersionHeader, v.Version)
	}
	return r
}

// Vectors computed by HubSpot's official @hubspot/api-client (see
// testdata/README.md) must verify, and our Sign must reproduce them.
func TestHubSpotOracleVectors(t *testing.T) {
	for _, v := range loadHubSpotVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			if v.Version == HubSpotV3 && hubSpotDecodeURI(v.URL) != v.SignedURL {
				t.Fatalf("decoded URI %q, vector signed %q", hubSpotDecodeURI(v.URL), v.SignedURL)
			}
			if v.Version == HubSpotV2 && v.URL != v.SignedURL {
				t.Fatalf("v2 signs the URI as sent; vector differs")
			}
			s := mustNew(t, Options{Kind: KindHubSpot, Version: v.Version, Secrets: []string{"unrelated-secret", v.Secret}})
			now := time.UnixMilli(v.Timestamp).Add(2 * time.Second)
			if err := s.Verify(v.request(), now); err != nil {
				t.Fatalf("official vector refused: %v", err)
			}
			own := mustNew(t, Options{Kind: KindHubSpot, Version: v.Version, Secrets: []string{v.Secret}})
			if v.Version == HubSpotV1 || v.URL != "" {
				h, err := own.Sign(v.request(), time.UnixMilli(v.Timestamp), "")
				if err != nil {
					t.Fatal(err)
				}
				got := h.Get(hubSpotSignatureHeader)
				if v.Version == HubSpotV3 {
					got = h.Get(hubSpotSignatureV3Header)
				}
				if got != v.Signature {
					t.Fatalf("Sign = %s, official client = %s", got, v.Signature)
				}
			}
			tampered := v.request()
			tampered.Body = append(tampered.Body, ' ')
			wantReason(t, s.Verify(tampered, now), reasonMismatch)
		})
	}
}

// The examples printed in HubSpot's request-validation guides.
func TestHubSpotDocumentedExamples(t *testing.T) {
	const secret = "yyyyyyyy-yyyy-yyyy-yyyy-yyyyyyyyyyyy"
	// https://developers.hubspot.com/docs/faq/v2-request-validation
	v2 := mustNew(t, Options{Kind: KindHubSpot, Version: HubSpotV2, Secrets: []string{secret}})
	req := &Request{Method: "GET", URL: "https://www.example.com/webhook_uri", Header: map[string][]string{}}
	req.Header.Set(hubSpotSignatureHeader, "eee2dddcc73c94d699f5e395f4b9d454a069a6855fbfa152e91e88823087200e")
	req.Header.Set(hubSpotSignatureVersionHeader, "v2")
	if err := v2.Verify(req, t0); err != nil {
		t.Fatalf("documented v2 example refused: %v", err)
	}
	// https://developers.hubspot.com/docs/faq/v1-request-validation
	v1 := mustNew(t, Options{Kind: KindHubSpot, Version: HubSpotV1, Secrets: []string{secret}})
	req = &Request{Method: "POST", Header: map[string][]string{}, Body: []byte(`[{"eventId":1,"subscriptionId":12345,"portalId":62515,"occurredAt":1564113600000,"subscriptionType":"contact.creation","attemptNumber":0,"objectId":123,"changeSource":"CRM","changeFlag":"NEW","appId":54321}]`)}
	req.Header.Set(hubSpotSignatureHeader, "232db2615f3d666fe21a8ec971ac7b5402d33b9a925784df3ca654d05f4817de")
	req.Header.Set(hubSpotSignatureVersionHeader, "v1")
	if err := v1.Verify(req, t0); err != nil {
		t.Fatalf("documented v1 example refused: %v", err)
	}
}

// A pinned source never accepts another version, even a valid one.
func TestHubSpotPinnedVersion(t *testing.T) {
	const secret = "hs-client-secret-1"
	signedAs := func(version string) *Request {
		return signed(t, Options{Kind: KindHubSpot, Version: version, Secrets: []string{secret}}, t0)
	}
	for _, pinned := range []string{HubSpotV3, HubSpotV2, HubSpotV1} {
		s := mustNew(t, Options{Kind: KindHubSpot, Version: pinned, Secrets: []string{secret}})
		for _, sent := range []string{HubSpotV3, HubSpotV2, HubSpotV1} {
			err := s.Verify(signedAs(sent), t0)
			if sent == pinned {
				if err != nil {
					t.Errorf("pinned %s refused its own version: %v", pinned, err)
				}
				continue
			}
			wantReason(t, err, ReasonMissing)
		}
	}

	// HubSpot sends v1/v2 next to v3. A v3 source ignores them, and a bad
	// v3 signature is refused even when a valid v1 signature is present.
	s := mustNew(t, Options{Kind: KindHubSpot, Version: HubSpotV3, Secrets: []string{secret}})
	both := signedAs(HubSpotV3)
	for k, v := range signedAs(HubSpotV1).Header {
		both.Header[k] = v
	}
	if err := s.Verify(both, t0); err != nil {
		t.Fatalf("v3 with legacy headers alongside: %v", err)
	}
	both.Header.Set(hubSpotSignatureV3Header, "AAAA"+both.Header.Get(hubSpotSignatureV3Header)[4:])
	wantReason(t, s.Verify(both, t0), reasonMismatch)
}

func TestHubSpotV3Shapes(t *testing.T) {
	o := Options{Kind: KindHubSpot, Version: HubSpotV3, Secrets: []string{"hs-client-secret-1"}}
	s := mustNew(t, o)
	for _, c := range []struct {
		name   string
		mutate func(r *Request)
		reason Reason
	}{
		{"seconds not milliseconds", func(r *Request) { r.Header.Set(hubSpotTimestampHeader, strconv.FormatInt(t0.Unix(), 10)) }, reasonMismatch},
		{"non-numeric timestamp", func(r *Request) { r.Header.Set(hubSpotTimestampHeader, "yesterday") }, reasonTimestamp},
		{"not base64", func(r *Request) { r.Header.Set(hubSpotSignatureV3Header, "%%%") }, reasonMalformed},
		{"no URL known", func(r *Request) { r.URL = "" }, ReasonMissing},
		{"other URL", func(r *Request) { r.URL = "https://attacker.example/hooks/src?x=1" }, reasonMismatch},
		{"other method", func(r *Request) { r.Method = "PUT" }, reasonMismatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := signed(t, o, t0)
			c.mutate(r)
			wantReason(t, s.Verify(r, t0), c.reason)
		})
	}
}

func TestHubSpotDecodeURI(t *testing.T) {
	cases := map[string]string{
		"https://h.example/p":                         "https://h.example/p",
		"https://h.example/p?a=%3A%2F%3F%40%21%24":    "https://h.example/p?a=:/?@!$",
		"https://h.example/p?a=%27%28%29%2A%2C%3B":    "https://h.example/p?a='()*,;",
		"https://h.example/p?a=%3a%2f":                "https://h.example/p?a=:/",
		"https://h.example/p?a=%20%26%3D%2B%23%25%5B": "https://h.example/p?a=%20%26%3D%2B%23%25%5B",
		"https://h.example/p?a=%253A":                 "https://h.example/p?a=%253A",
		"https://h.example/p?a=%":                     "https://h.example/p?a=%",
		"https://h.example/p?a=%3":                    "https://h.example/p?a=%3",
		"https://h.example/p?e=%C3%A4":                "https://h.example/p?e=%C3%A4",
	}
	for in, want := range cases {
		if got := hubSpotDecodeURI(in); got != want {
			t.Errorf("HubSpotDecodeURI(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestHubSpotSignNeedsURL(t *testing.T) {
	for _, v := range []string{HubSpotV3, HubSpotV2} {
		s := mustNew(t, Options{Kind: KindHubSpot, Version: v, Secrets: []string{"s"}})
		_, err := s.Sign(&Request{Method: "POST"}, t0, "")
		var oe *OptionError
		if !errors.As(err, &oe) || oe.Field != "public_url" {
			t.Fatalf("%s: want public_url option error, got %v", v, err)
		}
	}
}
