package signature

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// The schemes whose header carries a list of signatures (Standard Webhooks
// webhook-signature, Stripe-Signature) are tested here: a list verifies only
// when one of its entries is a valid signature, and a list costs one MAC per
// secret however many entries it holds. The signatures are computed here
// from the documented constructions, not with the schemes' Sign.

// listEntry is one signature of a list before encoding.
type listEntry struct {
	version string // v1 or v1a
	sig     []byte
}

type listCase struct {
	name string
	opts Options
	// header names the list header, as error messages must.
	header string
	// content is the exact bytes the request built by request signs.
	content []byte
	// signers hold one signer per configured secret, in configuration
	// order; stranger signs with a secret of the same shape that is not
	// configured.
	signers  []func(content []byte) listEntry
	stranger func(content []byte) listEntry
	request  func(entries []listEntry) *Request
	// oracle reports whether the list header value v holds an entry that
	// is a valid signature of content under a configured secret. It parses
	// v on its own, as the vendor documents the list, so that fuzzing can
	// check the schemes against it.
	oracle func(v string, content []byte) (valid bool, entries int)
	// macKeys and edKeys count the configured HMAC and ed25519 keys, for
	// the work a list may cost.
	macKeys, edKeys int
}

const listMsgID = "msg_2Lq3bXlist"

func swHMACSigner(secret string) func([]byte) listEntry {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		panic(err)
	}
	return func(content []byte) listEntry {
		m := hmac.New(sha256.New, key)
		m.Write(content)
		return listEntry{"v1", m.Sum(nil)}
	}
}

func swEd25519Signer(seed byte) func([]byte) listEntry {
	priv := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize))
	return func(content []byte) listEntry { return listEntry{"v1a", ed25519.Sign(priv, content)} }
}

func stripeSigner(secret string) func([]byte) listEntry {
	return func(content []byte) listEntry {
		m := hmac.New(sha256.New, []byte(secret))
		m.Write(content)
		return listEntry{"v1", m.Sum(nil)}
	}
}

// swListRequest is a Standard Webhooks request at t0 whose webhook-signature
// holds entries.
func swListRequest(entries []listEntry) *Request {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.version + "," + base64.StdEncoding.EncodeToString(e.sig)
	}
	return swReq(listMsgID, t0, strings.Join(parts, " "), []byte(testBody))
}

func stripeListRequest(entries []listEntry) *Request {
	parts := []string{"t=" + strconv.FormatInt(t0.Unix(), 10)}
	for _, e := range entries {
		parts = append(parts, e.version+"="+hex.EncodeToString(e.sig))
	}
	return stripeReq(strings.Join(parts, ","), []byte(testBody))
}

const (
	listWhsec2 = "whsec_dGhpcyBpcyBhIHNlY29uZCB0ZXN0IGtleSEh"
	listWhsec3 = "whsec_CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk="
)

