package publish

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookledger/hookledger/internal/store"
)

// verifies reports whether key alone verifies the delivery, with the
// Standard Webhooks library (the timestamp is the fake clock's).
func verifies(t *testing.T, key string, d received) bool {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(key)
	if err != nil {
		t.Fatal(err)
	}
	return wh.VerifyIgnoringTimestamp(d.body, d.header) == nil
}

// only returns d with its signature list cut to entry i.
func only(d received, i int) received {
	h := d.header.Clone()
	h.Set("webhook-signature", strings.Fields(d.header.Get("webhook-signature"))[i])
	return received{header: h, body: d.body}
}

// After a rotation every delivery, retries included, is signed with the
// old and the new key until the overlap ends, each entry by one key; then
// with the new key only. A rotation made during an overlap does not
// lengthen it, and drops keys already expired.
func TestRotationOverlap(t *testing.T) { eachStore(t, testRotationOverlap) }

func testRotationOverlap(t *testing.T, storeURL string) {
	e := newEnv(t, storeURL, "{}")
	rcv := newReceiver(t)
	oldKey := e.create("rot", rcv.srv.URL).Secrets[0].Key
	deliverOne := func(key string) received {
		t.Helper()
		n := len(rcv.deliveries())
		id := e.publish(key, "user.created", fmt.Sprintf(`{"k":%q}`, key)).ID
		e.drain()
		got := rcv.deliveries()
		if len(got) != n+1 || got[n].header.Get("webhook-id") != id {
			t.Fatalf("delivery of %s: %d deliveries, want %d", key, len(got), n+1)
		}
		return got[n]
	}

	d := deliverOne("before")
	if sig := d.header.Get("webhook-signature"); len(strings.Fields(sig)) != 1 || !verifies(t, oldKey, d) {
		t.Fatalf("before the rotation: signature %q, want one entry by the created key", sig)
	}

	ep, sec, err := e.s.Rotate(e.ctx, "rot", "", "", time.Hour, "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	newKey := sec.Key
	if !strings.HasPrefix(newKey, "whsec_") || newKey == oldKey || len(ep.Secrets) != 2 ||
		!ep.Secrets[0].ExpiresAt.Equal(t0.Add(time.Hour)) || !ep.Secrets[1].ExpiresAt.IsZero() || ep.Secrets[1].ID != sec.ID {
		t.Fatalf("after the rotation: new key %q, secrets %+v; want the old one ending in an hour, then the new one", newKey[:6], ep.Secrets)
	}
	d = deliverOne("during")
	if n := len(strings.Fields(d.header.Get("webhook-signature"))); n != 2 {
		t.Fatalf("during the overlap %d signature entries, want 2", n)
	}
	if !verifies(t, oldKey, d) || !verifies(t, newKey, d) {
		t.Fatal("during the overlap a key does not verify the delivery")
	}
	if !verifies(t, oldKey, only(d, 0)) || verifies(t, newKey, only(d, 0)) || !verifies(t, newKey, only(d, 1)) || verifies(t, oldKey, only(d, 1)) {
		t.Fatal("each signature entry is not one key's own")
	}

	// A message that fails during the overlap is retried after it: signed
	// at its retry, with the new key only, under a fresh timestamp.
	e.clk.Advance(30 * time.Minute)
	rcv.setStatus(http.StatusServiceUnavailable)
	failed := deliverOne("retried")
	if !verifies(t, oldKey, failed) || !verifies(t, newKey, failed) {
		t.Fatal("the first attempt, during the overlap, is not signed by both keys")
	}
	rcv.setStatus(http.StatusNoContent)
	e.clk.Advance(31 * time.Minute)
	e.drain()
	retry := rcv.deliveries()[len(rcv.deliveries())-1]
	if retry.header.Get("webhook-id") != failed.header.Get("webhook-id") || retry.header.Get("webhook-timestamp") != fmt.Sprint(e.clk.Now().Unix()) {
		t.Fatalf("the retry: id %s timestamp %s, want the message's id at the retry's time", retry.header.Get("webhook-id"), retry.header.Get("webhook-timestamp"))
	}
	if n := len(strings.Fields(retry.header.Get("webhook-signature"))); n != 1 || verifies(t, oldKey, retry) || !verifies(t, newKey, retry) {
		t.Fatalf("after the overlap: %d entries; want one, by the new key only", n)
	}

	// The next rotation drops the expired key; rotating again within an
	// overlap never lengthens a key's end.
	ep, third, err := e.s.Rotate(e.ctx, "rot", "", "", 2*time.Hour, "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.Secrets) != 2 || ep.Secrets[0].ID != sec.ID || ep.Secrets[1].ID != third.ID {
		t.Fatalf("secrets %+v, want the second and third keys (the first expired)", ep.Secrets)
	}
	end := e.clk.Now().Add(2 * time.Hour)
	e.clk.Advance(10 * time.Minute)
	ep, _, err = e.s.Rotate(e.ctx, "rot", "", "", 5*time.Hour, "operator:alice")
	if err != nil {
		t.Fatal(err)
	}
	if len(ep.Secrets) != 3 || !ep.Secrets[0].ExpiresAt.Equal(end) || !ep.Secrets[1].ExpiresAt.Equal(e.clk.Now().Add(5*time.Hour)) {
		t.Fatalf("secrets %+v: want the second key to keep its end %v", ep.Secrets, end)
	}
	if n := len(strings.Fields(deliverOne("three").header.Get("webhook-signature"))); n != 3 {
		t.Fatalf("%d signature entries with three keys active, want 3", n)
	}
}

// A rotation may bring its own key, of either kind; an ed25519 (v1a) key
// signs beside the HMAC ones, and without an overlap the configured
// publish.rotation_overlap applies.
func TestRotateToAGivenKey(t *testing.T) { eachStore(t, testRotateToAGivenKey) }

func testRotateToAGivenKey(t *testing.T, storeURL string) {
	e := newEnv(t, storeURL, "publish:\n  rotation_overlap: 3h\n")
	rcv := newReceiver(t)
	hmacKey := e.create("rot", rcv.srv.URL).Secrets[0].Key
	pair, err := newSecret(store.SecretEd25519, t0)
	if err != nil {
		t.Fatal(err)
	}
	ep, sec, err := e.s.Rotate(e.ctx, "rot", pair.Key, "", -1, "test")
	if err != nil {
		t.Fatal(err)
	}
	if sec.ID != pair.ID || sec.Kind != store.SecretEd25519 || sec.Public != pair.Public || !ep.Secrets[0].ExpiresAt.Equal(t0.Add(3*time.Hour)) {
		t.Fatalf("rotated to %+v, secrets %+v; want the given key, the old one ending after rotation_overlap", sec, ep.Secrets)
	}
	id := e.publish("k", "a.b", `{}`).ID
	e.drain()
	d := rcv.deliveries()[0]
	entries := strings.Fields(d.header.Get("webhook-signature"))
	if len(entries) != 2 || !strings.HasPrefix(entries[0], "v1,") || !strings.HasPrefix(entries[1], "v1a,") || !verifies(t, hmacKey, d) {
		t.Fatalf("signature %q, want the v1 entry (verifying) then the v1a one", entries)
	}
	pub, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(pair.Public, "whpk_"))
	if err != nil {
		t.Fatal(err)
	}
	sig, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(entries[1], "v1a,"))
	if err != nil {
		t.Fatal(err)
	}
	content := fmt.Sprintf("%s.%d.%s", id, t0.Unix(), d.body)
	if !ed25519.Verify(ed25519.PublicKey(pub), []byte(content), sig) || ed25519.Verify(ed25519.PublicKey(pub), []byte(content+" "), sig) {
		t.Fatal("the v1a entry does not verify with the public key (or verifies a changed body)")
	}
	// The same key twice is refused, and so are malformed keys and kinds.
	if _, _, err := e.s.Rotate(e.ctx, "rot", pair.Key, "", time.Hour, "test"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "already one of") {
		t.Fatalf("rotate to a key it has: %v", err)
	}
	if _, _, err := e.s.Rotate(e.ctx, "rot", "whsec_c2hvcnQ=", "", time.Hour, "test"); !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Fatalf("rotate to a short key: %v (and never echoing it)", err)
	}
	if _, _, err := e.s.Rotate(e.ctx, "rot", "", "v9", time.Hour, "test"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "kind") {
		t.Fatalf("rotate to an unknown kind: %v", err)
	}
	if _, _, err := e.s.Rotate(e.ctx, "nosuch", "", "", time.Hour, "test"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rotate an unknown endpoint: %v", err)
	}
	if got := e.stored("rot").Secrets; len(got) != 2 {
		t.Fatalf("refused rotations changed the secrets: %+v", got)
	}
}

