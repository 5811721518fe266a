package publish

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/signature"
	"github.com/hookledger/hookledger/internal/store"
)

func TestDecodeMessage(t *testing.T) {
	for _, tc := range []struct {
		body, wantErr string
	}{
		{`{"type":"invoice.paid","data":{"id":1}}`, ""},
		{`{"type":"invoice.paid","data":{}}`, ""},
		{``, "body: EOF"},
		{`{"type":"invoice.paid"}`, "data: a JSON object is required"},
		{`{"type":"invoice.paid","data":[1]}`, "data: a JSON object is required"},
		{`{"type":"invoice.paid","data":"x"}`, "data: a JSON object is required"},
		{`{"data":{}}`, "type: required"},
		{`{"type":"has space","data":{}}`, `type: "has space"`},
		{`{"type":"a","data":{},"extra":1}`, `unknown field "extra"`},
		{`{"type":1,"data":{}}`, "field type: expected string"},
		{`{"type":"a","data":{}} {}`, "found more after it"},
		{`{"type":"a","data":{`, "body:"},
		// Data that no store can hold is refused here, on every driver
		// alike (PostgreSQL's jsonb refuses U+0000), not answered 503.
		{`{"type":"a","data":{"x":"a\u0000b"}}`, "data: holds a string with U+0000"},
		{`{"type":"a","data":{"\u0000":1}}`, "data: holds a string with U+0000"},
		{"{\"type\":\"a\",\"data\":{\"x\":\"\xff\"}}", "data: is not valid UTF-8"},
		{`{"type":"a","data":{"x":"\\u0000"}}`, ""},
	} {
		_, fp, err := DecodeMessage([]byte(tc.body))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: %v", tc.body, err)
		case tc.wantErr == "" && len(fp) != 64:
			t.Errorf("%s: fingerprint %q", tc.body, fp)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalid)):
			t.Errorf("%s: error %v, want one containing %q", tc.body, err, tc.wantErr)
		}
	}
}

// The fingerprint is of the canonical form: spacing and key order do not
// change it, any value does, and numbers keep how they were written.
func TestFingerprint(t *testing.T) {
	fp := func(s string) string {
		t.Helper()
		f, err := fingerprint([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	a := fp(`{"type":"x","data":{"a":1,"b":[1,2]}}`)
	if b := fp(" {\n\"data\" : {\"b\":[1, 2], \"a\":1},\t\"type\":\"x\"}"); a != b {
		t.Error("spacing or key order changed the fingerprint")
	}
	for _, other := range []string{
		`{"type":"x","data":{"a":2,"b":[1,2]}}`,
		`{"type":"x","data":{"a":1,"b":[2,1]}}`,
		`{"type":"y","data":{"a":1,"b":[1,2]}}`,
		`{"type":"x","data":{"a":1.0,"b":[1,2]}}`,
		`{"type":"x","data":{"a":"1","b":[1,2]}}`,
	} {
		if fp(other) == a {
			t.Errorf("%s has the same fingerprint", other)
		}
	}
}

func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{`{"type":"a.b","data":{"x":[1,{"y":null}]}}`, `{}`, `[]`, `{"type":"a","data":{}}`, "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, fp, err := DecodeMessage(body)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error not marked invalid: %v", err)
			}
			return
		}
		if !config.ValidMessageType(m.Type) || len(fp) != 64 {
			t.Fatalf("accepted %q with type %q fingerprint %q", body, m.Type, fp)
		}
		if err := store.CheckJSON("data", m.Data); err != nil {
			t.Fatalf("accepted %q with data no store holds: %v", body, err)
		}
		// Accepted bodies fingerprint the same when decoded again.
		if fp2, err := fingerprint(body); err != nil || fp2 != fp {
			t.Fatalf("fingerprint unstable: %v", err)
		}
	})
}

