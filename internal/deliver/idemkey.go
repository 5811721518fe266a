package deliver

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/outbound"
)

// The episode key (flow:entity:version:effect) is the ledger's identity
// of an effect, and it holds the entity id from the payload: an e-mail
// address, or anything as long as a sender's id. A destination that
// dedupes on a header gets a key derived from it, never random and never
// stored, so that every attempt, every process and every version of
// hookledger sends the same key for the same effect.

// hashedKeyPrefix starts every hashed idempotency key. It says where the
// key comes from to someone reading it in a vendor's dashboard, and its
// version digit leaves room for another form without ever reusing this
// one's keys. It has no ":", which every episode key has at least three
// of, so a hashed key never equals an episode key sent as it is.
const hashedKeyPrefix = "hl1_"

// HashedKey is the hashed form of an episode key: HashedKeyPrefix and the
// SHA-256 of the key's UTF-8 bytes in lower-case hex, 68 characters
// whatever the key, and the same from
//
//	printf 'hl1_%s\n' "$(printf '%s' "$EPISODE_KEY" | sha256sum | cut -c1-64)"
//
// Destinations dedupe on it for their whole key window: this form must
// never change (a new form takes a new prefix).
func HashedKey(episodeKey string) string {
	sum := sha256.Sum256([]byte(episodeKey))
	return hashedKeyPrefix + hex.EncodeToString(sum[:])
}

// IdempotencyKey is the key sent in d's idempotency header for the effect
// with this episode key, or "" when d has no idempotency header. It is the
// hashed key under idempotency.key: hashed; under episode (and for a
// destination made at run time, which leaves the key unset) the episode
// key itself when it can be sent as it is, else the hashed key: never a
// key longer than the preset's documented limit, which the vendor would
// refuse on every attempt, and never one with a character no header may
// carry, which the request builder would.
func IdempotencyKey(d *config.Destination, episodeKey string) string {
	if d == nil || d.Idem == nil || d.Idem.Header == "" {
		return ""
	}
	if d.Idem.Key == config.IdempotencyKeyHashed || !sendableAsIs(d, episodeKey) {
		return HashedKey(episodeKey)
	}
	return episodeKey
}

// sendableAsIs reports whether an episode key fits d's documented key
// limit (counted in bytes, which are never fewer than characters) and
// holds no character a header value cannot.
func sendableAsIs(d *config.Destination, episodeKey string) bool {
	if pd := d.PresetData; pd != nil && pd.IdempotencyKeyMax > 0 && len(episodeKey) > pd.IdempotencyKeyMax {
		return false
	}
	return outbound.CheckHeaderValue(episodeKey) == nil
}

// KeyFunc answers, for the effects of cfg's destinations, the header the
// idempotency key goes in and the key sent ("", "" for a destination
// without one, or one not in cfg): what the effect pages, the API and the
// CLI show beside the episode key.
func KeyFunc(cfg *config.Config) func(destination, episodeKey string) (header, key string) {
	dests := map[string]*config.Destination{}
	for i := range cfg.Destinations {
		dests[cfg.Destinations[i].Name] = &cfg.Destinations[i]
	}
	return func(destination, episodeKey string) (string, string) {
		d := dests[destination]
		key := IdempotencyKey(d, episodeKey)
		if key == "" {
			return "", ""
		}
		return d.Idem.Header, key
	}
}

// keyNote names the key a destination was sent, for reasons and repairs
// that send a person to look for the effect there: " (sent as
// Idempotency-Key hl1_…)", or "" when the episode key itself was sent or
// the destination has no key.
func keyNote(d *config.Destination, episodeKey string) string {
	key := IdempotencyKey(d, episodeKey)
	if key == "" || key == episodeKey {
		return ""
	}
	return " (sent as " + d.Idem.Header + " " + key + ")"
}
