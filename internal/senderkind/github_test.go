package senderkind_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/senderkind"
	"github.com/hookledger/hookledger/internal/signature"
)

// GitHub's documented example (docs.github.com, "Validating webhook
// deliveries": secret "It's a Secret to Everybody", body "Hello, World!")
// verifies through the github kind with nothing configured but the secret;
// the SHA-1 header alone, a changed body and an unprefixed value do not.
func TestGitHubDocumentedExample(t *testing.T) {
	k, ok := senderkind.Builtin().Lookup(senderkind.GitHub)
	if !ok {
		t.Fatal("no github kind")
	}
	s, err := k.NewScheme(senderkind.Source{Name: "gh", Kind: senderkind.GitHub}, []string{"It's a Secret to Everybody"})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	req := func(name, value, body string) *signature.Request {
		r := &signature.Request{Method: "POST", Header: http.Header{}, Body: []byte(body)}
		r.Header.Set(name, value)
		return r
	}
	const sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	if err := s.Verify(req("X-Hub-Signature-256", sig, "Hello, World!"), now); err != nil {
		t.Fatalf("documented example refused: %v", err)
	}
	for name, r := range map[string]*signature.Request{
		"changed body": req("X-Hub-Signature-256", sig, "Hello, World?"),
		"no prefix":    req("X-Hub-Signature-256", sig[len("sha256="):], "Hello, World!"),
		"sha1 only":    req("X-Hub-Signature", "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59", "Hello, World!"),
	} {
		var ve *signature.Error
		if err := s.Verify(r, now); !errors.As(err, &ve) {
			t.Errorf("%s: %v, want a verification failure", name, err)
		}
	}
	// The kind is verify's github scheme, and an hmac block a source could
	// carry never reaches it (the config refuses one for this kind).
	o := k.Options(senderkind.Source{HMAC: &signature.HMACOptions{Header: "X-Hub-Signature", Algorithm: "sha1"}}, []string{"x"})
	if o.Kind != signature.KindGitHub || o.HMAC != nil {
		t.Fatalf("github options = %+v %+v", o, o.HMAC)
	}
	// Only the SHA-1 header: the refusal names GitHub and says why.
	err = s.Verify(req("X-Hub-Signature", "sha1=01dc10d0c83e72ed246219cdd91669667fe2ca59", "Hello, World!"), now)
	var ve *signature.Error
	if !errors.As(err, &ve) || ve.Reason != signature.ReasonMissing || !strings.Contains(ve.Msg, "github:") || !strings.Contains(ve.Msg, "SHA-1 is never accepted") {
		t.Fatalf("sha1 only: %v", err)
	}
}

// GitHub's contract is in the catalogue the vendors verb shows, with the
// figures GitHub documents.
func TestGitHubContract(t *testing.T) {
	r := senderkind.Builtin()
	c, ok := r.Contract(senderkind.GitHub)
	if !ok || c.AckTimeout != 10*time.Second || c.ManualResendWindow != 72*time.Hour || c.Retries != 0 || c.RetryWindow != 0 {
		t.Fatalf("github contract = %+v", c)
	}
	if ix, ok := r.Index().Lookup("GitHub"); !ok || ix.Name != "github" {
		t.Fatal("github is not in the index")
	}
}
