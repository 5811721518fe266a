package signature

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

// t0 is the fixed clock every test verifies against.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const testBody = `{"id":"evt_1","type":"customer.subscription.updated","data":{"object":{"id":"sub_123"}}}`

// kindCase is a valid configuration of each scheme, with a second secret
// for rotation tests.
type kindCase struct {
	name    string
	opts    Options
	rotated string // a second, valid secret of the same shape
	timed   bool   // the scheme signs a timestamp
}

func kindCases() []kindCase {
	return []kindCase{
		{name: "stripe", opts: Options{Kind: KindStripe, Secrets: []string{"whsec_primary_5b9c1e"}}, rotated: "whsec_rotated_77aa01", timed: true},
		{name: "hubspot-v3", opts: Options{Kind: KindHubSpot, Version: HubSpotV3, Secrets: []string{"hs-client-secret-1"}}, rotated: "hs-client-secret-2", timed: true},
		{name: "hubspot-v2", opts: Options{Kind: KindHubSpot, Version: HubSpotV2, Secrets: []string{"hs-client-secret-1"}}, rotated: "hs-client-secret-2"},
		{name: "hubspot-v1", opts: Options{Kind: KindHubSpot, Version: HubSpotV1, Secrets: []string{"hs-client-secret-1"}}, rotated: "hs-client-secret-2"},
		{name: "klaviyo", opts: Options{Kind: KindKlaviyo, Secrets: []string{"klaviyo-secret-0123456789"}}, rotated: "klaviyo-secret-abcdefghij", timed: true},
		{name: "standard-webhooks-v1", opts: Options{Kind: KindStandardWebhooks, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}, rotated: "whsec_dGhpcyBpcyBhIHNlY29uZCB0ZXN0IGtleSEh", timed: true},
		{name: "standard-webhooks-v1a", opts: Options{Kind: KindStandardWebhooks, Secrets: []string{testWhsk(1)}}, rotated: testWhsk(2), timed: true},
		{name: "pipedrive", opts: Options{Kind: KindPipedrive, Secrets: []string{"hookuser:s3cret-pass"}}, rotated: "hookuser:n3w-pass"},
		{name: "hmac-github", opts: Options{Kind: KindHMAC, Secrets: []string{"gh-webhook-secret"}, HMAC: &HMACOptions{Header: "X-Hub-Signature-256", Prefix: "sha256="}}, rotated: "gh-webhook-secret-2"},
		{name: "hmac-shopify", opts: Options{Kind: KindHMAC, Secrets: []string{"shpss_app_secret"}, HMAC: &HMACOptions{Header: "X-Shopify-Hmac-Sha256", Encoding: "base64"}}, rotated: "shpss_app_secret_2"},
		{name: "hmac-timestamped", opts: Options{Kind: KindHMAC, Secrets: []string{"in-house-secret"}, HMAC: &HMACOptions{Header: "X-Signature", Algorithm: "sha512", TimestampHeader: "X-Timestamp", TimestampUnit: "ms", Template: "{timestamp}.{method}.{url}.{body}"}}, rotated: "in-house-secret-2", timed: true},
	}
}

func newReq() *Request {
	return &Request{Method: http.MethodPost, URL: "https://hooks.example.com/hooks/src?x=1", Header: http.Header{}, Body: []byte(testBody)}
}

func mustNew(t testing.TB, o Options) Scheme {
	t.Helper()
	s, err := New(o)
	if err != nil {
		t.Fatalf("New(%s): %v", o.Kind, err)
	}
	return s
}