func TestMessageOf(t *testing.T) {
	key := store.PublishEpisodeKey("msg_0af", "ep.1")
	if id, ok := messageOf(key, "ep.1"); !ok || id != "msg_0af" {
		t.Fatalf("messageOf(%q) = %q, %v", key, id, ok)
	}
	for _, bad := range []string{"flow:x:ep.1", "publish:msg_0af:ep.2", "msg_0af:ep.1"} {
		if _, ok := messageOf(bad, "ep.1"); ok {
			t.Errorf("messageOf(%q) accepted", bad)
		}
	}
}

// Generated secrets have the spec's form, and signatures made with several
// of them verify with the reference library for each v1 key alone.
func TestSecretsAndSignatures(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	a, err := newSecret(store.SecretHMAC, now)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newSecret("", now)
	if err != nil {
		t.Fatal(err)
	}
	ed, err := newSecret(store.SecretEd25519, now)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.Key, "whsec_") || a.Kind != store.SecretHMAC || a.ID == b.ID || a.Key == b.Key {
		t.Fatalf("secrets %+v %+v", a, b)
	}
	if !strings.HasPrefix(ed.Key, "whsk_") || !strings.HasPrefix(ed.Public, "whpk_") || ed.Kind != store.SecretEd25519 {
		t.Fatalf("v1a secret %+v", ed)
	}
	if _, err := newSecret("v2", now); !errors.Is(err, ErrInvalid) {
		t.Fatalf("unknown kind: %v", err)
	}
	// Derived ids: the same key has the same id after a restart.
	again, _ := secretOf(a.Key, now.Add(time.Hour))
	if again.ID != a.ID {
		t.Fatal("the id of a key changed")
	}
	if _, err := secretOf("whsec_c2hvcnQ=", now); err == nil || strings.Contains(err.Error(), "c2hvcnQ") {
		t.Fatalf("short secret: %v (and never echoed)", err)
	}

	body := []byte(`{"type":"invoice.paid","timestamp":"2026-12-01T10:00:00Z","data":{"id":"in_1"}}`)
	sig, err := signature.SignWebhook([]string{a.Key, b.Key, ed.Key}, "msg_1", now, body)
	if err != nil {
		t.Fatal(err)
	}
	if entries := strings.Fields(sig); len(entries) != 3 || !strings.HasPrefix(entries[2], "v1a,") {
		t.Fatalf("signature list %q", sig)
	}
	h := http.Header{}
	h.Set("webhook-id", "msg_1")
	h.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	h.Set("webhook-signature", sig)
	for _, k := range []string{a.Key, b.Key} {
		wh, err := standardwebhooks.NewWebhook(k)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.VerifyIgnoringTimestamp(body, h); err != nil {
			t.Errorf("key %s: %v", k[:10], err)
		}
		if err := wh.VerifyIgnoringTimestamp(append(body, ' '), h); err == nil {
			t.Error("a changed body verified")
		}
	}
	other, _ := newSecret("", now)
	wh, _ := standardwebhooks.NewWebhook(other.Key)
	if err := wh.VerifyIgnoringTimestamp(body, h); err == nil {
		t.Error("a key that did not sign verified")
	}
}

func TestAttempts(t *testing.T) {
	p := config.Publish{DisableAfter: config.Duration(5 * 24 * time.Hour)}
	for _, d := range config.DefaultSchedule {
		p.Schedule = append(p.Schedule, config.Duration(d))
	}
	// 5 s + 5 min + 30 min + 2 h + 5 h ≈ 7.6 h, then 10 h each: twelve
	// more reach 127.6 h ≥ 120 h; with the first call, 18 attempts.
	if n := p.Attempts(); n != 18 {
		t.Fatalf("attempts %d, want 18", n)
	}
	p.DisableAfter = config.Duration(time.Minute)
	if n := p.Attempts(); n != 3 {
		t.Fatalf("attempts %d, want 3 (0, 5 s, 5 min)", n)
	}
}
