package publish

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/tracing"
)

// Message is a request to publish.
type Message struct {
	Type string          `json:"type"`
	Data json.RawMessage `json:"data"`
}

// Result is what a publish did.
type Result struct {
	ID string
	// Replayed: the key was seen before with the same payload; nothing new
	// was stored and ID is the original message's.
	Replayed bool
	// Endpoints the new message goes to (empty on a replay).
	Endpoints []string
	// Warnings are accepted-but-questionable findings (an oversized
	// payload).
	Warnings []string
}

// Errors of a publish the admin API maps onto status codes.
var (
	// ErrKeyMismatch: the key was used for another payload (422).
	ErrKeyMismatch = fmt.Errorf("%w: the Idempotency-Key was already used for another payload", ErrInvalid)
	// ErrKeyInFlight: the key's first request is still being stored (409).
	ErrKeyInFlight = fmt.Errorf("%w: a request with this Idempotency-Key is still in flight", ErrConflict)
	// ErrTooLarge: the payload is over publish.max_payload_bytes (413).
	ErrTooLarge = fmt.Errorf("%w: payload too large", ErrInvalid)
)

// DecodeMessage parses a publish request body strictly: an object with a
// type and an object data, nothing else. It also returns the request's
// fingerprint: the SHA-256 of its canonical form (keys sorted, no
// insignificant space, numbers as written), so the same payload written
// with other spacing or key order is the same request.
func DecodeMessage(body []byte) (*Message, string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var m Message
	if err := dec.Decode(&m); err != nil {
		return nil, "", invalid("body: %v", jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, "", invalid("body: one JSON object expected, found more after it")
	}
	if m.Type == "" {
		return nil, "", invalid("type: required (the event type endpoints filter on, such as invoice.paid)")
	}
	if !config.ValidMessageType(m.Type) {
		return nil, "", invalid("type: %q: use letters, digits and '_', '.', ':', '/', '-' (at most 128)", m.Type)
	}
	trimmed := bytes.TrimSpace(m.Data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, "", invalid("data: a JSON object is required")
	}
	// What no store can hold is refused here, the same on every driver:
	// PostgreSQL's jsonb refuses U+0000, and a store failure would be
	// answered 503, which the client retries forever.
	if err := store.CheckJSON("data", m.Data); err != nil {
		return nil, "", invalid("%v", err)
	}
	fp, err := fingerprint(body)
	if err != nil {
		return nil, "", invalid("body: %v", err)
	}
	return &m, fp, nil
}

// fingerprint is the SHA-256 (hex) of the canonical form of a JSON body.
func fingerprint(body []byte) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", err
	}
	// encoding/json writes map keys sorted and json.Number as written.
	canon, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(canon)
	return hex.EncodeToString(sum[:]), nil
}

func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		return fmt.Sprintf("field %s: expected %s, got %s", te.Field, te.Type, te.Value)
	default:
		return err.Error()
	}
}

// newMessageID makes a message id: msg_ and a UUIDv7, so ids sort by
// publication time.
func newMessageID() (string, error) {
	u, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("message id: %w", err)
	}
	return "msg_" + hex.EncodeToString(u[:]), nil
}

// Publish stores a message under an Idempotency-Key and fans it out to
// every matching endpoint, in one transaction; it returns after the
// commit. The same key with the same fingerprint returns the original
// message (Replayed); with another fingerprint ErrKeyMismatch; while the
// key's first request is still being stored by this process,
// ErrKeyInFlight. Across processes the store serialises the key: the
// later one waits for the first commit and replays it.
func (s *Service) Publish(ctx context.Context, key, fingerprint string, m *Message, actor string) (*Result, error) {
	id, err := newMessageID()
	if err != nil {
		return nil, err
	}
	return s.publish(ctx, id, key, fingerprint, m, actor, "", 0)
}

func (s *Service) publish(ctx context.Context, id, key, fingerprint string, m *Message, actor, causation string, hop int) (res *Result, err error) {
	ctx, span := s.tracer.Start(ctx, "publish", trace.WithAttributes(attribute.String("hookledger.message_type", m.Type)))
	defer func() { endPublish(span, res, err) }()
	s.keysMu.Lock()
	if s.inflight[key] {
		s.keysMu.Unlock()
		s.m.requests.WithLabelValues("in_flight").Inc()
		return nil, ErrKeyInFlight
	}
	s.inflight[key] = true
	s.keysMu.Unlock()
	defer func() {
		s.keysMu.Lock()
		delete(s.inflight, key)
		s.keysMu.Unlock()
	}()

	now := s.clk.Now()
	payload, err := json.Marshal(struct {
		Type      string          `json:"type"`
		Timestamp string          `json:"timestamp"`
		Data      json.RawMessage `json:"data"`
	}{m.Type, now.UTC().Format(time.RFC3339Nano), m.Data})
	if err != nil {
		return nil, invalid("data: %v", err)
	}
	if int64(len(payload)) > s.cfg.Publish.MaxPayloadBytes {
		s.m.requests.WithLabelValues("too_large").Inc()
		return nil, fmt.Errorf("%w: the payload is %d bytes, over publish.max_payload_bytes (%d)", ErrTooLarge, len(payload), s.cfg.Publish.MaxPayloadBytes)
	}
	out, err := s.st.MessagePublish(ctx, &store.MessagePublishParams{ID: id, Key: key, Fingerprint: fingerprint,
		KeyExpiresAt: now.Add(s.cfg.Publish.IdempotencyWindow.D()), Type: m.Type, Payload: payload,
		Headers: map[string]string{"idempotency-key": key}, CausationID: causation, Hop: hop, Actor: actor, Now: now,
		TraceContext: tracing.Traceparent(ctx), Handoff: s.opts.Handoff})
	if err != nil {
		return nil, fmt.Errorf("publish message: %w", err)
	}
	res = &Result{ID: out.ID, Replayed: out.Replayed, Endpoints: out.Endpoints}
	if out.Replayed {
		if out.Fingerprint != fingerprint {
			s.m.requests.WithLabelValues("key_mismatch").Inc()
			return nil, ErrKeyMismatch
		}
		s.m.requests.WithLabelValues("replayed").Inc()
		return res, nil
	}
	s.m.requests.WithLabelValues("published").Inc()
	s.m.fanout.Add(float64(len(out.Endpoints)))
	if warn := s.cfg.Publish.WarnPayloadBytes; warn > 0 && int64(len(payload)) > warn {
		s.m.oversize.Inc()
		res.Warnings = append(res.Warnings, fmt.Sprintf("the payload is %d bytes, over the %d that receivers are advised to expect (publish.warn_payload_bytes): consider sending a reference to the data instead of the data", len(payload), warn))
	}
	if len(out.Endpoints) > 0 && s.opts.Handoff == nil {
		s.opts.Wake()
	}
	return res, nil
}

// endPublish records a publish's outcome on its span: the message, how
// many endpoints it fans out to, whether the Idempotency-Key replayed an
// earlier one, or the error. Never the payload.
func endPublish(span trace.Span, res *Result, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return
	}
	span.SetAttributes(attribute.String("hookledger.message_id", res.ID), attribute.Int("hookledger.fanout", len(res.Endpoints)),
		attribute.Bool("hookledger.replayed", res.Replayed))
}