// signed returns a request signed by the scheme built from o at time at.
func signed(t testing.TB, o Options, at time.Time) *Request {
	t.Helper()
	req := newReq()
	h, err := mustNew(t, o).Sign(req, at, "msg_2Lq3bX")
	if err != nil {
		t.Fatalf("Sign: %v", err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	return req
}

func wantReason(t *testing.T, err error, r Reason) {
	t.Helper()
	var ve *Error
	if !errors.As(err, &ve) {
		t.Fatalf("want *Error with reason %s, got %v", r, err)
	}
	if ve.Reason != r {
		t.Fatalf("want reason %s, got %s (%v)", r, ve.Reason, err)
	}
}

// noLeak fails when err's text contains a secret or any header value that
// carries signature material.
func noLeak(t *testing.T, err error, secrets []string, req *Request) {
	t.Helper()
	if err == nil {
		return
	}
	msg := err.Error()
	for _, s := range secrets {
		if strings.Contains(msg, s) {
			t.Fatalf("error text contains a secret: %q", msg)
		}
		for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ':' || r == '_' }) {
			if len(part) >= 8 && strings.Contains(msg, part) {
				t.Fatalf("error text contains part of a secret: %q", msg)
			}
		}
	}
	for name, vals := range req.Header {
		for _, v := range vals {
			for _, piece := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '=' || r == ' ' }) {
				if len(piece) >= 16 && strings.Contains(msg, piece) {
					t.Fatalf("error text contains the value of %s: %q", name, msg)
				}
			}
		}
	}
}

