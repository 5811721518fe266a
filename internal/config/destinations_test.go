package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestDestinationDefaultsAndPresets(t *testing.T) {
	c, err := Parse("d.yaml", []byte(`destinations:
  - name: billing
    preset: stripe
    base_url: https://api.stripe.com
    auth: {bearer: sk_test}
  - name: hooks
    base_url: https://hooks.example
    retry_after: {unit: milliseconds}
    lookup:
      path: '"/items/" + episode_key'
      found: status == 200
    classify:
      - when: 'status == 200 && body.ok == false'
        class: hidden_failure
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	b := c.Destinations[0]
	if b.Idem == nil || b.Idem.Header != "Idempotency-Key" || b.Idem.Window.D() != 24*time.Hour {
		t.Errorf("stripe preset idempotency = %+v", b.Idem)
	}
	if b.Retry.Attempts != 6 || b.Retry.Base.D() != time.Second || b.Retry.Cap.D() != time.Minute || b.Retry.Factor != 2 || len(b.Retry.Redrive) != 3 || b.Retry.Redrive[2].D() != 6*time.Hour {
		t.Errorf("retry defaults = %+v", b.Retry)
	}
	h := c.Destinations[1]
	if h.Preset != "generic" || h.RetryAfter.Unit != "milliseconds" || h.Idem != nil || h.Compiled.LookupFound == nil || h.Compiled.Rules[0] == nil {
		t.Errorf("generic destination = %+v", h)
	}
}

// idempotency.key: hashed by default where the preset's vendor limits the
// key or wants no personal data in it (stripe), episode elsewhere; a block
// that names only the key takes the rest from the preset.
func TestIdempotencyKeyDefaults(t *testing.T) {
	c, err := Parse("d.yaml", []byte(`destinations:
  - name: billing
    preset: stripe
    base_url: https://api.stripe.com
  - name: billing_readable
    preset: stripe
    base_url: https://api.stripe.com
    idempotency: {key: episode}
  - name: hooks
    base_url: https://hooks.example
    idempotency: {header: X-Request-Id, window: 1h}
  - name: hooks_hashed
    base_url: https://hooks.example
    idempotency: {header: X-Request-Id, window: 1h, key: hashed}
  - name: stripe_other_header
    preset: stripe
    base_url: https://api.stripe.com
    idempotency: {header: X-Dedupe, window: 1h}
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []Idempotency{
		{Header: "Idempotency-Key", Window: Duration(24 * time.Hour), Key: "hashed", ReplayedHeader: "Idempotent-Replayed"},
		{Header: "Idempotency-Key", Window: Duration(24 * time.Hour), Key: "episode", ReplayedHeader: "Idempotent-Replayed"},
		{Header: "X-Request-Id", Window: Duration(time.Hour), Key: "episode"},
		{Header: "X-Request-Id", Window: Duration(time.Hour), Key: "hashed"},
		{Header: "X-Dedupe", Window: Duration(time.Hour), Key: "hashed"},
	}
	for i, w := range want {
		if got := c.Destinations[i].Idem; got == nil || *got != w {
			t.Errorf("%s: idempotency %+v, want %+v", c.Destinations[i].Name, got, w)
		}
	}
	// key: episode on a vendor that asks for keys without personal data
	// is allowed, and said at load with its line.
	if len(c.Warnings) != 1 || c.Warnings[0].Line != 8 || !strings.Contains(c.Warnings[0].Msg, "personal data") ||
		!strings.Contains(c.Warnings[0].Msg, "255 characters is sent hashed") {
		t.Errorf("warnings = %v, want one at line 8 about personal data and the 255-character limit", c.Warnings)
	}
}

func TestIdempotencyErrors(t *testing.T) {
	for _, tc := range []struct {
		name, block string
		line        int
		want        string
	}{
		{"unknown key", "preset: stripe\n    idempotency: {key: sha1}", 5, `idempotency.key "sha1" is not one of hashed (a fixed-length digest of the episode key) or episode`},
		{"key only without a preset header", "idempotency: {key: hashed}", 4, "idempotency needs a header (the request header the destination dedupes on; preset generic names none)"},
		{"no window", "idempotency: {header: X-Id}", 4, "idempotency needs a positive window"},
		{"header with CR", "idempotency: {header: \"X-Id\\r\", window: 1h}", 4, "idempotency.header"},
		{"lookup by a key never sent", "lookup:\n      path: '\"/x/\" + idempotency_key'\n      found: status == 200", 5,
			"lookup.path reads idempotency_key, but the destination is sent no idempotency key"},
	} {
		yaml := fmt.Sprintf("destinations:\n  - name: a\n    base_url: https://x\n    %s\n", strings.ReplaceAll(tc.block, "\\n", "\n"))
		_, err := Parse("d.yaml", []byte(yaml), env(nil))
		var es Errors
		errors.As(err, &es)
		found := false
		for _, e := range es {
			found = found || e.Line == tc.line && strings.Contains(e.Msg, tc.want)
		}
		if !found {
			t.Errorf("%s: %v, want an error at line %d containing %q\n%s", tc.name, err, tc.line, tc.want, yaml)
		}
	}
}

func TestDestinationErrors(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"unknown preset", "destinations:\n  - name: a\n    preset: paypal\n    base_url: https://x\n", "unknown preset"},
		{"no base url", "destinations:\n  - name: a\n", "base_url"},
		{"two auths", "destinations:\n  - name: a\n    base_url: https://x\n    auth: {bearer: t, basic: {user: u, password: p}}\n", "exactly one"},
		{"bad class", "destinations:\n  - name: a\n    base_url: https://x\n    classify: [{status: 200, class: fine}]\n", "class"},
		{"bad unit", "destinations:\n  - name: a\n    base_url: https://x\n    retry_after: {unit: minutes}\n", "retry_after.unit"},
		{"lookup without found", "destinations:\n  - name: a\n    base_url: https://x\n    lookup: {path: '\"/x\"'}\n", "lookup.found"},
	}
	for _, tc := range cases {
		_, err := Parse("d.yaml", []byte(tc.yaml), env(nil))
		var es Errors
		if !errors.As(err, &es) || es[0].Line == 0 || !strings.Contains(es[0].Msg, tc.want) {
			t.Errorf("%s: %v, want a located error containing %q", tc.name, err, tc.want)
		}
	}
}

