package vendors

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// classes the delivery worker knows; config.Classes, which this package
// cannot import.
var classes = []string{"success", "transient", "quota", "contention", "permanent", "hidden_failure"}

func TestPresetsAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range Presets() {
		if seen[p.Name] {
			t.Errorf("preset %s defined twice", p.Name)
		}
		seen[p.Name] = true
		if p.Name != Normalize(p.Name) || p.Title == "" || p.Source == "" {
			t.Errorf("%s: name in catalogue spelling, title and source are required", p.Name)
		}
		if _, err := time.Parse(time.DateOnly, p.Read); err != nil {
			t.Errorf("%s: read date %q: %v", p.Name, p.Read, err)
		}
		if p.RetryAfterUnit != unitSeconds && p.RetryAfterUnit != unitMilliseconds {
			t.Errorf("%s: Retry-After unit %q", p.Name, p.RetryAfterUnit)
		}
		if p.IdempotencyHeader != "" && p.IdempotencyWindow <= 0 {
			t.Errorf("%s: an idempotency header needs the window the vendor keeps keys", p.Name)
		}
		// A vendor that limits the key's length gets the fixed-length
		// hashed key unless a destination says otherwise.
		if p.IdempotencyKeyMax > 0 && !p.HashIdempotencyKey {
			t.Errorf("%s: documents a key limit of %d but does not hash keys by default", p.Name, p.IdempotencyKeyMax)
		}
		if (p.IdempotencyKeyMax > 0 || p.HashIdempotencyKey) && p.IdempotencyHeader == "" {
			t.Errorf("%s: a key limit or hashed keys without an idempotency header", p.Name)
		}
		if (p.MaxObjects > 0) != (len(p.ObjectArrays) > 0) {
			t.Errorf("%s: MaxObjects and ObjectArrays go together", p.Name)
		}
		if v := p.Validation; v != nil && (!strings.HasPrefix(v.PathFrom, "/") || !strings.HasPrefix(v.PathTo, "/") || v.Messages == "") {
			t.Errorf("%s: validation endpoint %+v", p.Name, v)
		}
		for i, r := range p.Rules {
			if !slices.Contains(classes, r.Class) {
				t.Errorf("%s rule %d: class %q", p.Name, i, r.Class)
			}
			if r.Status == 0 && r.BodyContains == "" && r.JSONField == "" && r.JSONNonEmpty == "" {
				t.Errorf("%s rule %d matches every answer", p.Name, i)
			}
			if r.Reason == "" {
				t.Errorf("%s rule %d has no reason", p.Name, i)
			}
			// The worker shows a repair only with an effect it gives up on.
			if r.Repair != "" && r.Class != "permanent" && r.Class != "hidden_failure" {
				t.Errorf("%s rule %d: a repair on class %s is never shown", p.Name, i, r.Class)
			}
		}
	}
	for _, name := range []string{"generic", "stripe", "hubspot", "salesforce", "marketo", "klaviyo", "braze", "ga4-mp", "meta", "google-ads"} {
		if !seen[name] {
			t.Errorf("preset %s is missing", name)
		}
	}
}

// The figures the issue names, as the presets carry them.
func TestNewPresetFigures(t *testing.T) {
	braze, _ := PresetByName("braze")
	if braze.Budget != (Budget{Requests: 3000, Per: 3 * time.Second}) || braze.MaxObjects != 75 || !braze.SendChangesOnly ||
		!slices.Equal(braze.ObjectArrays, []string{"attributes", "events", "purchases"}) {
		t.Errorf("braze: budget %+v, max objects %d over %v, send changes only %v", braze.Budget, braze.MaxObjects, braze.ObjectArrays, braze.SendChangesOnly)
	}
	ga4, _ := PresetByName("ga4-mp")
	if ga4.Validation == nil || ga4.Validation.PathTo != "/debug/mp/collect" || ga4.Validation.Messages != "validationMessages" {
		t.Errorf("ga4-mp validation endpoint %+v", ga4.Validation)
	}
	meta, _ := PresetByName("meta")
	if meta.IdempotencyWindow != 48*time.Hour || meta.DedupeKey != "event_id + event_name" || meta.IdempotencyHeader != "" {
		t.Errorf("meta: window %s, key %q, header %q", meta.IdempotencyWindow, meta.DedupeKey, meta.IdempotencyHeader)
	}
	stripe, _ := PresetByName("stripe")
	if stripe.IdempotencyKeyMax != 255 || !stripe.HashIdempotencyKey {
		t.Errorf("stripe: key limit %d, hashed keys %v; Stripe takes keys up to 255 characters with no personal data", stripe.IdempotencyKeyMax, stripe.HashIdempotencyKey)
	}
	ads, _ := PresetByName("google-ads")
	if ads.DedupeKey != "order_id per conversion action" {
		t.Errorf("google-ads dedupe key %q", ads.DedupeKey)
	}
	// The permanent error must be recognised before the partial failure
	// it may travel in.
	if len(ads.Rules) < 3 || !strings.Contains(ads.Rules[0].BodyContains, "CUSTOMER_NOT_ALLOWLISTED") || !strings.Contains(ads.Rules[0].Repair, "Data Manager API") {
		t.Errorf("google-ads rules %+v", ads.Rules)
	}
	for _, p := range Presets() {
		if p.SendChangesOnly && p.Name != "braze" {
			t.Errorf("%s sends changes only; only braze documents data points", p.Name)
		}
	}
}

func TestBudgetBucketNeverExceedsTheBudget(t *testing.T) {
	for _, b := range []Budget{
		{3000, 3 * time.Second}, {100, time.Second}, {1000, time.Hour}, {7, 10 * time.Second}, {2, time.Second},
	} {
		rate, burst, ok := b.Bucket()
		if !ok || rate <= 0 || burst < 1 {
			t.Errorf("%+v: rate %v burst %d ok %v", b, rate, burst, ok)
			continue
		}
		// The most a token bucket allows over any span of Per.
		if most := rate*b.Per.Seconds() + float64(burst); most > float64(b.Requests)+1e-9 {
			t.Errorf("%+v: per_second %v, burst %d allow %v in %s", b, rate, burst, most, b.Per)
		}
	}
	rate, burst, _ := Budget{3000, 3 * time.Second}.Bucket()
	if rate != 900 || burst != 300 {
		t.Errorf("braze bucket = %v/s burst %d, want 900/s burst 300", rate, burst)
	}
	for _, b := range []Budget{{}, {Requests: 1, Per: time.Second}, {Requests: 10}} {
		if _, _, ok := b.Bucket(); ok {
			t.Errorf("budget %+v gives a bucket", b)
		}
	}
}
