package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/expr"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/store"
)

// Some vendors answer success to requests they then drop (GA4's
// Measurement Protocol answers 2xx even for a malformed event), so the
// worker's classification cannot see the failure. Their validation
// endpoint can: the same request, checked and never recorded. This file
// sends stored requests there, for hookledger validate and for
// destinations with dry_run.

// ErrNoValidation is returned for a destination whose preset has no
// validation endpoint.
var ErrNoValidation = errors.New("no validation endpoint")

// ValidationMessage is one finding of a validation server (GA4:
// fieldPath, description, validationCode).
type ValidationMessage struct {
	FieldPath      string `json:"field_path"`
	Description    string `json:"description"`
	ValidationCode string `json:"validation_code"`
}

// Validation is what a validation server said about one request.
type Validation struct {
	// Status is the HTTP status of its answer.
	Status int
	// Messages are its findings; none means the request is valid.
	Messages []ValidationMessage
}

// Validate sends an effect's stored request to its destination's
// validation endpoint and returns the findings. It sends what the worker
// would (method, query, headers, body, credentials, idempotency key) to
// the validation path instead of the live one, and changes nothing in the
// ledger.
func Validate(ctx context.Context, client *http.Client, d *config.Destination, e *store.Effect) (*Validation, error) {
	if d.PresetData == nil || d.PresetData.Validation == nil {
		return nil, fmt.Errorf("destination %s (preset %s): %w", d.Name, d.Preset, ErrNoValidation)
	}
	if d.Kind != "http" {
		return nil, fmt.Errorf("destination %s: kind %s: only http destinations can be validated", d.Name, d.Kind)
	}
	call, err := storedCall(d, e.EpisodeKey, e.Request)
	if err != nil {
		return nil, fmt.Errorf("effect %d: %w", e.ID, err)
	}
	call.Validate = true
	resp, err := (&HTTPAction{Client: client}).Do(ctx, call)
	if err != nil {
		// Do names URLs without query string or userinfo.
		return nil, fmt.Errorf("effect %d: %w", e.ID, err)
	}
	v, err := validationMessages(d, resp)
	if err != nil {
		return nil, fmt.Errorf("effect %d: %w", e.ID, err)
	}
	return v, nil
}

// validationMessages reads a validation server's answer. An answer
// without the messages field is an error, not a pass: it is not what a
// validation server says, and the request may have gone to the live
// endpoint (where GA4 answers an empty 2xx to anything).
func validationMessages(d *config.Destination, resp *Response) (*Validation, error) {
	field := d.PresetData.Validation.Messages
	if resp.Status < 200 || resp.Status > 299 {
		return nil, fmt.Errorf("the validation server answered HTTP %d: %s", resp.Status, detailText(excerpt(resp.Body, 300)))
	}
	body, err := expr.DecodeJSON(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("the validation server's answer (HTTP %d) is not JSON: %q", resp.Status, excerpt(resp.Body, 100))
	}
	raw, ok := jsonPath(body, field)
	if !ok {
		return nil, fmt.Errorf("the validation server's answer (HTTP %d) has no %s", resp.Status, field)
	}
	list, ok := raw.([]any)
	if !ok && raw != nil {
		return nil, fmt.Errorf("the validation server's %s is not a list", field)
	}
	v := &Validation{Status: resp.Status, Messages: []ValidationMessage{}}
	for _, item := range list {
		m, _ := item.(map[string]any)
		str := func(k string) string { s, _ := m[k].(string); return s }
		v.Messages = append(v.Messages, ValidationMessage{FieldPath: str("fieldPath"), Description: str("description"), ValidationCode: str("validationCode")})
	}
	return v, nil
}

// validationURL moves u from the preset's live endpoint to its validation
// twin (/mp/collect to /debug/mp/collect), keeping host and query. A call
// to any other path is refused before sending: it cannot be validated,
// and sending it live would defeat a dry run.
func validationURL(d *config.Destination, u *url.URL) (*url.URL, error) {
	if d.PresetData == nil || d.PresetData.Validation == nil {
		return nil, &outbound.RequestError{Field: "path", Msg: fmt.Sprintf("destination %s (preset %s) has no validation endpoint", d.Name, d.Preset)}
	}
	v := d.PresetData.Validation
	p := u.EscapedPath()
	if p != v.PathFrom && !strings.HasPrefix(p, strings.TrimSuffix(v.PathFrom, "/")+"/") {
		return nil, &outbound.RequestError{Field: "path", Msg: fmt.Sprintf("path %s is not the %s endpoint %s, so it cannot go to its validation endpoint %s",
			outbound.RedactURL(p), d.PresetData.Title, v.PathFrom, v.PathTo)}
	}
	esc := v.PathTo + strings.TrimPrefix(p, v.PathFrom)
	plain, err := url.PathUnescape(esc)
	if err != nil {
		return nil, &outbound.RequestError{Field: "path", Msg: fmt.Sprintf("validation path: %v", err)}
	}
	out := *u
	out.Path, out.RawPath = plain, esc
	return &out, nil
}

// storedCall builds the call for a stored request: method (POST by
// default), path, query, headers, JSON body, and the idempotency key
// (IdempotencyKey: the episode key or its hashed form) in the
// destination's idempotency header. The key is derived, never random, so
// every attempt and every worker sends the same key for the same effect
// (IP02). The worker adds the causation headers; a validation, no step of
// any chain, sends none.
func storedCall(d *config.Destination, episodeKey string, raw json.RawMessage) (*Call, error) {
	var r storedRequest
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, fmt.Errorf("decode request: %w", err)
	}
	call := &Call{Destination: d, Method: r.Method, Path: r.Path, Query: r.Query, Header: http.Header{}, EpisodeKey: episodeKey}
	if call.Method == "" {
		call.Method = http.MethodPost
	}
	for k, v := range r.Headers {
		call.Header.Set(k, v)
	}
	switch {
	case len(r.BodyBase64) > 0:
		// As received: the stored Content-Type goes with it.
		call.Body = r.BodyBase64
	case len(r.Body) > 0:
		call.Body = r.Body
		call.Header.Set("Content-Type", "application/json")
	}
	if key := IdempotencyKey(d, episodeKey); key != "" {
		call.Header.Set(d.Idem.Header, key)
		call.IdempotencyKey = key
	}
	if err := checkCall(call); err != nil {
		return nil, err
	}
	return call, nil
}
