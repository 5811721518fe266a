package deliver

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"unicode"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/expr"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/vendors"
)

// classSuccess is the pseudo-class of an answer that did the work.
const classSuccess store.ErrorClass = "success"

// Classify decides what an answer means (RT03), by status AND body: the
// destination's own rules first, then its preset's, then the defaults.
// A transport error (resp without status) is transient before the request
// was sent and an unknown outcome after.
func Classify(d *config.Destination, resp *Response, callErr error) (store.ErrorClass, string) {
	if callErr != nil || resp == nil || resp.Status == 0 {
		// An action's error may name the URL it called; the reason is
		// stored, logged and sent on, so it names it without secrets.
		callErr = outbound.RedactError(callErr)
		if ae := outbound.AsAddressError(callErr); ae != nil {
			// The address is what it is on every attempt: permanent.
			return store.ClassPermanent, fmt.Sprintf("request not sent: %v (destination %s)", ae, d.Name)
		}
		if outbound.IsRequestError(callErr) {
			// Refused before sending (a path leaving base_url, a header
			// with CR or LF): the same request is refused every time.
			return store.ClassPermanent, fmt.Sprintf("request refused before sending: %v", callErr)
		}
		if resp != nil && resp.Sent {
			return store.ClassUnknown, fmt.Sprintf("no answer after the request was sent: %v", callErr)
		}
		return store.ClassTransient, fmt.Sprintf("request not sent: %v", callErr)
	}
	if d.Kind == config.KindEndpoint {
		return classifyEndpoint(resp.Status)
	}
	if v, ok := matchRules(d, resp); ok {
		return v.class, v.reason
	}
	s := resp.Status
	switch {
	case s >= 200 && s < 300:
		return classSuccess, ""
	case s == http.StatusTooManyRequests:
		return store.ClassQuota, "HTTP 429: rate limited"
	case s == http.StatusConflict:
		// IETF Idempotency-Key: the first request with this key is still
		// being processed.
		return store.ClassContention, "HTTP 409: conflicting request in progress"
	case s == http.StatusRequestTimeout:
		return store.ClassTransient, "HTTP 408: the destination timed out reading the request"
	case s >= 500:
		return store.ClassTransient, fmt.Sprintf("HTTP %d", s)
	case s >= 300 && s < 400:
		// Never followed (the request and its credentials would go to an
		// address nobody configured), so it did nothing: permanent (RT06).
		return store.ClassPermanent, redirectReason(d.Name, resp)
	default:
		// 400, 401, 403, 404, 422 ...: retrying cannot help (RT06).
		return store.ClassPermanent, fmt.Sprintf("HTTP %d", s)
	}
}

// verdict is what the first matching classification rule decided.
type verdict struct {
	class  store.ErrorClass
	reason string
	// repair is the rule's suggested repair, if it has one.
	repair string
}

// matchRules applies the destination's own rules, then its preset's, and
// reports the first that matches.
func matchRules(d *config.Destination, resp *Response) (verdict, bool) {
	// The body is decoded only for a rule that reads it, at most once: most
	// answers match no such rule, and this runs for every call.
	body := sync.OnceValue(func() any {
		if b := bytes.TrimSpace(resp.Body); len(b) > 0 && (b[0] == '{' || b[0] == '[') {
			v, _ := expr.DecodeJSON(b)
			return v
		}
		return nil
	})
	for i, r := range d.Classify {
		if matchConfigRule(r, d.Compiled, i, resp, body) {
			return verdict{store.ErrorClass(r.Class), ruleReason(r.Reason, resp.Status, "configured rule"), r.Repair}, true
		}
	}
	if d.PresetData != nil {
		for _, r := range d.PresetData.Rules {
			if !matchPresetRule(r, resp, body) {
				continue
			}
			reason := ruleReason(r.Reason, resp.Status, d.Preset+" preset")
			if r.Detail != "" {
				if v, ok := jsonPath(body(), r.Detail); ok {
					reason += ": " + detailText(v)
				}
			}
			return verdict{store.ErrorClass(r.Class), reason, r.Repair}, true
		}
	}
	return verdict{}, false
}

// ruleRepair is the suggested repair of the rule that classified resp as
// class, or "" when no such rule matched or it has none: the worker's
// generic repair then applies.
func ruleRepair(d *config.Destination, resp *Response, class store.ErrorClass) string {
	if resp == nil || resp.Status == 0 {
		return ""
	}
	if v, ok := matchRules(d, resp); ok && v.class == class {
		return v.repair
	}
	return ""
}

