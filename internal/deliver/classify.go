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
			return store.ErrorClass(r.Class), ruleReason(r.Reason, resp.Status, "configured rule")
		}
	}
	if d.PresetData != nil {
		for _, r := range d.PresetData.Rules {
			if r.Status != 0 && r.Status != resp.Status {
				continue
			}
			if r.BodyContains != "" && !bytes.Contains(resp.Body, []byte(r.BodyContains)) {
				continue
			}
			if r.JSONField != "" && !jsonFieldEquals(body(), r.JSONField, r.JSONEquals) {
				continue
			}
			return store.ErrorClass(r.Class), ruleReason(r.Reason, resp.Status, d.Preset+" preset")
		}
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

func ruleReason(reason string, status int, from string) string {
	if reason != "" {
		return fmt.Sprintf("%s (HTTP %d)", reason, status)
	}
	return fmt.Sprintf("HTTP %d matched a %s", status, from)
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
	cur := body
	for _, k := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[k]; !ok {
			return false
		}
	}
	got, err := json.Marshal(cur)
	return err == nil && string(got) == strings.TrimSpace(want)
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