// Credentials in a URL show wherever the URL does; the config refuses them
// with the line, points to where they belong, and never repeats them.
func TestURLCredentialsAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		line       int
		want       string
	}{
		{"destination", "destinations:\n  - name: a\n    base_url: https://bot:s3cret@api.example/v1?key=s3cret\n", 3, "auth:"},
		{"source api", "sources:\n  - name: shop\n    kind: hmac\n    secrets: [x]\n    hmac: {header: X-Sig}\n    api:\n      base_url: https://bot:s3cret@api.example\n", 7, "api.bearer_token"},
		{"notifications", "notifications:\n  webhook_url: https://bot:s3cret@hooks.example/T0/s3cret\n", 2, "credentials"},
		{"unparseable", "destinations:\n  - name: a\n    base_url: https://bot:s3/cret@api.example:x\n", 3, "not an absolute URL"},
		{"not http", "destinations:\n  - name: a\n    base_url: ftp://files.example\n", 3, "http or https"},
	} {
		_, err := Parse("d.yaml", []byte(tc.yaml), env(nil))
		var es Errors
		if !errors.As(err, &es) || es[0].Line != tc.line || !strings.Contains(es[0].Msg, tc.want) {
			t.Errorf("%s: %v, want an error at line %d containing %q", tc.name, err, tc.line, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "s3") {
			t.Errorf("%s: the message repeats the credentials: %v", tc.name, err)
		}
	}
}

// A static credential header is checked at load, and never repeated.
func TestStaticHeadersAreChecked(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"bearer", "destinations:\n  - name: a\n    base_url: https://x\n    auth: {bearer: ${TOKEN}}\n", "auth.bearer"},
		{"header value", "destinations:\n  - name: a\n    base_url: https://x\n    auth: {header: {name: X-Api-Key, value: ${TOKEN}}}\n", "auth.header"},
		{"header name", "destinations:\n  - name: a\n    base_url: https://x\n    auth: {header: {name: 'X Api Key', value: k}}\n", "valid header name"},
		{"lookup path with a query", "destinations:\n  - name: a\n    base_url: https://x\n    lookup: {path: '\"/search?q=\" + episode_key', found: 'status == 200'}\n", "query:"},
	} {
		_, err := Parse("d.yaml", []byte(tc.yaml), env(map[string]string{"TOKEN": "s3cret\r\nX-Admin: 1"}))
		var es Errors
		if !errors.As(err, &es) || es[0].Line != 4 || !strings.Contains(es[0].Msg, tc.want) {
			t.Errorf("%s: %v, want an error at line 4 containing %q", tc.name, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the message repeats the value: %v", tc.name, err)
		}
	}
}

