package main

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// parseHeaders reads sign's "Name: value" lines.
func parseHeaders(out string) http.Header {
	h := http.Header{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		h.Add(k, v)
	}
	return h
}

// sign --headers svix prints the svix-* names a Svix-powered sender sends,
// carrying a signature the Standard Webhooks library accepts (its Go
// version reads the webhook-* names only, so the values are handed to it
// under those); --headers webhook gives the webhook-* names.
func TestSignHeadersSvix(t *testing.T) {
	cfg := filepath.Join("..", "..", "hookledger.yaml")
	body := `{"type":"user.created","data":{"id":"user_1"}}`
	code, out, errOut := run(t, body, nil, "sign", "--config", cfg, "--source", "app", "--event-id", "msg_svix", "--headers", "svix", "-")
	if code != 0 {
		t.Fatalf("sign --headers svix: %d %s", code, errOut)
	}
	h := parseHeaders(out)
	if h.Get("Svix-Id") != "msg_svix" || !strings.HasPrefix(h.Get("Svix-Signature"), "v1,") || h.Get("Svix-Timestamp") == "" {
		t.Fatalf("sign --headers svix printed %q", out)
	}
	if h.Get("Webhook-Id") != "" || h.Get("Webhook-Signature") != "" {
		t.Fatalf("sign --headers svix printed webhook-* headers too: %q", out)
	}
	// The secret is the config's default (no variable set).
	wh, err := standardwebhooks.NewWebhook("whsec_ZGVtby1zdGFuZGFyZC13ZWJob29rcy1zZWNyZXQtY2hhbmdlLW1l")
	if err != nil {
		t.Fatal(err)
	}
	lib := http.Header{}
	lib.Set("webhook-id", h.Get("Svix-Id"))
	lib.Set("webhook-timestamp", h.Get("Svix-Timestamp"))
	lib.Set("webhook-signature", h.Get("Svix-Signature"))
	if err := wh.VerifyIgnoringTimestamp([]byte(body), lib); err != nil {
		t.Fatalf("the library refuses sign's svix signature: %v", err)
	}
	if err := wh.VerifyIgnoringTimestamp([]byte(body+" "), lib); err == nil {
		t.Fatal("the library accepted a changed body")
	}

	code, out, _ = run(t, body, nil, "sign", "--config", cfg, "--source", "app", "--event-id", "msg_w", "--headers", "webhook", "-")
	if code != 0 || parseHeaders(out).Get("Webhook-Id") != "msg_w" {
		t.Fatalf("sign --headers webhook: %d %q", code, out)
	}
}

func TestSignHeadersUsageErrors(t *testing.T) {
	cfg := filepath.Join("..", "..", "hookledger.yaml")
	code, _, errOut := run(t, "{}", nil, "sign", "--config", cfg, "--source", "stripe", "--headers", "svix", "-")
	if code != exitUsage || !strings.Contains(errOut, "source stripe is of kind stripe") {
		t.Errorf("--headers on a stripe source: %d %q", code, errOut)
	}
	code, _, errOut = run(t, "{}", nil, "sign", "--config", cfg, "--source", "app", "--headers", "x-custom", "-")
	if code != exitUsage || !strings.Contains(errOut, "want webhook or svix") {
		t.Errorf("--headers x-custom: %d %q", code, errOut)
	}
	code, out, _ := run(t, "", nil, "sign", "--help")
	if code != 0 || !strings.Contains(out, "--headers") || !strings.Contains(out, "svix-id") {
		t.Errorf("sign --help does not document --headers: %q", out)
	}
}