func matchPresetRule(r vendors.Rule, resp *Response, body func() any) bool {
	if r.Status != 0 && r.Status != resp.Status {
		return false
	}
	if r.BodyContains != "" && !bytes.Contains(resp.Body, []byte(r.BodyContains)) {
		return false
	}
	if r.JSONField != "" && !jsonFieldEquals(body(), r.JSONField, r.JSONEquals) {
		return false
	}
	if r.JSONNonEmpty != "" {
		v, ok := jsonPath(body(), r.JSONNonEmpty)
		if !ok || isEmpty(v) {
			return false
		}
	}
	return true
}

func ruleReason(reason string, status int, from string) string {
	if reason != "" {
		return fmt.Sprintf("%s (HTTP %d)", reason, status)
	}
	return fmt.Sprintf("HTTP %d matched a %s", status, from)
}

// detailText renders a value from an answer for a reason: a string as it
// is, anything else as compact JSON, on one line and at most 500 bytes.
func detailText(v any) string {
	s, ok := v.(string)
	if !ok {
		b, err := json.Marshal(v)
		if err != nil {
			return ""
		}
		s = string(b)
	}
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	// Cut on a rune boundary: the reason is stored as text, and
	// PostgreSQL refuses invalid UTF-8.
	return strings.ToValidUTF8(excerpt([]byte(s), 500), "")
}

func matchConfigRule(r config.ClassifyRule, cd *config.CompiledDest, i int, resp *Response, jsonBody func() any) bool {
	if r.Status != 0 && r.Status != resp.Status {
		return false
	}
	if r.BodyContains != "" && !bytes.Contains(resp.Body, []byte(r.BodyContains)) {
		return false
	}
	if cd != nil && i < len(cd.Rules) && cd.Rules[i] != nil {
		body := jsonBody()
		if body == nil {
			body = string(resp.Body)
		}
		ok, err := cd.Rules[i].EvalBool(expr.Vars{
			expr.VarStatus: int64(resp.Status), expr.VarHeaders: lowerHeaders(resp.Header), expr.VarBody: body,
		})
		if err != nil || !ok {
			return false
		}
	}
	return true
}

func lowerHeaders(h http.Header) map[string]any {
	out := make(map[string]any, len(h))
	for k, v := range h {
		out[strings.ToLower(k)] = strings.Join(v, ", ")
	}
	return out
}

// jsonFieldEquals compares a dotted field of a JSON body with a JSON
// literal ("false", "\"ERROR\"", "3").
func jsonFieldEquals(body any, path, want string) bool {
	cur, ok := jsonPath(body, path)
	if !ok {
		return false
	}
	got, err := json.Marshal(cur)
	return err == nil && string(got) == strings.TrimSpace(want)
}

// jsonPath follows a dotted path of object keys into a decoded JSON body.
func jsonPath(body any, path string) (any, bool) {
	cur := body
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// isEmpty reports a JSON value that says nothing: null, false, 0, "",
// [] or {}.
func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		return x == ""
	case int64:
		return x == 0
	case float64:
		return x == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// redirectReason says that the destination redirected and where to, the
// Location cut to scheme, host and path (a query string may hold a token).
func redirectReason(dest string, resp *Response) string {
	loc := strings.TrimSpace(resp.Header.Get("Location"))
	if loc == "" {
		return fmt.Sprintf("HTTP %d: %s redirected without a Location; redirects are not followed", resp.Status, dest)
	}
	loc = excerpt([]byte(outbound.RedactURL(loc)), 300)
	if strings.ContainsFunc(loc, unicode.IsControl) {
		loc = fmt.Sprintf("%q", loc)
	}
	return fmt.Sprintf("HTTP %d: %s redirected to %s; redirects are not followed", resp.Status, dest, loc)
}

// isRedirect reports a 3xx answer.
func isRedirect(resp *Response) bool {
	return resp != nil && resp.Status >= 300 && resp.Status < 400
}

// classifyEndpoint reads an endpoint's answer as the Standard Webhooks
// spec says: 2xx is success and anything else a failure to retry on the
// schedule (3xx included: the endpoint moved, and a redirect is never
// followed), except 410 Gone, which asks the sender to stop: the endpoint
// is disabled (by the action) and the message parked.
func classifyEndpoint(status int) (store.ErrorClass, string) {
	switch {
	case status >= 200 && status < 300:
		return classSuccess, ""
	case status == http.StatusGone:
		return store.ClassPermanent, "HTTP 410 Gone: the endpoint asked not to be sent more messages, so it is disabled"
	case status == http.StatusTooManyRequests:
		return store.ClassQuota, "HTTP 429: rate limited"
	default:
		return store.ClassTransient, fmt.Sprintf("HTTP %d", status)
	}
}
