package senderkind_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/vendors"
)

// The built-in kinds keep their names and order (the config's "one of ..."
// message lists them in this order), and each existing kind uses the
// verify scheme of its own name.
func TestBuiltinNames(t *testing.T) {
	r := senderkind.Builtin()
	want := []string{"stripe", "hubspot", "klaviyo", "standard-webhooks", "pipedrive", "hmac"}
	if got := r.Names(); !slices.Equal(got[:len(want)], want) {
		t.Fatalf("names = %v, want %v first", got, want)
	}
	// The whole list, which the config's message and envelope.Kinds
	// follow; a new kind is appended here.
	all := append(slices.Clone(want), "github", "shopify", "slack", "twilio", "paddle", "square", "mailgun")
	if got := r.Names(); !slices.Equal(got, all) {
		t.Fatalf("names = %v, want %v", got, all)
	}
	for _, name := range want {
		k, ok := r.Lookup(name)
		if !ok || k.Scheme.Name != name {
			t.Errorf("%s: scheme %q, want the scheme of the same name", name, k.Scheme.Name)
		}
	}
	if _, ok := r.Lookup("Stripe"); ok {
		t.Error("lookup is case-sensitive, as the config is")
	}
}

// A registry cannot be changed through what it hands out.
func TestRegistryIsImmutable(t *testing.T) {
	r := senderkind.Builtin()
	names := r.Names()
	names[0] = "changed"
	kinds := r.Kinds()
	kinds[0].Name = "changed"
	kinds[0].Keep = nil
	if k, ok := r.Lookup("stripe"); !ok || r.Names()[0] != "stripe" || k.Keep[0] != "Stripe-Account" {
		t.Fatal("the registry changed through a returned slice")
	}
}

