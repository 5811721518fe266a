// Package openapitest checks the admin API's answers against its OpenAPI
// document (package openapi) in tests: a handler wrapped by Wrap, or a
// client whose transport is Transport, fails the test on any answer the
// document does not allow. The API's tests go through one of them, so
// the document cannot drift from what the code answers without a test
// failing.
package openapitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/hookledger/hookledger/internal/openapi"
)

// prefix is where the document's routes live; other requests (receive,
// health, the console) are not its business.
const prefix = "/api/v1/"

// Validator checks requests and answers against one document.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	loadOnce sync.Once
	loaded   *Validator
	loadErr  error
)

// Load parses and validates a document and builds its router. The
// document's servers are left out of the routing: tests listen on
// loopback ports the document cannot name.
func Load(data []byte) (*Validator, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("openapi: load: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi: the document is not valid: %w", err)
	}
	doc.Servers = nil
	r, err := legacy.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi: router: %w", err)
	}
	return &Validator{doc: doc, router: r}, nil
}

// Default is the Validator of openapi.Document, loaded once per test
// binary.
func Default(tb testing.TB) *Validator {
	tb.Helper()
	loadOnce.Do(func() { loaded, loadErr = Load(openapi.Document) })
	if loadErr != nil {
		tb.Fatal(loadErr)
	}
	return loaded
}

// Doc is the parsed document.
func (v *Validator) Doc() *openapi3.T { return v.doc }

// Check reports how an exchange breaks the document, or nil. Every answer
// under /api/v1/ must be one the document lists for its operation, with
// its status, headers and body. An answer the server accepted (2xx) must
// also have been asked for as the document says, so that the document's
// request schemas are no stricter than the code. A request the document
// has no operation for may only be refused, with the API's error shape.
func (v *Validator) Check(req *http.Request, reqBody []byte, status int, header http.Header, body []byte) error {
	if !strings.HasPrefix(req.URL.Path, prefix) {
		return nil
	}
	what := req.Method + " " + req.URL.RequestURI()
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		return v.checkUndocumented(what, err, status, header, body)
	}
	ctx := context.Background()
	opts := &openapi3filter.Options{
		IncludeResponseStatus: true,
		MultiError:            true,
		SkipSettingDefaults:   true,
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
	}
	opts.WithCustomSchemaErrorFunc(shortSchemaError)
	in := &openapi3filter.RequestValidationInput{Request: cloneRequest(req, reqBody), PathParams: params, Route: route, Options: opts}
	if status >= 200 && status < 300 {
		if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
			return fmt.Errorf("%s was answered %d, but the document does not allow the request: %w", what, status, err)
		}
		in.Request = cloneRequest(req, reqBody)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: header, Options: opts}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("%s answered %d %s: not as the document says: %w", what, status, clip(body), err)
	}
	return nil
}

// checkUndocumented allows what the API answers a request outside the
// document: 401 or 429 (the token is checked before routing), 404 for a
// path it does not serve, 405 for a method; with the API's error body.
func (v *Validator) checkUndocumented(what string, routeErr error, status int, header http.Header, body []byte) error {
	var re *routers.RouteError
	if !errors.As(routeErr, &re) {
		return fmt.Errorf("%s: %w", what, routeErr)
	}
	switch status {
	case http.StatusUnauthorized, http.StatusTooManyRequests, http.StatusNotFound, http.StatusMethodNotAllowed:
	default:
		return fmt.Errorf("%s is not in the document (%s), yet it was answered %d %s", what, re.Reason, status, clip(body))
	}
	if ct := header.Get("Content-Type"); ct != "application/json" {
		return fmt.Errorf("%s (not in the document) answered %d with Content-Type %q, want the API's JSON error", what, status, ct)
	}
	var val any
	if err := json.Unmarshal(body, &val); err != nil {
		return fmt.Errorf("%s (not in the document) answered %d %s: not JSON: %w", what, status, clip(body), err)
	}
	schema := v.doc.Components.Schemas["Error"]
	if schema == nil || schema.Value == nil {
		return errors.New("openapi: the document has no Error schema")
	}
	if err := schema.Value.VisitJSON(val, openapi3.EnableJSONSchema2020()); err != nil {
		return fmt.Errorf("%s (not in the document) answered %d %s: not the Error schema: %w", what, status, clip(body), err)
	}
	return nil
}

// cloneRequest is r with body, for the validator to read. The API reads
// every request body as JSON whatever its Content-Type says (the
// document says so: curl -d sends a form's type), so a body is checked as
// the application/json the document describes.
func cloneRequest(r *http.Request, body []byte) *http.Request {
	c := r.Clone(context.Background())
	c.Body = io.NopCloser(bytes.NewReader(body))
	c.ContentLength = int64(len(body))
	if len(body) > 0 {
		c.Header.Set("Content-Type", "application/json")
	}
	return c
}

// shortSchemaError names where and why a value broke its schema, without
// the schema's full text.
func shortSchemaError(err *openapi3.SchemaError) string {
	if err.Origin != nil {
		return ""
	}
	return "/" + strings.Join(err.JSONPointer(), "/") + ": " + err.Reason
}

func clip(b []byte) string {
	const n = 300
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

// Wrap returns h with every exchange checked: tb.Errorf for one the
// document does not allow.
func Wrap(tb testing.TB, h http.Handler) http.Handler {
	tb.Helper()
	v := Default(tb)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reqBody, err := io.ReadAll(r.Body)
		if err != nil {
			tb.Errorf("openapitest: read the request body: %v", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(reqBody))
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if err := v.Check(r, reqBody, rec.status, w.Header(), rec.body.Bytes()); err != nil {
			tb.Errorf("openapi: %v", err)
		}
	})
}

// recorder passes an answer on and keeps a copy. Unwrap lets
// http.ResponseController reach the connection (a replay's long wait
// extends its write deadline).
type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Transport returns base (http.DefaultTransport when nil) with every
// exchange checked, for tests that call a whole server: tb.Errorf for one
// the document does not allow.
func Transport(tb testing.TB, base http.RoundTripper) http.RoundTripper {
	tb.Helper()
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{tb: tb, v: Default(tb), base: base}
}

type transport struct {
	tb   testing.TB
	v    *Validator
	base http.RoundTripper
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	var reqBody []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		reqBody = b
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := t.v.Check(req, reqBody, resp.StatusCode, resp.Header, body); err != nil {
		t.tb.Errorf("openapi: %v", err)
	}
	return resp, nil
}