func listCases() []listCase {
	swContent := []byte(listMsgID + "." + strconv.FormatInt(t0.Unix(), 10) + "." + testBody)
	stripeContent := []byte(strconv.FormatInt(t0.Unix(), 10) + "." + testBody)
	return []listCase{
		{
			name:     "standard-webhooks v1",
			header:   WebhookSignatureHeader,
			content:  swContent,
			opts:     Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret, listWhsec2}},
			signers:  []func([]byte) listEntry{swHMACSigner(swSecret), swHMACSigner(listWhsec2)},
			stranger: swHMACSigner(listWhsec3),
			request:  swListRequest,
			macKeys:  2,
			oracle:   swOracle([]string{swSecret, listWhsec2}, nil),
		},
		{
			name:     "standard-webhooks v1a",
			header:   WebhookSignatureHeader,
			content:  swContent,
			opts:     Options{Kind: KindStandardWebhooks, Secrets: []string{testWhpk(1), testWhpk(2)}},
			signers:  []func([]byte) listEntry{swEd25519Signer(1), swEd25519Signer(2)},
			stranger: swEd25519Signer(3),
			request:  swListRequest,
			edKeys:   2,
			oracle:   swOracle(nil, []byte{1, 2}),
		},
		{
			name:     "standard-webhooks v1 and v1a",
			header:   WebhookSignatureHeader,
			content:  swContent,
			opts:     Options{Kind: KindStandardWebhooks, Secrets: []string{swSecret, testWhpk(1)}},
			signers:  []func([]byte) listEntry{swHMACSigner(swSecret), swEd25519Signer(1)},
			stranger: swEd25519Signer(3),
			request:  swListRequest,
			macKeys:  1,
			edKeys:   1,
			oracle:   swOracle([]string{swSecret}, []byte{1}),
		},
		{
			name:     "stripe v1",
			header:   stripeSignatureHeader,
			content:  stripeContent,
			opts:     Options{Kind: KindStripe, Secrets: []string{stripeSecret, "whsec_test_rotated_91c2d4e8"}},
			signers:  []func([]byte) listEntry{stripeSigner(stripeSecret), stripeSigner("whsec_test_rotated_91c2d4e8")},
			stranger: stripeSigner("whsec_test_unrelated_5a7b3c"),
			request:  stripeListRequest,
			macKeys:  2,
			oracle:   stripeOracle(stripeSecret, "whsec_test_rotated_91c2d4e8"),
		},
	}
}

// swOracle checks a webhook-signature value against whsec_ secrets and the
// public keys of ed25519 seeds.
func swOracle(whsec []string, seeds []byte) func(string, []byte) (bool, int) {
	return func(v string, content []byte) (bool, int) {
		valid := false
		fields := strings.Fields(v)
		for _, f := range fields {
			version, b64, ok := strings.Cut(f, ",")
			if !ok {
				continue
			}
			sig, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				continue
			}
			switch version {
			case "v1":
				for _, sec := range whsec {
					if bytes.Equal(swHMACSigner(sec)(content).sig, sig) {
						valid = true
					}
				}
			case "v1a":
				for _, seed := range seeds {
					pub := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize)).Public().(ed25519.PublicKey)
					if len(sig) == ed25519.SignatureSize && ed25519.Verify(pub, content, sig) {
						valid = true
					}
				}
			}
		}
		return valid, len(fields)
	}
}

// stripeOracle checks a Stripe-Signature value's v1 entries against
// secrets.
func stripeOracle(secrets ...string) func(string, []byte) (bool, int) {
	return func(v string, content []byte) (bool, int) {
		valid, n := false, 0
		for _, item := range strings.Split(v, ",") {
			k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
			if !ok || k == "t" {
				continue
			}
			n++
			sig, err := hex.DecodeString(val)
			if k != "v1" || err != nil {
				continue
			}
			for _, sec := range secrets {
				if bytes.Equal(stripeSigner(sec)(content).sig, sig) {
					valid = true
				}
			}
		}
		return valid, n
	}
}

// invalid returns the i-th wrong entry: a secret that is not configured, a
// configured secret over other bytes, a valid signature with one bit
// flipped, and bytes of the right length that were never a signature.
func (c listCase) invalid(i int) listEntry {
	sign := c.signers[i%len(c.signers)]
	switch i % 4 {
	case 0:
		return c.stranger(c.content)
	case 1:
		return sign(append([]byte("other."), c.content...))
	case 2:
		e := sign(c.content)
		e.sig[i%len(e.sig)] ^= 0x01
		return e
	default:
		e := sign(c.content)
		for j := range e.sig {
			e.sig[j] = byte(i*31 + j*7)
		}
		return e
	}
}

func (c listCase) invalidList(n int) []listEntry {
	out := make([]listEntry, n)
	for i := range out {
		out[i] = c.invalid(i)
	}
	return out
}

func (c listCase) secrets() []string {
	return append([]string{swSecret, listWhsec2, listWhsec3, stripeSecret}, c.opts.Secrets...)
}

