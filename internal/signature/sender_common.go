package signature

import (
	"errors"
	"strings"
)

// secretKeys turns the configured secrets into HMAC keys. The sender kinds
// below all key their HMAC with the secret string exactly as the sender's
// dashboard shows it (no base64 decoding, no prefix stripping).
func secretKeys(secrets []string) [][]byte {
	keys := make([][]byte, 0, len(secrets))
	for _, s := range secrets {
		keys = append(keys, []byte(s))
	}
	return keys
}

// renamed rewrites the "hmac:" prefix of a generic hmac scheme's error to
// the sender kind's name, so that a GitHub or Shopify refusal says which
// sender's contract failed. It returns err unchanged when it is not an
// *Error from the generic scheme.
func renamed(kind string, err error) error {
	var e *Error
	if err == nil || !errors.As(err, &e) {
		return err
	}
	return &Error{Reason: e.Reason, Msg: kind + ":" + strings.TrimPrefix(e.Msg, "hmac:")}
}
