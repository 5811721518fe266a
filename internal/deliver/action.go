package deliver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/outbound"
)

// Call is one request to a destination, built from an effect's stored
// request.
type Call struct {
	Destination *config.Destination
	Method      string
	// Path is relative to the destination (checked by outbound.CheckPath
	// before the call is made), Query its parameters, unescaped.
	Path   string
	Query  url.Values
	Header http.Header
	Body   []byte
	// EpisodeKey identifies the effect.
	EpisodeKey string
	// IdempotencyKey is the key sent in the destination's idempotency
	// header (the episode key or its hashed form, see IdempotencyKey), ""
	// when it has none.
	IdempotencyKey string
	// CausationID is the effect's causation id as stored; its header
	// carries it percent-encoded (outbound.EncodeHeaderValue).
	CausationID string
	// Validate sends the call to the preset's validation endpoint instead
	// of the live one (hookledger validate). A destination with dry_run
	// sends every call there.
	Validate bool
}

// Response is what a destination answered. Sent reports whether the request
// reached the wire completely: a failure after that is an unknown outcome
// (the destination may have done the work), before it a plain transient
// failure (IP04).
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	Sent   bool
}

// Action performs calls for one destination kind. Programs that embed
// hookledger register their own kinds through Options.Actions; "http" is
// built in. An error means no answer was received; Response.Sent must
// still say whether the request was sent.
type Action interface {
	Do(ctx context.Context, c *Call) (*Response, error)
}

// HTTPAction calls HTTP destinations. It never retries on its own (RT01):
// the body is not rewindable, so the transport cannot replay a request it
// already wrote; retries belong to the worker's policy alone. It never
// follows a redirect either, whatever Client says: a 3xx is the answer.
// And it connects to public addresses only, checked on the address about
// to be dialled (outbound.Guard), unless the destination sets
// allow_private_networks.
type HTTPAction struct {
	Client *http.Client
	// MaxBody bounds how much of an answer is read (default 1 MiB).
	MaxBody int64
	// Resolver resolves destination host names for the address check
	// (default net.DefaultResolver); the address it answers is the one
	// dialled.
	Resolver outbound.Resolver

	once            sync.Once
	public, private *http.Client
}

// clients builds, once, the two clients calls go through: one guarded,
// one for destinations that allow private networks. Each has its own
// connection pool, so a connection to an internal address is never
// reused for a destination that may not reach it.
func (a *HTTPAction) clients() (public, private *http.Client) {
	a.once.Do(func() {
		a.public = outbound.Guard(a.Client, outbound.GuardOptions{Resolver: a.Resolver})
		a.private = outbound.NoRedirects(a.Client)
	})
	return a.public, a.private
}

// Do sends the call.
func (a *HTTPAction) Do(ctx context.Context, c *Call) (*Response, error) {
	d := c.Destination
	resp := &Response{}
	// The worker checked the call already; an embedding program calling Do
	// itself gets the same refusal, as a permanent error.
	u, err := outbound.URL(d.BaseURL, c.Path, c.Query)
	if err != nil {
		return resp, err
	}
	if c.Validate || d.DryRun {
		if u, err = validationURL(d, u); err != nil {
			return resp, err
		}
	}
	for k, vs := range c.Header {
		for _, v := range vs {
			if err := outbound.CheckHeader(k, v); err != nil {
				return resp, err
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, d.Timeout.D())
	defer cancel()
	trace := &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			resp.Sent = true
		}
	}}
	var body io.Reader
	if c.Body != nil {
		body = bytes.NewReader(c.Body)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), c.Method, u.String(), body)
	if err != nil {
		return resp, fmt.Errorf("build request: %w", outbound.RedactError(err))
	}
	req.GetBody = nil // not replayable: the transport must not resend it
	for k, vs := range c.Header {
		req.Header[k] = vs
	}
	applyAuth(req, d.Auth)
	// Whatever client was injected, a redirect comes back as the answer:
	// following it would resend the body and the credentials elsewhere.
	client, private := a.clients()
	if d.AllowPrivateNetworks {
		client = private
	}
	hr, err := client.Do(req)
	if err != nil {
		// The transport's error names the full URL, query string included.
		return resp, outbound.RedactError(err)
	}
	defer hr.Body.Close()
	limit := a.MaxBody
	if limit <= 0 {
		limit = 1 << 20
	}
	resp.Status, resp.Header = hr.StatusCode, hr.Header
	// A body cut short by a reset is evidence lost, not an unknown
	// outcome: the status already says what the destination did.
	resp.Body, _ = io.ReadAll(io.LimitReader(hr.Body, limit))
	return resp, nil
}

func applyAuth(req *http.Request, a *config.Auth) {
	switch {
	case a == nil:
	case a.Bearer != "":
		req.Header.Set("Authorization", "Bearer "+a.Bearer)
	case a.Basic != nil:
		req.SetBasicAuth(a.Basic.User, a.Basic.Password)
	case a.Header != nil:
		req.Header.Set(a.Header.Name, a.Header.Value)
	}
}

// storedRequest is the shape the flow processor stores on each effect
// (flow.Request); requests stored before query existed have none.
type storedRequest struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Query   url.Values        `json:"query"`
	Headers map[string]string `json:"headers"`
	Body    json.RawMessage   `json:"body"`
	// BodyBase64 is a body to send byte for byte (a forward's), with the
	// Content-Type in Headers.
	BodyBase64 []byte `json:"body_base64"`
}

// excerpt trims a response for storage: evidence, not a copy, never more
// than n bytes, and text every driver stores (whatever the destination
// answered): cut on a character boundary, invalid UTF-8 and NUL shown as
// "?". A response PostgreSQL refuses would leave its attempt unsettled.
func excerpt(b []byte, n int) string {
	cut := len(b) > n
	if cut {
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		b = b[:n]
	}
	s := strings.ReplaceAll(strings.ToValidUTF8(string(b), "?"), "\x00", "?")
	if cut {
		return s + "…"
	}
	return s
}