func TestMaxInFlight(t *testing.T) {
	if got := DefaultMaxInFlight(64, 3); got != 16 {
		t.Errorf("default of one of three destinations with 64 workers = %d, want 16", got)
	}
	if got := DefaultMaxInFlight(64, 1); got != 64 {
		t.Errorf("default of a lone destination = %d, want every worker", got)
	}
	if got := DefaultMaxInFlight(2, 2); got != 1 {
		t.Errorf("default with 2 workers = %d, want at least 1", got)
	}
	_, err := Parse("d.yaml", []byte("destinations:\n  - name: d\n    base_url: https://x\n    max_in_flight: -1\n"), func(string) (string, bool) { return "", false })
	if err == nil || !strings.Contains(err.Error(), "d.yaml:4:") || !strings.Contains(err.Error(), "max_in_flight must be positive") {
		t.Fatalf("err = %v, want a negative max_in_flight refused at its line", err)
	}
}

func TestClassifyRuleRepairNeedsADeadEndClass(t *testing.T) {
	_, err := Parse("d.yaml", []byte(`destinations:
  - name: a
    base_url: https://x
    classify:
      - {status: 200, body_contains: failed, class: hidden_failure, repair: fix the row}
      - {status: 503, class: transient, repair: wait}
`), env(nil))
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 || es[0].Line != 6 || !strings.Contains(es[0].Msg, "permanent or hidden_failure") {
		t.Fatalf("%v, want one error at line 6", err)
	}
}

// A preset with a documented request budget fills the token bucket of a
// destination that sets none; one that sets its own keeps it.
func TestPresetBudgetIsTheDefaultTokenBucket(t *testing.T) {
	c, err := Parse("d.yaml", []byte(`destinations:
  - name: braze
    preset: braze
    base_url: https://rest.iad-01.braze.com
  - name: braze_slow
    preset: braze
    base_url: https://rest.iad-01.braze.com
    rate_limit: {per_second: 50, burst: 10}
  - name: plain
    base_url: https://api.example
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	// 900 per second plus a burst of 300: never more than 3,000 calls in
	// any 3 seconds, Braze's budget.
	if got := c.Destinations[0].RateLimit; got != (RateLimit{PerSecond: 900, Burst: 300}) {
		t.Errorf("braze default bucket = %+v, want 900/s burst 300", got)
	}
	if got := c.Destinations[1].RateLimit; got != (RateLimit{PerSecond: 50, Burst: 10}) {
		t.Errorf("a configured bucket was replaced: %+v", got)
	}
	if got := c.Destinations[2].RateLimit; got != (RateLimit{}) {
		t.Errorf("a preset without a budget got a bucket: %+v", got)
	}
	if len(c.Warnings) != 0 {
		t.Errorf("warnings for buckets inside the budget: %v", c.Warnings)
	}
}

func TestRateLimitAboveTheBudgetWarns(t *testing.T) {
	c, err := Parse("d.yaml", []byte(`destinations:
  - name: braze
    preset: braze
    base_url: https://rest.iad-01.braze.com
    rate_limit: {per_second: 1000, burst: 3000}
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Warnings) != 1 || c.Warnings[0].Line != 5 || !strings.Contains(c.Warnings[0].Msg, "6000 calls in 3s") {
		t.Fatalf("warnings = %v, want one at line 5 naming 6000 calls in 3s", c.Warnings)
	}
}

func TestConstantBodyOverTheObjectLimitIsRefused(t *testing.T) {
	objects := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = fmt.Sprintf(`{"external_id": "u%d", "plan": "pro"}`, i)
		}
		return "'{\"attributes\": [" + strings.Join(parts[:n/2], ", ") + "], \"events\": [" + strings.Join(parts[n/2:], ", ") + "]}'"
	}
	const tmpl = `sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
destinations:
  - name: braze
    preset: braze
    base_url: https://rest.iad-01.braze.com
flows:
  - name: plans
    source: shop
    events: ["plan.*"]
    entity: event.id
    version: {mode: revision, revision: event.rev}
    state: event.plan
    effects:
      - name: track
        destination: braze
        request:
          path: '"/users/track"'
          body: %s
`
	if _, err := Parse("f.yaml", []byte(fmt.Sprintf(tmpl, objects(75))), env(nil)); err != nil {
		t.Fatalf("75 objects: %v", err)
	}
	_, err := Parse("f.yaml", []byte(fmt.Sprintf(tmpl, objects(76))), env(nil))
	var es Errors
	if !errors.As(err, &es) || es[0].Line != 22 || !strings.Contains(es[0].Msg, "76 objects") || !strings.Contains(es[0].Msg, "at most 75") {
		t.Fatalf("76 objects: %v, want an error at line 22", err)
	}
	// A body built from the payload is counted by Braze, not at load.
	if _, err := Parse("f.yaml", []byte(fmt.Sprintf(tmpl, `'{"attributes": event.items}'`)), env(nil)); err != nil {
		t.Fatalf("payload body: %v", err)
	}
}