func TestSignThenVerify(t *testing.T) {
	for _, kc := range kindCases() {
		t.Run(kc.name, func(t *testing.T) {
			req := signed(t, kc.opts, t0)
			if err := mustNew(t, kc.opts).Verify(req, t0.Add(30*time.Second)); err != nil {
				t.Fatalf("own signature refused: %v", err)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	for _, kc := range kindCases() {
		t.Run(kc.name, func(t *testing.T) {
			s := mustNew(t, kc.opts)
			secrets := append(append([]string{}, kc.opts.Secrets...), kc.rotated)
			check := func(t *testing.T, req *Request, now time.Time, r Reason) {
				t.Helper()
				err := s.Verify(req, now)
				wantReason(t, err, r)
				noLeak(t, err, secrets, req)
			}

			t.Run("tampered body", func(t *testing.T) {
				if kc.opts.Kind == KindPipedrive {
					t.Skip("pipedrive signs nothing: basic auth does not cover the body")
				}
				req := signed(t, kc.opts, t0)
				req.Body = []byte(strings.Replace(testBody, "sub_123", "sub_124", 1))
				check(t, req, t0, reasonMismatch)
			})
			t.Run("wrong secret", func(t *testing.T) {
				o := kc.opts
				o.Secrets = []string{kc.rotated}
				check(t, signed(t, o, t0), t0, reasonMismatch)
			})
			t.Run("rotation: second secret verifies", func(t *testing.T) {
				o := kc.opts
				o.Secrets = []string{kc.rotated}
				req := signed(t, o, t0)
				both := kc.opts
				both.Secrets = append(append([]string{}, kc.opts.Secrets...), kc.rotated)
				if err := mustNew(t, both).Verify(req, t0); err != nil {
					t.Fatalf("rotated secret refused: %v", err)
				}
			})
			t.Run("missing headers", func(t *testing.T) {
				base := signed(t, kc.opts, t0)
				for name := range base.Header {
					req := signed(t, kc.opts, t0)
					req.Header.Del(name)
					check(t, req, t0, ReasonMissing)
				}
				check(t, newReq(), t0, ReasonMissing)
			})
			t.Run("conflicting duplicate header", func(t *testing.T) {
				req := signed(t, kc.opts, t0)
				for name, v := range req.Header {
					req.Header[name] = append(v, v[0]+"0")
				}
				check(t, req, t0, reasonMalformed)
			})
			if !kc.timed {
				return
			}
			tol := DefaultTolerance(kc.opts.Kind)
			t.Run("stale", func(t *testing.T) {
				req := signed(t, kc.opts, t0)
				check(t, req, t0.Add(tol+time.Second), reasonTimestamp)
				if err := s.Verify(req, t0.Add(tol)); err != nil {
					t.Fatalf("at exactly the tolerance: %v", err)
				}
			})
			t.Run("future", func(t *testing.T) {
				req := signed(t, kc.opts, t0.Add(tol+time.Second))
				check(t, req, t0, reasonTimestamp)
				if err := s.Verify(signed(t, kc.opts, t0.Add(tol)), t0); err != nil {
					t.Fatalf("at exactly the tolerance: %v", err)
				}
			})
			t.Run("explicit tolerance", func(t *testing.T) {
				o := kc.opts
				o.Tolerance = 10 * time.Minute
				s2 := mustNew(t, o)
				req := signed(t, kc.opts, t0)
				if err := s2.Verify(req, t0.Add(9*time.Minute)); err != nil {
					t.Fatalf("within 10m: %v", err)
				}
				wantReason(t, s2.Verify(req, t0.Add(11*time.Minute)), reasonTimestamp)
			})
		})
	}
}

func TestNewValidation(t *testing.T) {
	cases := []struct {
		name  string
		opts  Options
		field string
		text  string
	}{
		{"no kind", Options{Secrets: []string{"x"}}, "kind", "is required"},
		{"unknown kind", Options{Kind: "svix", Secrets: []string{"x"}}, "kind", `unknown kind "svix"`},
		{"no secrets", Options{Kind: KindStripe}, "secrets", "at least one"},
		{"empty secret", Options{Kind: KindStripe, Secrets: []string{"a", ""}}, "secrets", "secret 2 is empty"},
		{"blank secret", Options{Kind: KindStripe, Secrets: []string{"whsec_live_7a1b2c3d4e5f", "   "}}, "secrets", "secret 2 is blank"},
		{"whitespace-only secret", Options{Kind: KindHMAC, Secrets: []string{"\t\r\n"}, HMAC: &HMACOptions{Header: "X"}}, "secrets", "secret 1 is blank"},
		{"trailing newline", Options{Kind: KindStripe, Secrets: []string{"whsec_live_7a1b2c3d4e5f\n"}}, "secrets", "secret 1 starts or ends with whitespace"},
		{"trailing CRLF", Options{Kind: KindKlaviyo, Secrets: []string{"klaviyo-secret-0123456789", "klaviyo-secret-abcdefghij\r\n"}}, "secrets", "secret 2 starts or ends with whitespace"},
		{"leading space", Options{Kind: KindHubSpot, Version: HubSpotV3, Secrets: []string{" 1f0c9e3a-7b2d-4c5e-9a8f-0d1e2f3a4b5c"}}, "secrets", "secret 1 starts or ends with whitespace"},
		{"sw trailing newline", Options{Kind: KindStandardWebhooks, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n"}}, "secrets", "secret 1 starts or ends with whitespace"},
		{"pipedrive trailing space", Options{Kind: KindPipedrive, Secrets: []string{"hookuser:s3cret-pass "}}, "secrets", "secret 1 starts or ends with whitespace"},
		{"negative tolerance", Options{Kind: KindStripe, Secrets: []string{"a"}, Tolerance: -time.Second}, "tolerance", "negative"},
		{"version on stripe", Options{Kind: KindStripe, Version: "v3", Secrets: []string{"a"}}, "version", "only kind hubspot"},
		{"hubspot no version", Options{Kind: KindHubSpot, Secrets: []string{"a"}}, "version", "pinned"},
		{"hubspot bad version", Options{Kind: KindHubSpot, Version: "v4", Secrets: []string{"a"}}, "version", `"v4"`},
		{"hubspot v2 tolerance", Options{Kind: KindHubSpot, Version: "v2", Secrets: []string{"a"}, Tolerance: time.Minute}, "tolerance", "no timestamp"},
		{"sw bad prefix", Options{Kind: KindStandardWebhooks, Secrets: []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "plain"}}, "secrets", "standard-webhooks secret 2 must start with whsec_ or whpk_"},
		{"sw bad base64", Options{Kind: KindStandardWebhooks, Secrets: []string{"whsec_***"}}, "secrets", "not valid base64"},
		{"sw short key", Options{Kind: KindStandardWebhooks, Secrets: []string{"whsec_c2hvcnQ="}}, "secrets", "decodes to 5 bytes"},
		{"sw bad whpk", Options{Kind: KindStandardWebhooks, Secrets: []string{"whpk_c2hvcnQ="}}, "secrets", "must decode to 32 bytes"},
		{"pipedrive no colon", Options{Kind: KindPipedrive, Secrets: []string{"userpass"}}, "secrets", "pipedrive secret 1 must be user:password"},
		{"pipedrive empty pass", Options{Kind: KindPipedrive, Secrets: []string{"user:"}}, "secrets", "both a user and a password"},
		{"pipedrive tolerance", Options{Kind: KindPipedrive, Secrets: []string{"u:p"}, Tolerance: time.Minute}, "tolerance", "no timestamp"},
		{"hmac without options", Options{Kind: KindHMAC, Secrets: []string{"a"}}, "hmac", "needs hmac options"},
		{"hmac options on stripe", Options{Kind: KindStripe, Secrets: []string{"a"}, HMAC: &HMACOptions{Header: "X"}}, "hmac", "only kind hmac"},
		{"hmac no header", Options{Kind: KindHMAC, Secrets: []string{"a"}, HMAC: &HMACOptions{}}, "hmac.header", "required"},
		{"hmac bad algorithm", Options{Kind: KindHMAC, Secrets: []string{"a"}, HMAC: &HMACOptions{Header: "X", Algorithm: "md5"}}, "hmac.algorithm", `"md5"`},
		{"hmac bad encoding", Options{Kind: KindHMAC, Secrets: []string{"a"}, HMAC: &HMACOptions{Header: "X", Encoding: "base32"}}, "hmac.encoding", `"base32"`},
		{"hmac bad unit", Options{Kind: KindHMAC, Secrets: []string{"a"}, HMAC: &HMACOptions{Header: "X", TimestampUnit: "us"}}, "hmac.timestamp_unit", `"us"`},
		{"hmac template no body", Options{Kind: KindHMAC, Secrets: []string{"a"}, HMAC: &HMACOptions{Header: "X", Template: "{timestamp}", TimestampHeader: "T"}}, "hmac.template", "{body} exactly once"},
		{"hmac template unknown", Options{Kind: KindHMAC, Secrets: []string{"a"}, HMAC: &HMACOptions{Header: "X", Template: "{id}.{body}"}}, "hmac.template", "{id}"},
		{"hmac template unclosed", Options{Kind: KindHMAC, Secrets: []string{"a"}, HMAC: &HMACOptions{Header: "X", Template: "{body"}}, "hmac.template", "unclosed"},
		{"hmac ts not signed", Options{Kind: KindHMAC, Secrets: []string{"a"}, HMAC: &HMACOptions{Header: "X", TimestampHeader: "T"}}, "hmac.template", "not signed"},
		{"hmac ts header missing", Options{Kind: KindHMAC, Secrets: []string{"a"}, HMAC: &HMACOptions{Header: "X", Template: "{timestamp}.{body}"}}, "hmac.timestamp_header", "required"},
		{"hmac tolerance without ts", Options{Kind: KindHMAC, Secrets: []string{"a"}, Tolerance: time.Minute, HMAC: &HMACOptions{Header: "X"}}, "tolerance", "only with"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := New(c.opts)
			var oe *OptionError
			if !errors.As(err, &oe) {
				t.Fatalf("want *OptionError, got %v", err)
			}
			if oe.Field != c.field || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("want field %q containing %q, got %q", c.field, c.text, err)
			}
			for _, s := range c.opts.Secrets {
				s = strings.TrimSpace(s)
				if len(s) > 4 && strings.Contains(err.Error(), s) {
					t.Fatalf("option error leaks a secret: %q", err)
				}
			}
		})
	}
}

func TestKindsAndDefaults(t *testing.T) {
	ks := kinds()
	if len(ks) != 13 {
		t.Fatalf("Kinds() = %v", ks)
	}
	ks[0] = "mutated"
	if kinds()[0] != KindStripe {
		t.Fatal("Kinds() shares its backing array")
	}
	for _, k := range kinds() {
		want := 5 * time.Minute
		switch k {
		case KindPipedrive, KindGitHub, KindShopify, KindTwilio, KindSquare:
			want = 0
		case KindMailgun:
			want = MailgunDefaultTolerance
		}
		if got := DefaultTolerance(k); got != want {
			t.Errorf("DefaultTolerance(%s) = %s, want %s", k, got, want)
		}
	}
	if DefaultTolerance("nope") != 0 {
		t.Error("unknown kind should have no tolerance")
	}
}

// A secret with whitespace at either end is refused for every kind, named by
// its position and never quoted: no sender signs with a pasted line ending,
// so such a source would refuse every delivery.
func TestSecretWhitespaceRefused(t *testing.T) {
	for _, kc := range kindCases() {
		for _, variant := range []struct{ secret, text string }{
			{kc.rotated + "\n", "secret 2 starts or ends with whitespace"},
			{kc.rotated + "\r\n", "secret 2 starts or ends with whitespace"},
			{"\t" + kc.rotated, "secret 2 starts or ends with whitespace"},
			{" " + kc.rotated + " ", "secret 2 starts or ends with whitespace"},
			{" ", "secret 2 is blank"},
			{"\n\n", "secret 2 is blank"},
		} {
			o := kc.opts
			o.Secrets = append(append([]string{}, kc.opts.Secrets...), variant.secret)
			_, err := New(o)
			var oe *OptionError
			if !errors.As(err, &oe) || oe.Field != "secrets" || !strings.Contains(err.Error(), variant.text) {
				t.Errorf("%s, secret %q: want a secrets error containing %q, got %v", kc.name, variant.secret, variant.text, err)
				continue
			}
			noLeak(t, err, append([]string{kc.rotated}, kc.opts.Secrets...), newReq())
		}
	}
}

// Stripe, HubSpot and Klaviyo publish no minimum secret length a receiver
// should enforce, so none is invented: a short secret that is not blank
// loads. Standard Webhooks does define one (see TestNewValidation).
func TestNoSecretMinimumWithoutVendorRule(t *testing.T) {
	for _, o := range []Options{
		{Kind: KindStripe, Secrets: []string{"k"}},
		{Kind: KindHubSpot, Version: HubSpotV3, Secrets: []string{"k"}},
		{Kind: KindHubSpot, Version: HubSpotV1, Secrets: []string{"k"}},
		{Kind: KindKlaviyo, Secrets: []string{"k"}},
		{Kind: KindHMAC, Secrets: []string{"k"}, HMAC: &HMACOptions{Header: "X-Signature"}},
		{Kind: KindPipedrive, Secrets: []string{"u:p"}},
	} {
		if _, err := New(o); err != nil {
			t.Errorf("%s %s: a short secret was refused: %v", o.Kind, o.Version, err)
		}
	}
}

// The scheme table is the one list of schemes: names are unique and
// non-empty, Kinds and DefaultTolerance read it, and only the schemes that
// declare an option take it, which New's refusals name from the table.
func TestSchemeTable(t *testing.T) {
	seen := map[string]bool{}
	for i, d := range schemes {
		if d.name == "" || seen[d.name] || d.build == nil {
			t.Fatalf("scheme %d: name %q (seen %v), build set %v", i, d.name, seen[d.name], d.build != nil)
		}
		seen[d.name] = true
		if kinds()[i] != d.name || DefaultTolerance(d.name) != d.tolerance {
			t.Errorf("%s: Kinds or DefaultTolerance disagree with the table", d.name)
		}
	}
	_, err := New(Options{Kind: KindSlack, Secrets: []string{"a"}, HMAC: &HMACOptions{Header: "X"}})
	if err == nil || err.Error() != "hmac: only kind hmac takes hmac options" {
		t.Errorf("hmac options on slack: %v", err)
	}
	_, err = New(Options{Kind: "nope", Secrets: []string{"a"}, Version: "v3"})
	if err == nil || err.Error() != "version: only kind hubspot takes a version" {
		t.Errorf("a version on an unknown scheme: %v", err)
	}
}
