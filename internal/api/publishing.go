package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/publish"
	"github.com/hookledger/hookledger/internal/store"
)

// paramName is a body field as errors name it: secret_kind, types[2].
var paramName = regexp.MustCompile(`^[a-z_]+(\[\d+\])?$`)

// Publisher is what the publishing resources need.
type Publisher interface {
	Publish(ctx context.Context, key, fingerprint string, m *publish.Message, actor string) (*publish.Result, error)
	Create(ctx context.Context, in *publish.EndpointInput, actor string) (*store.Endpoint, error)
	Get(ctx context.Context, id string) (*store.Endpoint, error)
	List(ctx context.Context) ([]*store.Endpoint, error)
	Update(ctx context.Context, id string, in *publish.EndpointInput, actor string) (*store.Endpoint, error)
	Delete(ctx context.Context, id, actor string) error
	Rotate(ctx context.Context, id, key, kind string, overlap time.Duration, actor string) (*store.Endpoint, store.EndpointSecret, error)
	Backlogs(ctx context.Context) (map[string]publish.Counts, error)
}

// ServePublishing adds POST /api/v1/messages and /api/v1/endpoints.
// maxPayload bounds a publish request's body (413 above it).
func (h *Handler) ServePublishing(p Publisher, maxPayload int64) {
	ph := &publishing{h: h, p: p, max: maxPayload}
	h.handle("POST /api/v1/messages", http.HandlerFunc(ph.postMessage))
	h.handle("GET /api/v1/endpoints", http.HandlerFunc(ph.listEndpoints))
	h.handle("POST /api/v1/endpoints", http.HandlerFunc(ph.createEndpoint))
	h.handle("GET /api/v1/endpoints/{id}", http.HandlerFunc(ph.getEndpoint))
	h.handle("PATCH /api/v1/endpoints/{id}", http.HandlerFunc(ph.updateEndpoint))
	h.handle("DELETE /api/v1/endpoints/{id}", http.HandlerFunc(ph.deleteEndpoint))
	h.handle("POST /api/v1/endpoints/{id}/rotate", http.HandlerFunc(ph.rotate))
	h.handle("GET /api/v1/endpoints/{id}/secrets", http.HandlerFunc(ph.secrets))
}

type publishing struct {
	h   *Handler
	p   Publisher
	max int64
}

// Problem is an RFC 9457 problem document, as the Idempotency-Key draft
// asks for its errors.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
}

func writeProblem(w http.ResponseWriter, status int, title, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(Problem{Type: "about:blank", Title: title, Status: status, Detail: detail})
}

// MessageJSON is the answer to a publish: the message id, and warnings
// when the message was accepted with a finding.
type MessageJSON struct {
	ID       string   `json:"id"`
	Warnings []string `json:"warnings,omitempty"`
}

