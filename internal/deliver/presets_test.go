package deliver

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/hookledger/hookledger/internal/vendors"
)

// recorded is one file of testdata/answers: a preset's answers as the
// vendor documents them, with what classification must make of each.
type recorded struct {
	Preset     string   `json:"preset"`
	Provenance []string `json:"provenance"`
	Answers    []struct {
		Name     string            `json:"name"`
		Status   int               `json:"status"`
		Headers  map[string]string `json:"headers"`
		Body     json.RawMessage   `json:"body"`
		BodyText *string           `json:"body_text"`
		Note     string            `json:"note"`
		Want     struct {
			Class  string   `json:"class"`
			Reason []string `json:"reason"`
			// Repair is a substring of the rule's repair; "" (or absent)
			// means no rule repair, so the worker's generic one applies.
			Repair     string `json:"repair"`
			RetryAfter *struct {
				OK   bool   `json:"ok"`
				Unit string `json:"unit"`
				Wait string `json:"wait"`
			} `json:"retry_after"`
		} `json:"want"`
	} `json:"answers"`
}

// Every recorded answer of every vendor preset, classified as its file
// says: success, hidden failures, permanent errors with their repair,
// quota with or without a usable Retry-After.
func TestPresetsClassifyRecordedAnswers(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "answers", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded answers: %v", err)
	}
	covered := map[string]bool{}
	now := time.Date(2026, 11, 6, 12, 0, 0, 0, time.UTC)
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var rec recorded
		if err := json.Unmarshal(raw, &rec); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(rec.Provenance) == 0 || len(rec.Answers) == 0 {
			t.Fatalf("%s: answers need their provenance", file)
		}
		covered[rec.Preset] = true
		d := dest(t, fmt.Sprintf("  - name: d\n    preset: %s\n    base_url: https://x\n", rec.Preset))
		classes := map[string]bool{}
		for _, a := range rec.Answers {
			name := rec.Preset + ": " + a.Name
			resp := &Response{Status: a.Status, Header: http.Header{}, Sent: true}
			for k, v := range a.Headers {
				resp.Header.Set(k, v)
			}
			switch {
			case a.BodyText != nil:
				resp.Body = []byte(*a.BodyText)
			case a.Body != nil:
				resp.Body = a.Body
			}
			class, reason := Classify(d, resp, nil)
			classes[string(class)] = true
			if string(class) != a.Want.Class {
				t.Errorf("%s: class %s (%s), want %s", name, class, reason, a.Want.Class)
			}
			for _, w := range a.Want.Reason {
				if !strings.Contains(reason, w) {
					t.Errorf("%s: reason %q lacks %q", name, reason, w)
				}
			}
			repair := ruleRepair(d, resp, class)
			if (a.Want.Repair == "") != (repair == "") || !strings.Contains(repair, a.Want.Repair) {
				t.Errorf("%s: repair %q, want one containing %q", name, repair, a.Want.Repair)
			}
			if w := a.Want.RetryAfter; w != nil {
				ra := parseRetryAfter(resp.Header, d.RetryAfter.Unit, d.RetryAfter.Max.D(), now)
				if ra.OK != w.OK || (w.OK && (ra.Unit != w.Unit || ra.Wait.String() != w.Wait)) {
					t.Errorf("%s: Retry-After %+v, want %+v", name, ra, *w)
				}
			}
		}
		// Each file shows success and at least one way the vendor fails.
		if !classes["success"] || len(classes) < 2 {
			t.Errorf("%s: recorded classes %v: want success and failures", file, classes)
		}
	}
	for _, p := range []string{"braze", "ga4-mp", "meta", "google-ads"} {
		if !covered[p] {
			t.Errorf("preset %s has no recorded answers", p)
		}
	}
}

// A rule's Detail puts the vendor's own account in the reason, on one
// line and bounded, whatever the answer holds.
func TestRuleDetailIsBounded(t *testing.T) {
	d := dest(t, "  - name: d\n    preset: google-ads\n    base_url: https://x\n")
	long := strings.Repeat("row refused; ", 100) + "\nX-Injected: 1"
	body, _ := json.Marshal(map[string]any{"partialFailureError": map[string]any{"code": 3, "message": long}})
	class, reason := Classify(d, &Response{Status: 200, Body: body, Sent: true}, nil)
	if class != "hidden_failure" || len(reason) > 700 || strings.ContainsAny(reason, "\r\n") || !strings.Contains(reason, "row refused") {
		t.Fatalf("%s: %q (%d bytes)", class, reason, len(reason))
	}
}

// A detail cut short stays valid UTF-8: the reason is stored as text.
func TestRuleDetailIsCutOnARune(t *testing.T) {
	d := dest(t, "  - name: d\n    preset: google-ads\n    base_url: https://x\n")
	for pad := range 4 {
		msg := strings.Repeat("x", pad) + strings.Repeat("行が拒否されました", 40)
		body, _ := json.Marshal(map[string]any{"partialFailureError": map[string]any{"message": msg}})
		_, reason := Classify(d, &Response{Status: 200, Body: body, Sent: true}, nil)
		if !utf8.ValidString(reason) || !strings.Contains(reason, "行が拒否") {
			t.Fatalf("pad %d: %q", pad, reason)
		}
	}
}

// JSONNonEmpty: an empty errors array, a false flag or null says nothing
// went wrong.
func TestJSONNonEmpty(t *testing.T) {
	for body, want := range map[string]bool{
		`{"e": [1]}`: true, `{"e": {"a": 1}}`: true, `{"e": "x"}`: true, `{"e": 2}`: true, `{"e": true}`: true,
		`{"e": []}`: false, `{"e": {}}`: false, `{"e": ""}`: false, `{"e": 0}`: false, `{"e": false}`: false,
		`{"e": null}`: false, `{}`: false, `[]`: false, `not json`: false,
	} {
		r := vendors.Rule{JSONNonEmpty: "e", Class: "hidden_failure"}
		resp := &Response{Status: 200, Body: []byte(body)}
		got := matchPresetRule(r, resp, func() any {
			var v any
			if json.Unmarshal(resp.Body, &v) != nil {
				return nil
			}
			return v
		})
		if got != want {
			t.Errorf("%s: %v, want %v", body, got, want)
		}
	}
}