func TestNewRefusesBadKinds(t *testing.T) {
	ok := senderkind.Kind{Name: "a", Scheme: senderkind.Scheme{Name: signature.KindHMAC}}
	for name, kinds := range map[string][]senderkind.Kind{
		"no name":             {{Scheme: ok.Scheme}},
		"no scheme":           {{Name: "a"}},
		"duplicate":           {ok, ok},
		"unknown vendor":      {{Name: "a", Scheme: ok.Scheme, Vendor: "no-such-vendor"}},
		"vendor and contract": {{Name: "a", Scheme: ok.Scheme, Vendor: "stripe", Contract: &vendors.Contract{Name: "x"}}},
	} {
		if _, err := senderkind.New(kinds...); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := senderkind.New(ok); err != nil {
		t.Fatalf("a minimal kind: %v", err)
	}
}

// Every kind's placeholder secret is one its scheme accepts, so the
// operator verbs can validate a config whose secrets are unset.
func TestPlaceholderSecretsBuildSchemes(t *testing.T) {
	for _, k := range senderkind.Builtin().Kinds() {
		src := senderkind.Source{Name: "s", Kind: k.Name}
		if len(k.Scheme.Versions) > 0 {
			src.Version = k.Scheme.Versions[0]
		}
		if k.Scheme.HMAC {
			src.HMAC = &signature.HMACOptions{Header: "X-Signature", Algorithm: "sha256", Encoding: "hex"}
		}
		if _, err := k.NewScheme(src, []string{k.Scheme.Placeholder}); err != nil {
			t.Errorf("%s: placeholder refused: %v", k.Name, err)
		}
	}
}

// The kept headers are the ones each kind kept before the registry, plus
// the svix set for standard-webhooks; no kind keeps a signature.
func TestKeptHeaders(t *testing.T) {
	r := senderkind.Builtin()
	base := []string{"Content-Type", "User-Agent"}
	for name, want := range map[string][]string{
		"stripe":            {"Stripe-Account"},
		"hubspot":           {"X-HubSpot-Request-Timestamp", "X-HubSpot-Signature-Version"},
		"klaviyo":           {"Klaviyo-Timestamp", "Klaviyo-Webhook-Id"},
		"standard-webhooks": {"Webhook-Id", "Webhook-Timestamp", "Svix-Id", "Svix-Timestamp"},
		"pipedrive":         nil,
		"hmac":              nil,
	} {
		k, _ := r.Lookup(name)
		if got := k.KeptHeaders(senderkind.Source{Kind: name}); !slices.Equal(got, append(slices.Clone(base), want...)) {
			t.Errorf("%s keeps %v, want %v", name, got, append(base, want...))
		}
	}
	hm, _ := r.Lookup("hmac")
	got := hm.KeptHeaders(senderkind.Source{HMAC: &signature.HMACOptions{TimestampHeader: "X-Timestamp"}})
	if !slices.Contains(got, "X-Timestamp") {
		t.Errorf("hmac with a timestamp header keeps %v", got)
	}
	for _, k := range r.Kinds() {
		for _, h := range k.KeptHeaders(senderkind.Source{}) {
			if strings.Contains(strings.ToLower(h), "signature") && !strings.HasSuffix(h, "-Version") {
				t.Errorf("%s keeps %s", k.Name, h)
			}
		}
	}
}

// Contracts resolve from the catalogue for the kinds that name one, with
// the mapping lint --config used before the registry; generic kinds have
// none.
func TestContracts(t *testing.T) {
	r := senderkind.Builtin()
	for kind, want := range map[string]string{
		"stripe": "stripe", "hubspot": "hubspot-app", "klaviyo": "klaviyo-system", "pipedrive": "pipedrive",
		"standard-webhooks": "", "hmac": "",
	} {
		c, ok := r.Contract(kind)
		if ok != (want != "") || c.Name != want {
			t.Errorf("%s: contract %q (%v), want %q", kind, c.Name, ok, want)
		}
	}
	// The catalogue the vendors verb shows holds every vendor contract and
	// every contract a kind declares.
	names := r.VendorNames()
	for _, n := range vendors.Names() {
		if !slices.Contains(names, n) {
			t.Errorf("catalogue lost %s", n)
		}
	}
	for _, k := range r.Kinds() {
		if k.Contract != nil && !slices.Contains(names, k.Contract.Name) {
			t.Errorf("catalogue lacks %s's contract", k.Name)
		}
		if _, ok := r.Index().Lookup(k.Vendor); k.Vendor != "" && !ok {
			t.Errorf("index lacks %s", k.Vendor)
		}
	}
}

// Kind options: the source's own settings reach the scheme, and a kind
// that pins hmac options ignores nothing but the pinned ones.
func TestOptions(t *testing.T) {
	r := senderkind.Builtin()
	tol := 2 * time.Minute
	k, _ := r.Lookup("hubspot")
	o := k.Options(senderkind.Source{Version: "v2", Tolerance: &tol}, []string{"s"})
	if o.Kind != signature.KindHubSpot || o.Version != "v2" || o.Tolerance != tol || o.Secrets[0] != "s" {
		t.Fatalf("hubspot options = %+v", o)
	}
	pinned := senderkind.Kind{Name: "x", Scheme: senderkind.Scheme{Name: signature.KindHMAC, Pin: &signature.HMACOptions{Header: "X-Pinned"}}}
	o = pinned.Options(senderkind.Source{HMAC: &signature.HMACOptions{Header: "X-Mine"}}, []string{"s"})
	if o.HMAC == nil || o.HMAC.Header != "X-Pinned" {
		t.Fatalf("pinned options = %+v", o.HMAC)
	}
	o.HMAC.Header = "changed"
	if pinned.Scheme.Pin.Header != "X-Pinned" {
		t.Fatal("options share the kind's pin")
	}
}

func TestSignHeaderSets(t *testing.T) {
	sw, _ := senderkind.Builtin().Lookup("standard-webhooks")
	if hs, ok := sw.Sign.HeaderSet(""); !ok || hs.Name != "webhook" {
		t.Errorf("default set = %+v", hs)
	}
	if hs, ok := sw.Sign.HeaderSet("svix"); !ok || hs.ID != "svix-id" {
		t.Errorf("svix set = %+v", hs)
	}
	if _, ok := sw.Sign.HeaderSet("other"); ok {
		t.Error("unknown set accepted")
	}
	st, _ := senderkind.Builtin().Lookup("stripe")
	if _, ok := st.Sign.HeaderSet(""); ok {
		t.Error("stripe has header sets")
	}
}

// The tolerance a kind states is the one its scheme applies by default,
// and none for the senders that sign no timestamp.
func TestToleranceDefaults(t *testing.T) {
	r := senderkind.Builtin()
	for name, want := range map[string]time.Duration{
		"stripe": 5 * time.Minute, "hubspot": 5 * time.Minute, "klaviyo": 5 * time.Minute,
		"standard-webhooks": 5 * time.Minute, "hmac": 5 * time.Minute, "pipedrive": 0, "github": 0,
		"shopify": 0, "slack": 5 * time.Minute, "twilio": 0, "paddle": 5 * time.Minute, "square": 0,
	} {
		k, ok := r.Lookup(name)
		if !ok || k.Tolerance != want {
			t.Errorf("%s: tolerance %s, want %s", name, k.Tolerance, want)
		}
		if want != 0 && signature.DefaultTolerance(k.Scheme.Name) != want {
			t.Errorf("%s: the scheme's default is %s", name, signature.DefaultTolerance(k.Scheme.Name))
		}
	}
}

// A source's extra_params reach its own identity only: the kind's set,
// shared by every source of the kind, is not changed.
func TestIdentityForKeepsTheKindsParams(t *testing.T) {
	r := senderkind.Builtin()
	k, _ := r.Lookup(senderkind.Twilio)
	one := k.IdentityFor(senderkind.Source{ExtraParams: []string{"ChannelRegion", "ConversationSid"}})
	other := k.IdentityFor(senderkind.Source{})
	if _, ok := one.Params["ChannelRegion"]; !ok {
		t.Fatal("the source's extra parameter is missing")
	}
	if s := one.Params["ConversationSid"]; s.Text() || s.Match("CH01") {
		t.Fatal("an extra name ending in Sid does not hold a SID")
	}
	for name, ps := range map[string]senderkind.Params{"kind": k.Identity.Params, "other source": other.Params} {
		if _, ok := ps["ChannelRegion"]; ok {
			t.Fatalf("%s gained another source's extra parameter", name)
		}
	}
	if s, _ := r.Lookup(senderkind.Stripe); s.IdentityFor(senderkind.Source{ExtraParams: []string{"x"}}).Params != nil {
		t.Fatal("a JSON kind got a parameter set")
	}
}
