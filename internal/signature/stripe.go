package signature

import (
	"crypto/hmac"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KindStripe is the scheme's name, as Options.Kind takes it.
const KindStripe = "stripe"

// stripeScheme is Stripe's Stripe-Signature. Stripe's libraries accept a
// signed timestamp up to five minutes old.
var stripeScheme = schemeDef{
	name: KindStripe, tolerance: 5 * time.Minute,
	build: func(o Options, tol time.Duration) (Scheme, error) { return newStripe(o.Secrets, tol), nil },
}

// stripeSignatureHeader carries "t=<unix seconds>,v1=<hex>[,v1=<hex>...]".
const stripeSignatureHeader = "Stripe-Signature"

// stripe verifies Stripe's v1 scheme: HMAC-SHA256 keyed with the endpoint
// secret (the whsec_... string used as is) over "<t>.<body>", hex encoded.
type stripe struct {
	secrets [][]byte
	tol     time.Duration
	// onCrypto, set only by tests, is called once per HMAC computed, so a
	// test can count the work a request costs instead of timing it.
	onCrypto func()
}

func newStripe(secrets []string, tol time.Duration) *stripe {
	s := &stripe{tol: tol}
	for _, sec := range secrets {
		s.secrets = append(s.secrets, []byte(sec))
	}
	return s
}

// stripeSignature is a parsed Stripe-Signature header.
type stripeSignature struct {
	Timestamp int64
	// V1 holds the decoded v1 signatures; Stripe sends one per active
	// secret while a secret is being rolled. Other schemes (v0) are ignored.
	V1 [][]byte
}

// parseStripeSignature parses a Stripe-Signature header value. Entries it
// does not know are skipped, as Stripe asks; a missing or repeated t=, a v1
// value that is not hex, and more than 16 signature entries of any scheme
// (see maxSignatures) are errors.
func parseStripeSignature(v string) (stripeSignature, error) {
	// Counted before anything is decoded. Stripe sends one v1 per active
	// secret while a secret is rolled, and may add a signature of another
	// scheme next to each; every key other than t counts.
	n := 0
	for item := range strings.SplitSeq(v, ",") {
		if k, _, ok := strings.Cut(strings.TrimSpace(item), "="); ok && k != "t" {
			n++
		}
	}
	if n > maxSignatures {
		return stripeSignature{}, failf(reasonMalformed, "stripe: %s holds %d signature entries; at most %d are accepted", stripeSignatureHeader, n, maxSignatures)
	}
	var sig stripeSignature
	seenT := false
	for _, item := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			if seenT {
				return stripeSignature{}, failf(reasonMalformed, "stripe: %s has more than one t=", stripeSignatureHeader)
			}
			seenT = true
			t, err := strconv.ParseInt(val, 10, 64)
			if err != nil || t < 0 {
				return stripeSignature{}, failf(reasonTimestamp, "stripe: %s t= is not a unix time in seconds", stripeSignatureHeader)
			}
			sig.Timestamp = t
		case "v1":
			b, err := hex.DecodeString(val)
			if err != nil {
				return stripeSignature{}, failf(reasonMalformed, "stripe: %s has a v1 value that is not hex", stripeSignatureHeader)
			}
			sig.V1 = append(sig.V1, b)
		}
	}
	if !seenT {
		return stripeSignature{}, failf(reasonMalformed, "stripe: %s has no t= timestamp", stripeSignatureHeader)
	}
	return sig, nil
}

func (s *stripe) Verify(req *Request, now time.Time) error {
	v, ok, herr := header(req.Header, stripeSignatureHeader, "stripe")
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "stripe: %s header is missing", stripeSignatureHeader)
	}
	sig, err := parseStripeSignature(v)
	if err != nil {
		return err
	}
	if len(sig.V1) == 0 {
		// Stripe may add schemes later; only v1 is trusted, so a header
		// with only v0 (or anything else) is refused, never downgraded.
		return failf(ReasonMissing, "stripe: %s has no v1 signature", stripeSignatureHeader)
	}
	ts := strconv.FormatInt(sig.Timestamp, 10)
	matched := false
	for _, key := range s.secrets {
		if s.onCrypto != nil {
			s.onCrypto()
		}
		want := hmacSHA256(key, []byte(ts), []byte{'.'}, req.Body)
		for _, got := range sig.V1 {
			if hmac.Equal(want, got) {
				matched = true
			}
		}
	}
	if !matched {
		return failf(reasonMismatch, "stripe: no v1 signature matches any configured secret")
	}
	// The timestamp is checked after the signature so that a stale but
	// authentic delivery is reported as a timestamp problem (clock skew,
	// a replay), not as a forgery.
	if e := checkWindow("stripe", time.Unix(sig.Timestamp, 0), now, s.tol); e != nil {
		return e
	}
	return nil
}

func (s *stripe) Sign(req *Request, now time.Time, _ string) (http.Header, error) {
	ts := strconv.FormatInt(now.Unix(), 10)
	mac := hmacSHA256(s.secrets[0], []byte(ts), []byte{'.'}, req.Body)
	h := http.Header{}
	h.Set(stripeSignatureHeader, "t="+ts+",v1="+hex.EncodeToString(mac))
	return h, nil
}
