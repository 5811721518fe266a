package server

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/hookledger/hookledger/internal/openapi/openapitest"
)

// pathParam is a {name} in an OpenAPI path.
var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// The OpenAPI document describes exactly the API the server mounts: every
// operation it documents is served by a route the admin API registered
// (not the 404 for unknown paths), and every registered route serves at
// least one documented operation. The routes come from the running
// server's handler, so a route added without its document fails here.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	rcv := newReceiver(t)
	h := startWith(t, publishConfig(sqliteURL(t), rcv.srv.URL+"/hooks/in"))
	h.srv.mu.Lock()
	handler := h.srv.api
	h.srv.mu.Unlock()
	routes := handler.Routes()
	if len(routes) == 0 {
		t.Fatal("the server registered no admin API routes")
	}
	doc := openapitest.Default(t).Doc()
	served := map[string][]string{}
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		for method, op := range item.Operations() {
			url := pathParam.ReplaceAllStringFunc(path, func(p string) string {
				return exampleValue(item, op, strings.Trim(p, "{}"))
			})
			route := handler.Route(httptest.NewRequest(method, url, nil))
			if route == "" {
				t.Errorf("%s %s is documented but no route of the server serves it", method, path)
				continue
			}
			served[route] = append(served[route], method+" "+path)
		}
	}
	for _, route := range routes {
		if len(served[route]) == 0 {
			t.Errorf("the server registers %q, which docs/openapi.yaml does not describe", route)
		}
	}
	// The document's own listing is part of the API.
	if !slices.Contains(routes, "GET /api/v1/openapi.yaml") {
		t.Errorf("routes %v lack GET /api/v1/openapi.yaml", routes)
	}
	keys := make([]string, 0, len(served))
	for k := range served {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("%-45s serves %s", k, strings.Join(served[k], ", "))
	}
}

// exampleValue is a value of a path parameter that its schema allows: a
// positive integer for an integer, else a word.
func exampleValue(item *openapi3.PathItem, op *openapi3.Operation, name string) string {
	for _, params := range []openapi3.Parameters{op.Parameters, item.Parameters} {
		if p := params.GetByInAndName(openapi3.ParameterInPath, name); p != nil && p.Schema != nil && p.Schema.Value != nil {
			if p.Schema.Value.Type.Is(openapi3.TypeInteger) {
				return "1"
			}
		}
	}
	return "acme"
}

// GET /api/v1/openapi.yaml answers the document, byte for byte, behind
// the admin token.
func TestOpenAPIServed(t *testing.T) {
	rcv := newReceiver(t)
	h := startWith(t, publishConfig(sqliteURL(t), rcv.srv.URL+"/hooks/in"))
	code, body, hdr := h.call(http.MethodGet, "/api/v1/openapi.yaml", "", adminToken)
	if code != http.StatusOK || hdr.Get("Content-Type") != "application/yaml" {
		t.Fatalf("GET /api/v1/openapi.yaml: %d %s", code, hdr.Get("Content-Type"))
	}
	if !strings.HasPrefix(string(body), "openapi: 3.1.0\n") {
		t.Fatalf("GET /api/v1/openapi.yaml answered %.80q, want the document", body)
	}
	if code, _, _ := h.call(http.MethodGet, "/api/v1/openapi.yaml", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d, want 401", code)
	}
}

// Every documented operation refuses a request without the token as the
// document says (401 with WWW-Authenticate and the error body), and a
// locked-out address as it says too (429 with Retry-After), the token
// being checked before any route: each answer goes through the
// validating transport. Each 401 comes from an address of its own, so
// that the count of wrong tokens does not turn it into a 429.
func TestOpenAPIAuthAnswersOfEveryOperation(t *testing.T) {
	rcv := newReceiver(t)
	h := startWith(t, publishConfig(sqliteURL(t), rcv.srv.URL+"/hooks/in"))
	doc := openapitest.Default(t).Doc()
	type operation struct{ method, url string }
	var ops []operation
	for _, path := range doc.Paths.InMatchingOrder() {
		item := doc.Paths.Value(path)
		for method, op := range item.Operations() {
			url := pathParam.ReplaceAllStringFunc(path, func(p string) string {
				return exampleValue(item, op, strings.Trim(p, "{}"))
			})
			ops = append(ops, operation{method, url})
		}
	}
	do := func(c *http.Client, o operation, tok string) int {
		t.Helper()
		req, err := http.NewRequest(o.method, h.base+o.url, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		return send(t, c, req).StatusCode
	}
	validating := func(ip string) *http.Client {
		c := from(t, ip)
		c.Transport = openapitest.Transport(t, c.Transport)
		return c
	}
	for i, o := range ops {
		if code := do(validating(fmt.Sprintf("127.0.1.%d", i+1)), o, ""); code != http.StatusUnauthorized {
			t.Errorf("%s %s without a token: %d, want 401", o.method, o.url, code)
		}
	}
	guesser := validating("127.0.2.1")
	for range 10 {
		do(guesser, ops[0], "wrong")
	}
	for _, o := range ops {
		if code := do(guesser, o, adminToken); code != http.StatusTooManyRequests {
			t.Errorf("%s %s from a locked-out address: %d, want 429", o.method, o.url, code)
		}
	}
}