// postMessage implements the Idempotency-Key draft: the key is required
// (400), the same key and payload replay the first answer (with
// Idempotent-Replayed: true), the same key and another payload is 422, and
// a retry while the first is still being stored is 409.
func (ph *publishing) postMessage(w http.ResponseWriter, r *http.Request) {
	key, keyErr := idempotencyKey(r.Header.Get("Idempotency-Key"))
	switch {
	case keyErr != "":
		writeProblem(w, http.StatusBadRequest, "Idempotency-Key is malformed", keyErr)
		return
	case key == "":
		writeProblem(w, http.StatusBadRequest, "Idempotency-Key is missing",
			"POST /api/v1/messages needs an Idempotency-Key header (a unique value per message, such as a UUID), so that a retried request publishes once")
		return
	case len(key) > 255:
		writeProblem(w, http.StatusBadRequest, "Idempotency-Key is too long", "the Idempotency-Key header holds at most 255 characters")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, ph.max+1024))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeProblem(w, http.StatusRequestEntityTooLarge, "Payload too large",
				fmt.Sprintf("the request body is over publish.max_payload_bytes (%d)", ph.max))
			return
		}
		writeProblem(w, http.StatusBadRequest, "Unreadable body", err.Error())
		return
	}
	m, fp, err := publish.DecodeMessage(body)
	if err != nil {
		writeProblem(w, http.StatusBadRequest, "Invalid message", strings.TrimPrefix(err.Error(), publish.ErrInvalid.Error()+": "))
		return
	}
	res, err := ph.p.Publish(r.Context(), key, fp, m, "api")
	switch {
	case errors.Is(err, publish.ErrKeyMismatch):
		writeProblem(w, http.StatusUnprocessableEntity, "Idempotency-Key reused",
			"this Idempotency-Key was already used with a different payload; use a new key for a new message")
		return
	case errors.Is(err, publish.ErrKeyInFlight):
		writeProblem(w, http.StatusConflict, "Request in progress",
			"a request with this Idempotency-Key is still being processed; retry after it finishes")
		return
	case errors.Is(err, publish.ErrTooLarge):
		writeProblem(w, http.StatusRequestEntityTooLarge, "Payload too large", strings.TrimPrefix(err.Error(), publish.ErrTooLarge.Error()+": "))
		return
	case errors.Is(err, store.ErrRefused):
		// The values of this message, not the store: a retry cannot help.
		writeProblem(w, http.StatusBadRequest, "Invalid message", "the store refused a value of this message; it cannot be stored as sent")
		return
	case err != nil:
		ph.h.log.Error("publish failed", "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "Not stored", "the message could not be stored; retry with the same Idempotency-Key")
		return
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusAccepted, MessageJSON{ID: res.ID, Warnings: res.Warnings})
}

// idempotencyKey reads the header as the draft defines it, a Structured
// Field string ("…" with \" and \\ escapes). A bare token is taken as it
// is, since many clients send one. The prefix "effect:" is reserved for
// the keys of messages that flows publish.
func idempotencyKey(v string) (key, problem string) {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, `"`) {
		var b strings.Builder
		closed := false
		for i := 1; i < len(v); i++ {
			c := v[i]
			switch {
			case closed:
				return "", "the Idempotency-Key string has characters after its closing quote"
			case c == '\\' && i+1 < len(v) && (v[i+1] == '"' || v[i+1] == '\\'):
				b.WriteByte(v[i+1])
				i++
			case c == '"':
				closed = true
			case c < 0x20 || c > 0x7e || c == '\\':
				return "", "the Idempotency-Key string holds a character a Structured Field string cannot"
			default:
				b.WriteByte(c)
			}
		}
		if !closed {
			return "", "the Idempotency-Key string has no closing quote"
		}
		v = b.String()
	}
	if strings.HasPrefix(v, "effect:") {
		return "", `Idempotency-Key values starting with "effect:" are reserved for messages that flows publish`
	}
	// A bare key is held to a string's characters too (printable ASCII):
	// a byte the store cannot hold would otherwise come back as a 503,
	// which the client retries forever.
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e {
			return "", fmt.Sprintf("the Idempotency-Key holds the byte 0x%02X at %d; a key is printable ASCII", c, i)
		}
	}
	return v, ""
}

// EndpointJSON is one endpoint; secrets are listed without their keys.
type EndpointJSON struct {
	ID                   string       `json:"id"`
	URL                  string       `json:"url"`
	Description          string       `json:"description"`
	Owner                string       `json:"owner"`
	Types                []string     `json:"types"`
	Enabled              bool         `json:"enabled"`
	DisabledReason       string       `json:"disabled_reason,omitempty"`
	DisabledAt           *string      `json:"disabled_at,omitempty"`
	FailingSince         *string      `json:"failing_since,omitempty"`
	Origin               string       `json:"origin"`
	AllowPrivateNetworks bool         `json:"allow_private_networks"`
	MaxInFlight          int          `json:"max_in_flight"`
	RateLimit            float64      `json:"rate_limit"`
	Secrets              []SecretJSON `json:"secrets"`
	// Parked and Pending (GET of one endpoint): its messages waiting in
	// the exception queue, and those waiting for a retry or a
	// reconciliation.
	Parked    *int   `json:"parked,omitempty"`
	Pending   *int   `json:"pending,omitempty"`
	CreatedAt string `json:"created_at"`
	UpdatedAt string `json:"updated_at"`
}

