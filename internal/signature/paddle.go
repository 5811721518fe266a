package signature

import (
	"crypto/hmac"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// KindPaddle is the scheme's name, as Options.Kind takes it.
const KindPaddle = "paddle"

// paddleScheme is Paddle's Paddle-Signature over "{ts}:{body}".
var paddleScheme = schemeDef{
	name: KindPaddle, tolerance: PaddleDefaultTolerance,
	build: func(o Options, tol time.Duration) (Scheme, error) { return newPaddle(o.Secrets, tol), nil },
}

// paddleSignatureHeader carries "ts=<unix seconds>;h1=<hex>[;h1=<hex>...]"
// (Paddle Billing notifications).
const paddleSignatureHeader = "Paddle-Signature"

// paddleSDKTolerance is the window of Paddle's own Node SDK
// (WebhooksValidator.MAX_VALID_TIME_DIFFERENCE, 5 seconds), past direction
// only.
const paddleSDKTolerance = 5 * time.Second

// PaddleDefaultTolerance is the window hookledger applies unless the source
// configures one: five minutes, as for Stripe, Slack and Standard Webhooks.
// The SDK's five seconds refuses authentic notifications whenever the two
// clocks drift a few seconds apart or a delivery is held up in transit, and
// a refused notification is only retried later with the same problem. A
// source that wants the SDK's window sets tolerance: 5s.
const PaddleDefaultTolerance = 5 * time.Minute

// paddle verifies Paddle Billing's notification signatures:
// hex(HMAC-SHA256(endpoint secret key, "{ts}:{body}")).
type paddle struct {
	secrets [][]byte
	tol     time.Duration
}

func newPaddle(secrets []string, tol time.Duration) *paddle {
	if tol == 0 {
		tol = PaddleDefaultTolerance
	}
	return &paddle{secrets: secretKeys(secrets), tol: tol}
}

// paddleSignature is a parsed Paddle-Signature header.
type paddleSignature struct {
	// TS is the ts= value exactly as sent: Paddle signs this text.
	TS        string
	Timestamp int64
	// H1 holds every decoded h1 signature. Paddle's SDK keeps only the
	// last one; accepting any lets a sender list one per active secret.
	H1 [][]byte
}

// parsePaddleSignature parses a Paddle-Signature value. Entries are
// separated by ";" and written key=value; unknown keys are skipped. A
// missing or repeated ts=, a ts that is not unix seconds, an h1 that is not
// hex, no h1 at all, and more than 16 signature entries are errors.
func parsePaddleSignature(v string) (paddleSignature, error) {
	var sig paddleSignature
	seenTS := false
	n := 0
	for item := range strings.SplitSeq(v, ";") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			continue
		}
		switch k {
		case "ts":
			if seenTS {
				return paddleSignature{}, failf(reasonMalformed, "paddle: %s has more than one ts=", paddleSignatureHeader)
			}
			seenTS = true
			if !isDigits(val) || len(val) > 12 {
				return paddleSignature{}, failf(reasonTimestamp, "paddle: %s ts= is not a unix time in seconds", paddleSignatureHeader)
			}
			t, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return paddleSignature{}, failf(reasonTimestamp, "paddle: %s ts= is not a unix time in seconds", paddleSignatureHeader)
			}
			sig.TS, sig.Timestamp = val, t
		default:
			// Counted before decoding, so a header stuffed with entries
			// costs no more than maxSignatures decodes.
			n++
			if n > maxSignatures {
				return paddleSignature{}, failf(reasonMalformed, "paddle: %s holds more than %d signature entries", paddleSignatureHeader, maxSignatures)
			}
			if k != "h1" {
				continue
			}
			b, err := hex.DecodeString(val)
			if err != nil || len(b) == 0 {
				return paddleSignature{}, failf(reasonMalformed, "paddle: %s has an h1 value that is not hex", paddleSignatureHeader)
			}
			sig.H1 = append(sig.H1, b)
		}
	}
	if !seenTS {
		return paddleSignature{}, failf(reasonMalformed, "paddle: %s has no ts= timestamp", paddleSignatureHeader)
	}
	if len(sig.H1) == 0 {
		return paddleSignature{}, failf(ReasonMissing, "paddle: %s has no h1 signature", paddleSignatureHeader)
	}
	return sig, nil
}

func paddleBase(ts string, body []byte) [][]byte {
	return [][]byte{[]byte(ts + ":"), body}
}

func (p *paddle) Verify(req *Request, now time.Time) error {
	const sc = "paddle"
	v, ok, herr := header(req.Header, paddleSignatureHeader, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		return failf(ReasonMissing, "%s: %s header is missing", sc, paddleSignatureHeader)
	}
	sig, err := parsePaddleSignature(v)
	if err != nil {
		return err
	}
	matched := false
	for _, key := range p.secrets {
		want := hmacSHA256(key, paddleBase(sig.TS, req.Body)...)
		for _, got := range sig.H1 {
			if hmac.Equal(want, got) {
				matched = true
			}
		}
	}
	if !matched {
		return failf(reasonMismatch, "%s: no h1 signature in %s matches any configured secret", sc, paddleSignatureHeader)
	}
	if e := checkWindow(sc, time.Unix(sig.Timestamp, 0), now, p.tol); e != nil {
		return e
	}
	return nil
}

func (p *paddle) Sign(req *Request, now time.Time, _ string) (http.Header, error) {
	ts := strconv.FormatInt(now.Unix(), 10)
	h := http.Header{}
	h.Set(paddleSignatureHeader, "ts="+ts+";h1="+hex.EncodeToString(hmacSHA256(p.secrets[0], paddleBase(ts, req.Body)...)))
	return h, nil
}