// Endpoints of the config file rotate in the file: the API refuses, and a
// key listed beside the old one signs with it, keeping when it was first
// seen across restarts.
func TestConfigEndpointRotation(t *testing.T) {
	url := sqliteURLOf(t)
	key1, _ := newSecret(store.SecretHMAC, t0)
	key2, _ := newSecret(store.SecretHMAC, t0)
	yaml := func(keys ...string) string {
		return fmt.Sprintf("endpoints:\n  - id: file\n    url: https://file.example/hooks\n    secrets: [%s]\n", strings.Join(keys, ", "))
	}
	e := newEnv(t, url, yaml(key1.Key))
	if _, _, err := e.s.Rotate(e.ctx, "file", "", "", time.Hour, "test"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "config file") {
		t.Fatalf("rotate a config endpoint: %v", err)
	}
	e.clk.Advance(time.Hour)
	later := newEnvOn(t, e, yaml(key1.Key, key2.Key))
	got := later.stored("file").Secrets
	if len(got) != 2 || got[0].ID != key1.ID || !got[0].CreatedAt.Equal(t0) || got[1].ID != key2.ID || !got[1].CreatedAt.Equal(t0.Add(time.Hour)) {
		t.Fatalf("secrets after adding one in the file %+v, want the first kept from %v and the second from an hour later", got, t0)
	}
}
