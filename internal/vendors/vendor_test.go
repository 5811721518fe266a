package vendors

import (
	"strings"
	"testing"
	"time"
)

func TestCatalogueIsWellFormed(t *testing.T) {
	seen := map[string]string{}
	for _, c := range Catalogue() {
		if c.Name != Normalize(c.Name) {
			t.Errorf("%s: name is not in catalogue spelling (want %q)", c.Name, Normalize(c.Name))
		}
		for _, n := range append([]string{c.Name}, c.Aliases...) {
			if prev, dup := seen[Normalize(n)]; dup {
				t.Errorf("name %q used by both %s and %s", n, prev, c.Name)
			}
			seen[Normalize(n)] = c.Name
		}
		if c.Title == "" || c.Source == "" || c.Kind == "" {
			t.Errorf("%s: title, source and kind are required", c.Name)
		}
		if _, err := time.Parse(time.DateOnly, c.Read); err != nil {
			t.Errorf("%s: read date %q: %v", c.Name, c.Read, err)
		}
		var prev time.Duration
		for i, d := range c.RetrySchedule {
			if d <= prev {
				t.Errorf("%s: retry schedule step %d (%s) does not follow %s", c.Name, i, d, prev)
			}
			prev = d
		}
		if n := len(c.RetrySchedule); n > 0 {
			if n != c.Retries {
				t.Errorf("%s: schedule has %d steps but Retries is %d", c.Name, n, c.Retries)
			}
			if c.RetrySchedule[n-1] != c.RetryWindow {
				t.Errorf("%s: last retry at %s but RetryWindow is %s", c.Name, c.RetrySchedule[n-1], c.RetryWindow)
			}
		}
	}
}

func TestCatalogueFigures(t *testing.T) {
	ix := NewIndex()
	tests := []struct {
		name       string
		window     time.Duration
		windowName string
		ack        time.Duration
	}{
		{"stripe", 30 * Day, "manual resend window", 0},
		{"hubspot-app", 24 * time.Hour, "retry window", 5 * time.Second},
		{"hubspot-journal", 3 * Day, "replay window", 0},
		{"hubspot-workflow", 3 * Day, "retry window", 0},
		{"pipedrive", 150 * time.Second, "retry window", 10 * time.Second},
		{"klaviyo-flow", 24 * time.Hour, "retry window", 0},
		{"klaviyo-system", 48 * time.Hour, "retry window", 5 * time.Second},
		{"segment", 4 * time.Hour, "retry window", 0},
		{"make", 7*time.Hour + 51*time.Minute, "retry window", 0},
		{"zapier", 60 * Day, "replay window", 0},
		{"n8n", 20 * time.Second, "retry window", 0},
	}
	for _, tt := range tests {
		c, ok := ix.Lookup(tt.name)
		if !ok {
			t.Errorf("%s: not in the catalogue", tt.name)
			continue
		}
		w, ok := c.LongestWindow()
		if !ok || w.Duration != tt.window || w.Name != tt.windowName {
			t.Errorf("%s: longest window = %s %s (ok=%v), want %s %s", tt.name, w.Name, w.Duration, ok, tt.windowName, tt.window)
		}
		if c.AckTimeout != tt.ack {
			t.Errorf("%s: ack timeout = %s, want %s", tt.name, c.AckTimeout, tt.ack)
		}
	}
	if c, _ := ix.Lookup("hubspot-workflow"); c.RetryAfterHonoured != unitMilliseconds {
		t.Errorf("hubspot-workflow reads Retry-After in %q, want milliseconds", c.RetryAfterHonoured)
	}
	if c, _ := ix.Lookup("meta"); c.DedupeWindow != 48*time.Hour {
		t.Errorf("meta dedupe window = %s, want 48h", c.DedupeWindow)
	}
	if c, _ := ix.Lookup("stripe"); c.IdempotencyKeyWindow != 24*time.Hour {
		t.Errorf("stripe idempotency key window = %s, want 24h", c.IdempotencyKeyWindow)
	}
	if _, ok := (Contract{}).LongestWindow(); ok {
		t.Error("a contract without windows reports a longest window")
	}
}

func TestLookupSpellings(t *testing.T) {
	ix := NewIndex()
	for _, name := range []string{"Stripe", " stripe ", "HubSpot", "hubspot_app", "Klaviyo System", "GOOGLE-ADS"} {
		if _, ok := ix.Lookup(name); !ok {
			t.Errorf("Lookup(%q) found nothing", name)
		}
	}
	for _, name := range []string{"", "klaviyo", "stripe-connect", "salesforce"} {
		if c, ok := ix.Lookup(name); ok {
			t.Errorf("Lookup(%q) = %s, want no match", name, c.Name)
		}
	}
	if c, _ := ix.Lookup("hubspot"); c.Name != "hubspot-app" {
		t.Errorf("alias hubspot resolves to %q", c.Name)
	}
}

func TestCatalogueReturnsACopy(t *testing.T) {
	a := Catalogue()
	a[0].Title = "changed"
	a[0].Notes[0] = "changed"
	b := Catalogue()
	if b[0].Title == "changed" || b[0].Notes[0] == "changed" {
		t.Fatal("changing one catalogue copy changed another")
	}
	names := Names()
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Fatalf("names not sorted: %v", names)
		}
	}
}

func TestNewCatalogueEntries(t *testing.T) {
	ix := NewIndex()
	for _, name := range []string{"braze", "ga4-mp", "GA4", "meta", "google-ads"} {
		c, ok := ix.Lookup(name)
		if !ok {
			t.Errorf("%s: not in the catalogue", name)
			continue
		}
		if c.Kind != kindDestination {
			t.Errorf("%s: kind %s, want destination", name, c.Kind)
		}
	}
	braze, _ := ix.Lookup("braze")
	if notes := strings.Join(braze.Notes, " "); !strings.Contains(notes, "3,000 requests per 3 seconds") || !strings.Contains(notes, "75 objects") || !strings.Contains(notes, "send changes only") {
		t.Errorf("braze notes: %s", notes)
	}
	ga4, _ := ix.Lookup("ga4-mp")
	if notes := strings.Join(ga4.Notes, " "); !strings.Contains(notes, "no HTTP error") || !strings.Contains(notes, "validationMessages") {
		t.Errorf("ga4-mp notes: %s", notes)
	}
	// Destinations resend nothing on their own: no window for IP03.
	if _, ok := braze.LongestWindow(); ok {
		t.Error("braze states a window")
	}
}
