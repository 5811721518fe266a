package signature

import (
	"crypto/hmac"
	"encoding/base64"
	"errors"
	"net/http"
	"time"
)

// KindSquare is the scheme's name, as Options.Kind takes it.
const KindSquare = "square"

// squareScheme is Square's X-Square-Hmacsha256-Signature; Square signs no
// timestamp.
var squareScheme = schemeDef{
	name: KindSquare,
	build: func(o Options, _ time.Duration) (Scheme, error) {
		if err := noTolerance(o); err != nil {
			return nil, err
		}
		return newSquare(o.Secrets), nil
	},
}

// Square webhook headers.
const (
	// squareSignatureHeader carries the base64 HMAC-SHA256 of the
	// notification URL followed by the raw body, keyed with the
	// subscription's signature key.
	squareSignatureHeader = "X-Square-Hmacsha256-Signature"
	// squareSHA1SignatureHeader is Square's legacy HMAC-SHA1 signature. It
	// is never accepted.
	squareSHA1SignatureHeader = "X-Square-Signature"
)

// square verifies Square's webhook signatures. The signed URL is the
// notification URL exactly as entered in the subscription, so the source
// needs its public URL configured; Request.URL carries it. Square signs no
// timestamp, so no tolerance applies; the event_id in the body catches
// replays in the inbox.
type square struct {
	secrets [][]byte
}

func newSquare(secrets []string) *square {
	return &square{secrets: secretKeys(secrets)}
}

const squareNoURL = "square: the notification URL is unknown; configure the source's public URL exactly as in the Square subscription"

func (s *square) Verify(req *Request, _ time.Time) error {
	const sc = "square"
	if req.URL == "" {
		return failf(reasonMalformed, "%s", squareNoURL)
	}
	v, ok, herr := header(req.Header, squareSignatureHeader, sc)
	if herr != nil {
		return herr
	}
	if !ok {
		if _, legacy, _ := header(req.Header, squareSHA1SignatureHeader, sc); legacy {
			return failf(ReasonMissing, "%s: %s header is missing; only %s (HMAC-SHA1) was sent, and SHA-1 is never accepted", sc, squareSignatureHeader, squareSHA1SignatureHeader)
		}
		return failf(ReasonMissing, "%s: %s header is missing", sc, squareSignatureHeader)
	}
	got, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return failf(reasonMalformed, "%s: %s is not base64", sc, squareSignatureHeader)
	}
	matched := false
	for _, key := range s.secrets {
		if hmac.Equal(hmacSHA256(key, []byte(req.URL), req.Body), got) {
			matched = true
		}
	}
	if !matched {
		// The URL is the usual culprit: it must match the subscription's
		// byte for byte (scheme, host, path, trailing slash, query).
		return failf(reasonMismatch, "%s: %s matches no configured signature key for the configured notification URL", sc, squareSignatureHeader)
	}
	return nil
}

func (s *square) Sign(req *Request, _ time.Time, _ string) (http.Header, error) {
	if req.URL == "" {
		return nil, errors.New(squareNoURL)
	}
	h := http.Header{}
	h.Set(squareSignatureHeader, base64.StdEncoding.EncodeToString(hmacSHA256(s.secrets[0], []byte(req.URL), req.Body)))
	return h, nil
}