func TestSendChangesOnlyDefaultsToThePreset(t *testing.T) {
	c, err := Parse("d.yaml", []byte(`destinations:
  - name: braze
    preset: braze
    base_url: https://rest.iad-01.braze.com
  - name: braze_events
    preset: braze
    base_url: https://rest.iad-01.braze.com
    send_changes_only: false
  - name: crm
    base_url: https://crm.example
  - name: crm_changes
    base_url: https://crm.example
    send_changes_only: true
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false, false, true} {
		if got := c.Destinations[i].ChangesOnly(); got != want {
			t.Errorf("%s: send changes only = %v, want %v", c.Destinations[i].Name, got, want)
		}
	}
}

func TestDryRunNeedsAValidationEndpoint(t *testing.T) {
	c, err := Parse("d.yaml", []byte(`destinations:
  - name: ga4
    preset: ga4-mp
    base_url: https://www.google-analytics.com
    dry_run: true
`), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Destinations[0].DryRun || len(c.Warnings) != 1 || !strings.Contains(c.Warnings[0].Msg, "/debug/mp/collect") {
		t.Errorf("dry run: %v, warnings %v", c.Destinations[0].DryRun, c.Warnings)
	}
	_, err = Parse("d.yaml", []byte("destinations:\n  - name: crm\n    preset: hubspot\n    base_url: https://api.hubapi.com\n    dry_run: true\n"), env(nil))
	var es Errors
	if !errors.As(err, &es) || es[0].Line != 5 || !strings.Contains(es[0].Msg, "ga4-mp") {
		t.Errorf("dry_run on hubspot: %v, want an error at line 5 naming ga4-mp", err)
	}
	_, err = Parse("d.yaml", []byte("destinations:\n  - name: ga4\n    preset: ga4-mp\n    kind: queue\n    base_url: https://x\n    dry_run: true\n"), env(nil))
	if !errors.As(err, &es) || es[0].Line != 6 || !strings.Contains(es[0].Msg, "kind http") {
		t.Errorf("dry_run on a custom kind: %v, want an error at line 6", err)
	}
}

// A URL written with a non-public address and without
// allow_private_networks is a load-time warning, naming the key: every
// call to it would be refused when dialled. With the key, or with a public
// address, there is none.
func TestPrivateAddressLiteralsWarn(t *testing.T) {
	yaml := `sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
    api: {base_url: "http://10.0.0.5/api"}
notifications:
  webhook_url: http://localhost:9000/hook
destinations:
  - {name: local, base_url: "http://127.0.0.1:8080"}
  - {name: metadata, base_url: "http://169.254.169.254"}
  - {name: mapped, base_url: "http://[::ffff:192.168.0.1]"}
  - {name: allowed, base_url: "http://127.0.0.1:8080", allow_private_networks: true}
  - {name: public, base_url: "https://api.example.com"}
`
	c, err := Parse("h.yaml", []byte(yaml), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	text := c.Warnings.Error()
	for _, want := range []string{
		`destination "local": base_url names 127.0.0.1, which is not a public address (loopback (127.0.0.0/8))`,
		`destination "metadata": base_url names 169.254.169.254, which is not a public address (cloud metadata`,
		`destination "mapped": base_url names ::ffff:192.168.0.1, which is not a public address (private (192.168.0.0/16) as IPv4-mapped IPv6)`,
		`source "shop": api.base_url names 10.0.0.5, which is not a public address (private (10.0.0.0/8)): every call to it is refused when dialled unless api.allow_private_networks: true`,
		`notifications.webhook_url names localhost, which is not a public address (loopback)`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no warning %q in:\n%s", want, text)
		}
	}
	if strings.Contains(text, `"allowed"`) || strings.Contains(text, `"public"`) || len(c.Warnings) != 5 {
		t.Errorf("%d warnings:\n%s", len(c.Warnings), text)
	}
}