// SecretJSON is one signing key; Key only where the resource shows keys
// (…/secrets, and the answers that made the key).
type SecretJSON struct {
	ID        string  `json:"id"`
	Kind      string  `json:"kind"`
	Key       string  `json:"key,omitempty"`
	PublicKey string  `json:"public_key,omitempty"`
	CreatedAt string  `json:"created_at"`
	ExpiresAt *string `json:"expires_at,omitempty"`
}

func timeOrNil(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

func secretJSON(s store.EndpointSecret, withKey bool) SecretJSON {
	j := SecretJSON{ID: s.ID, Kind: s.Kind, PublicKey: s.Public, CreatedAt: s.CreatedAt.UTC().Format(time.RFC3339Nano), ExpiresAt: timeOrNil(s.ExpiresAt)}
	if withKey {
		j.Key = s.Key
	}
	return j
}

func endpointJSON(e *store.Endpoint) EndpointJSON {
	j := EndpointJSON{ID: e.ID, URL: e.URL, Description: e.Description, Owner: e.Owner, Types: e.Types, Enabled: e.Enabled,
		DisabledReason: e.DisabledReason, DisabledAt: timeOrNil(e.DisabledAt), FailingSince: timeOrNil(e.FailingSince),
		Origin: e.Origin, AllowPrivateNetworks: e.AllowPrivateNetworks, MaxInFlight: e.MaxInFlight, RateLimit: e.RateLimit,
		Secrets: []SecretJSON{}, CreatedAt: e.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: e.UpdatedAt.UTC().Format(time.RFC3339Nano)}
	if j.Types == nil {
		j.Types = []string{}
	}
	if e.Enabled {
		j.DisabledReason = ""
	}
	for _, s := range e.Secrets {
		j.Secrets = append(j.Secrets, secretJSON(s, false))
	}
	return j
}

// writeEndpointError maps the service's errors onto status codes.
func (ph *publishing) writeEndpointError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, publish.ErrInvalid):
		msg := strings.TrimPrefix(err.Error(), publish.ErrInvalid.Error()+": ")
		out := map[string]string{"error": msg}
		// "types[2]: …" names the field at fault, as the other admin
		// resources do under "param".
		if field, _, ok := strings.Cut(msg, ":"); ok && paramName.MatchString(field) {
			out["param"] = field
		}
		writeJSON(w, http.StatusBadRequest, out)
	case errors.Is(err, publish.ErrConflict):
		writeError(w, http.StatusConflict, strings.TrimPrefix(err.Error(), publish.ErrConflict.Error()+": "))
	case errors.Is(err, store.ErrNotFound):
		writeError(w, http.StatusNotFound, "no such endpoint")
	case errors.Is(err, store.ErrRefused):
		writeError(w, http.StatusBadRequest, "the store refused a value of this endpoint; change it")
	default:
		ph.h.log.Error("endpoint request failed", "err", err)
		writeError(w, http.StatusInternalServerError, "the store failed; see the server log")
	}
}

// decodeStrict reads a JSON object, naming an unknown field.
func decodeStrict(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: body: %v", publish.ErrInvalid, err)
	}
	return nil
}

func (ph *publishing) listEndpoints(w http.ResponseWriter, r *http.Request) {
	if len(r.URL.Query()) > 0 {
		for k := range r.URL.Query() {
			writeError(w, http.StatusBadRequest, "unknown parameter "+k+" (the endpoint list takes none)")
			return
		}
	}
	list, err := ph.p.List(r.Context())
	if err != nil {
		ph.writeEndpointError(w, err)
		return
	}
	out := struct {
		Endpoints []EndpointJSON `json:"endpoints"`
	}{Endpoints: []EndpointJSON{}}
	for _, e := range list {
		out.Endpoints = append(out.Endpoints, endpointJSON(e))
	}
	writeJSON(w, http.StatusOK, out)
}

