package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// The destination contracts the presets are built on are in the
// catalogue, in both formats, with their figures and dates.
func TestVendorsShowsDestinationContracts(t *testing.T) {
	code, out, errOut := runMain(t, "vendors")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{
		"braze: Braze /users/track (destination)\n  read 2026-11-06 from braze.com docs\n",
		"  - 3,000 requests per 3 seconds on data-point contracts; MAU contracts add an hourly limit.\n",
		"  - Up to 75 objects per request across attributes, events and purchases.\n",
		"ga4-mp: Google Analytics 4 Measurement Protocol (destination)\n  read 2026-11-01 from Google Analytics developer documentation\n  also written           ga4\n",
		"/debug/mp/collect",
		"meta: Meta pixel and Conversions API (destination)",
		"google-ads: Google Ads click conversion uploads (destination)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text output lacks %q", want)
		}
	}
	code, out, _ = runMain(t, "vendors", "--format", "json")
	var got struct {
		Vendors []struct {
			Name, Kind, Read string
			Aliases          []string
			Notes            []string
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("json: exit %d: %s", code, out)
	}
	seen := map[string]bool{}
	for _, v := range got.Vendors {
		if v.Name == "braze" || v.Name == "ga4-mp" {
			seen[v.Name] = true
			if v.Kind != "destination" || v.Read == "" || len(v.Notes) == 0 {
				t.Errorf("%s: %+v", v.Name, v)
			}
		}
	}
	if !seen["braze"] || !seen["ga4-mp"] {
		t.Errorf("json lacks braze or ga4-mp: %v", seen)
	}
}
