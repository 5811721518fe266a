package deliver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/hookledger/hookledger/internal/signature"
)

// MessageID is the webhook-id a signed call carries: derived from the
// episode key, so every attempt of one effect sends the same id and the
// receiver can drop a repeat, and no entity id or event id shows in it.
func MessageID(episodeKey string) string {
	sum := sha256.Sum256([]byte(episodeKey))
	return "msg_" + hex.EncodeToString(sum[:16])
}

// signCall adds the Standard Webhooks headers to a call of a destination
// with signing secrets: webhook-id (MessageID), webhook-timestamp (now,
// per attempt, so a receiver's tolerance window holds for a retry hours
// later) and webhook-signature over id, timestamp and the exact body
// sent, one entry per key.
func signCall(call *Call, now time.Time) error {
	s := call.Destination.Signing
	if s == nil || len(s.Secrets) == 0 {
		return nil
	}
	id := MessageID(call.EpisodeKey)
	sig, err := signature.SignWebhook(s.Secrets, id, now, call.Body)
	if err != nil {
		// Never the keys: the error names the problem only.
		return fmt.Errorf("sign for destination %s: %w", call.Destination.Name, err)
	}
	call.Header.Set(signature.WebhookIDHeader, id)
	call.Header.Set(signature.WebhookTimestampHeader, strconv.FormatInt(now.Unix(), 10))
	call.Header.Set(signature.WebhookSignatureHeader, sig)
	return nil
}