func (ph *publishing) createEndpoint(w http.ResponseWriter, r *http.Request) {
	var in publish.EndpointInput
	if err := decodeStrict(r, &in); err != nil {
		ph.writeEndpointError(w, err)
		return
	}
	e, err := ph.p.Create(r.Context(), &in, "api")
	if err != nil {
		ph.writeEndpointError(w, err)
		return
	}
	j := endpointJSON(e)
	// The key is shown in the answer that made it (and by …/secrets).
	for i, s := range e.Secrets {
		j.Secrets[i] = secretJSON(s, true)
	}
	writeJSON(w, http.StatusCreated, j)
}

// loadEndpoint reads the endpoint the path names, answering 404 (or the
// store's failure) itself when there is none.
func (ph *publishing) loadEndpoint(w http.ResponseWriter, r *http.Request) (*store.Endpoint, bool) {
	e, err := ph.p.Get(r.Context(), r.PathValue("id"))
	if err == nil && e == nil {
		err = store.ErrNotFound
	}
	if err != nil {
		ph.writeEndpointError(w, err)
		return nil, false
	}
	return e, true
}

func (ph *publishing) getEndpoint(w http.ResponseWriter, r *http.Request) {
	e, ok := ph.loadEndpoint(w, r)
	if !ok {
		return
	}
	j := endpointJSON(e)
	counts, err := ph.p.Backlogs(r.Context())
	if err != nil {
		ph.writeEndpointError(w, err)
		return
	}
	n := counts[e.ID]
	j.Parked, j.Pending = &n.Parked, &n.Pending
	writeJSON(w, http.StatusOK, j)
}

func (ph *publishing) updateEndpoint(w http.ResponseWriter, r *http.Request) {
	var in publish.EndpointInput
	if err := decodeStrict(r, &in); err != nil {
		ph.writeEndpointError(w, err)
		return
	}
	e, err := ph.p.Update(r.Context(), r.PathValue("id"), &in, "api")
	if err == nil && e == nil {
		err = store.ErrNotFound
	}
	if err != nil {
		ph.writeEndpointError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, endpointJSON(e))
}

func (ph *publishing) deleteEndpoint(w http.ResponseWriter, r *http.Request) {
	if err := ph.p.Delete(r.Context(), r.PathValue("id"), "api"); err != nil {
		ph.writeEndpointError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (ph *publishing) rotate(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Secret  string `json:"secret"`
		Kind    string `json:"kind"`
		Overlap string `json:"overlap"`
	}
	if err := decodeStrict(r, &in); err != nil {
		ph.writeEndpointError(w, err)
		return
	}
	overlap := time.Duration(-1)
	if in.Overlap != "" {
		d, err := time.ParseDuration(in.Overlap)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("overlap: %q is not a duration such as 24h or 30m", in.Overlap))
			return
		}
		overlap = d
	}
	e, sec, err := ph.p.Rotate(r.Context(), r.PathValue("id"), in.Secret, in.Kind, overlap, "api")
	if err != nil {
		ph.writeEndpointError(w, err)
		return
	}
	out := struct {
		Secret   SecretJSON   `json:"secret"`
		Endpoint EndpointJSON `json:"endpoint"`
	}{secretJSON(sec, true), endpointJSON(e)}
	writeJSON(w, http.StatusOK, out)
}

func (ph *publishing) secrets(w http.ResponseWriter, r *http.Request) {
	e, ok := ph.loadEndpoint(w, r)
	if !ok {
		return
	}
	out := struct {
		Secrets []SecretJSON `json:"secrets"`
	}{Secrets: []SecretJSON{}}
	for _, s := range e.Secrets {
		out.Secrets = append(out.Secrets, secretJSON(s, true))
	}
	writeJSON(w, http.StatusOK, out)
}
