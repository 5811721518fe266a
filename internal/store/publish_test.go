package store

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestMatchType(t *testing.T) {
	cases := []struct {
		types []string
		typ   string
		want  bool
	}{
		{nil, "invoice.paid", true},
		{[]string{}, "", true},
		{[]string{"invoice.paid"}, "invoice.paid", true},
		{[]string{"invoice.paid"}, "invoice.voided", false},
		{[]string{"invoice.*"}, "invoice.paid", true},
		{[]string{"invoice.*"}, "invoice.", true},
		{[]string{"invoice.*"}, "invoices.paid", false},
		{[]string{"invoice.*"}, "invoice.line/added", false}, // '*' stops at '/'
		{[]string{"*"}, "anything.at.all", true},
		{[]string{"order.?"}, "order.x", true},
		{[]string{"order.?"}, "order.xy", false},
		{[]string{"charge.[ab]"}, "charge.a", true},
		{[]string{"charge.[ab]"}, "charge.c", false},
		{[]string{"customer.*", "charge.failed"}, "charge.failed", true},
		{[]string{"customer.*", "charge.failed"}, "charge.succeeded", false},
		{[]string{"[", "a.b"}, "a.b", true}, // a malformed glob matches nothing, the others still count
		{[]string{"["}, "[", false},
	}
	for _, c := range cases {
		if got := matchType(c.types, c.typ); got != c.want {
			t.Errorf("MatchType(%q, %q) = %v, want %v", c.types, c.typ, got, c.want)
		}
	}
}

func TestCheckTypePattern(t *testing.T) {
	for _, ok := range []string{"invoice.paid", "invoice.*", "*", "order.?", "charge.[ab]", `a\*b`} {
		if err := CheckTypePattern(ok); err != nil {
			t.Errorf("CheckTypePattern(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", "[", "charge.[a", `trailing\`} {
		if err := CheckTypePattern(bad); err == nil {
			t.Errorf("CheckTypePattern(%q) = nil, want an error", bad)
		}
	}
}

func TestPublishVersionSortIsTimeOrder(t *testing.T) {
	base := time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC)
	a := publishVersionSort(base, "msg_z")
	b := publishVersionSort(base.Add(time.Microsecond), "msg_a")
	c := publishVersionSort(base.Add(1000*time.Hour), "msg_a")
	if !(a < b && b < c) || !strings.HasSuffix(a, "msg_z") || len(a) != 20+len("msg_z") {
		t.Fatalf("version sorts out of time order: %q %q %q", a, b, c)
	}
}

func TestPublishRequest(t *testing.T) {
	payload := []byte(`{"type":"a.b","data":{"n":1}}`)
	var req struct {
		Method  string            `json:"method"`
		Headers map[string]string `json:"headers"`
		Body    json.RawMessage   `json:"body"`
	}
	if err := json.Unmarshal(publishRequest("msg_1", payload), &req); err != nil {
		t.Fatal(err)
	}
	if req.Method != "POST" || req.Headers["webhook-id"] != "msg_1" || string(req.Body) != string(payload) {
		t.Fatalf("request: %+v", req)
	}
}

func TestEndpointAuditDetailHidesSecrets(t *testing.T) {
	s := &EndpointSpec{URL: "https://user:hunter2@hooks.example/in?token=abc", Types: []string{"a.*"},
		Secrets: []EndpointSecret{{ID: "s1", Kind: SecretHMAC, Key: "whsec_c2VjcmV0"}}}
	d := endpointAuditDetail("created", OriginAPI, s)
	for _, secret := range []string{"hunter2", "token=abc", "whsec_", "user"} {
		if strings.Contains(d, secret) {
			t.Fatalf("detail %q holds %q", d, secret)
		}
	}
	if !strings.Contains(d, "hooks.example") || !strings.Contains(d, "1 signing secret") {
		t.Fatalf("detail %q does not say where it delivers", d)
	}
}