// countCrypto makes s count every MAC it computes and every signature it
// checks, and returns the counter.
func countCrypto(t *testing.T, s Scheme) *int {
	t.Helper()
	n := new(int)
	switch v := s.(type) {
	case *standardWebhooks:
		v.onCrypto = func() { *n++ }
	case *stripe:
		v.onCrypto = func() { *n++ }
	default:
		t.Fatalf("%T has no crypto counter", s)
	}
	return n
}

// A list in which no entry is a valid signature is refused, whatever its
// length: one entry, two, or as many as the cap allows.
func TestSignatureListWithoutValidEntryIsRefused(t *testing.T) {
	for _, c := range listCases() {
		s := mustNew(t, c.opts)
		for _, n := range []int{1, 2, 3, 7, maxSignatures} {
			t.Run(fmt.Sprintf("%s/%d entries", c.name, n), func(t *testing.T) {
				req := c.request(c.invalidList(n))
				err := s.Verify(req, t0)
				wantReason(t, err, reasonMismatch)
				noLeak(t, err, c.secrets(), req)
			})
		}
	}
}

// Every entry but one wrong: the list verifies wherever the valid entry is,
// and with whichever configured secret made it.
func TestSignatureListWithOneValidEntryIsAccepted(t *testing.T) {
	for _, c := range listCases() {
		s := mustNew(t, c.opts)
		for _, n := range []int{1, 2, maxSignatures} {
			for k, sign := range c.signers {
				for _, at := range []int{n - 1, 0} {
					entries := c.invalidList(n)
					entries[at] = sign(c.content)
					if err := s.Verify(c.request(entries), t0); err != nil {
						t.Errorf("%s: %d entries, secret %d valid at %d: %v", c.name, n, k+1, at, err)
					}
				}
			}
		}
	}
}

// A list longer than the cap is refused before any signature work, even when
// it holds a valid entry, with an error naming the header and the cap.
func TestSignatureListOverCapIsRefused(t *testing.T) {
	for _, c := range listCases() {
		// Literal numbers: the documented cap is 16, and a test written
		// against the constant would follow it wherever it moved.
		for _, n := range []int{17, 7900} {
			t.Run(fmt.Sprintf("%s/%d entries", c.name, n), func(t *testing.T) {
				s := mustNew(t, c.opts)
				ops := countCrypto(t, s)
				entries := c.invalidList(n)
				entries[n-1] = c.signers[0](c.content)
				req := c.request(entries)
				err := s.Verify(req, t0)
				wantReason(t, err, reasonMalformed)
				noLeak(t, err, c.secrets(), req)
				for _, want := range []string{c.header, strconv.Itoa(n) + " ", "at most 16"} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not name %q", err, want)
					}
				}
				if *ops != 0 {
					t.Errorf("%d MACs or signature checks for a list refused by its length", *ops)
				}
			})
		}
	}
}

// A full list costs one MAC per configured HMAC secret, not one per entry
// and secret; ed25519 entries cannot share work, so for them the cap bounds
// the cost.
func TestSignatureListCostsOneMACPerSecret(t *testing.T) {
	for _, c := range listCases() {
		t.Run(c.name, func(t *testing.T) {
			s := mustNew(t, c.opts)
			ops := countCrypto(t, s)
			entries := c.invalidList(maxSignatures)
			wantReason(t, s.Verify(c.request(entries), t0), reasonMismatch)
			want, v1 := 0, false
			for _, e := range entries {
				switch {
				case e.version == "v1":
					v1 = true
				case e.version == "v1a" && len(e.sig) == ed25519.SignatureSize:
					want += c.edKeys
				}
			}
			if v1 {
				want += c.macKeys
			}
			if *ops != want {
				t.Fatalf("%d entries cost %d MACs and signature checks, want %d (%d HMAC keys, %d ed25519 keys)", len(entries), *ops, want, c.macKeys, c.edKeys)
			}
			if c.macKeys > 0 && c.edKeys == 0 && *ops != c.macKeys {
				t.Fatalf("%d MACs for %d secrets", *ops, c.macKeys)
			}
		})
	}
}
