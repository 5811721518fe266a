package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"time"
)

// Publishing is the part of the contract that publishes webhooks to
// Standard Webhooks endpoints (docs/publishing.md): the endpoints, and
// messages fanned out to them as ledger effects that the delivery worker
// carries out like any other.
//
// A message is stored as an event of source PublishSource (event_id = the
// message id, disposition applied, one delivery row holding the payload),
// so the event lists, the console and retention see it; each endpoint it
// goes to is one effect of flow PublishFlow with episode key
// PublishEpisodeKey(message, endpoint), destination EndpointDestination(id),
// entity the endpoint id, version the message id and effect "deliver".
type Publishing interface {
	// EndpointPut inserts the endpoint, or replaces the spec of the one
	// with its id (origin, enabled state, failing_since and created_at are
	// kept on replace). Audited endpoint_created / endpoint_updated.
	EndpointPut(ctx context.Context, p *EndpointPutParams) (*Endpoint, error)
	// EndpointGet returns the endpoint (deleted ones included), or nil.
	EndpointGet(ctx context.Context, id string) (*Endpoint, error)
	// EndpointList returns the endpoints that are not deleted, in id order.
	EndpointList(ctx context.Context) ([]*Endpoint, error)
	// EndpointSetState enables or disables an endpoint, or records when it
	// started failing; ErrNotFound for a missing or deleted one. Each
	// change of Enabled writes an audit row (endpoint_enabled,
	// endpoint_disabled, or endpoint_deleted when Delete is set).
	EndpointSetState(ctx context.Context, p *EndpointStateParams) (*Endpoint, error)
	// MessagePublish stores a message and fans it out, in ONE transaction:
	// the idempotency key (an expired row for the same key is replaced),
	// the event and its delivery row, and one approved effect per endpoint
	// that is not deleted and whose Types match the message type
	// (MatchType), disabled ones included (the worker parks those). When
	// the key is held and unexpired nothing is written: the result names
	// the original message and its fingerprint, with Replayed set.
	MessagePublish(ctx context.Context, p *MessagePublishParams) (*MessagePublishResult, error)
	// MessagePublishGroup publishes each message as MessagePublish does,
	// in one transaction, and answers each in order; a failure of one
	// fails none of the others. MessagePublish groups concurrent calls
	// through it.
	MessagePublishGroup(ctx context.Context, ps []*MessagePublishParams) []PublishAnswer
	// IdempotencyPrune deletes up to Limit keys expired at Now and returns
	// how many it deleted.
	IdempotencyPrune(ctx context.Context, now time.Time, limit int) (int, error)
	// EffectsDueNow makes the destination's effects waiting in retry_wait
	// for a later time due at now, and returns how many. A disabled
	// endpoint's messages then park at once instead of at their next
	// retry. The state and attempts are kept; nothing is audited, since
	// nothing changes state.
	EffectsDueNow(ctx context.Context, destination string, now time.Time) (int, error)
}

// Names the publishing path uses in the shared tables.
const (
	// PublishSource is the event source of published messages; no
	// configured source may take this name.
	PublishSource = "publish"
	// PublishFlow is the flow of the effects that deliver messages to
	// endpoints; no configured flow may take this name.
	PublishFlow = "publish"
	// PublishEffect is the effect name of a delivery to one endpoint.
	PublishEffect = "deliver"
	// EndpointDestinationPrefix starts the destination of an endpoint's
	// effects; a configured destination name cannot contain ':'.
	EndpointDestinationPrefix = "endpoint:"
)

// Audit actions of the publishing path.
const (
	ActionEndpointCreated  = "endpoint_created"
	ActionEndpointUpdated  = "endpoint_updated"
	ActionEndpointEnabled  = "endpoint_enabled"
	ActionEndpointDisabled = "endpoint_disabled"
	ActionEndpointDeleted  = "endpoint_deleted"
	ActionMessagePublished = "message_published"
)

// Endpoint origins.
const (
	OriginConfig = "config" // from the endpoints: section
	OriginAPI    = "api"    // made through /api/v1/endpoints
)

// EndpointDestination is the destination name of an endpoint's effects.
func EndpointDestination(id string) string { return EndpointDestinationPrefix + id }

// PublishEpisodeKey is the episode key of a message's delivery to one
// endpoint: derived from the two ids, so a fan-out repeated after a crash
// cannot make a second effect (IP05).
func PublishEpisodeKey(messageID, endpointID string) string {
	return "publish:" + messageID + ":" + endpointID
}

// matchType reports whether an endpoint whose filter is types receives a
// message of type typ: an empty filter receives everything, otherwise one
// glob must match (path.Match syntax: '*' is any run of characters
// without '/', '?' one character, [...] a class).
func matchType(types []string, typ string) bool {
	if len(types) == 0 {
		return true
	}
	for _, t := range types {
		if ok, err := path.Match(t, typ); err == nil && ok {
			return true
		}
	}
	return false
}

// CheckTypePattern reports a malformed filter glob.
func CheckTypePattern(t string) error {
	if t == "" {
		return errors.New("empty event-type pattern")
	}
	if _, err := path.Match(t, ""); err != nil {
		return fmt.Errorf("event-type pattern %q: %w", t, err)
	}
	return nil
}

// EndpointSpec is what a person configures on an endpoint. Drivers store it
// as one JSON document (MarshalSpec / UnmarshalSpec), so a field added
// here needs no migration.
type EndpointSpec struct {
	URL         string   `json:"url"`
	Description string   `json:"description,omitempty"`
	Owner       string   `json:"owner,omitempty"`
	Types       []string `json:"types,omitempty"`
	// Secrets sign every delivery; all unexpired ones sign it, so a
	// receiver that knows any of them verifies it (rotation overlap).
	Secrets []EndpointSecret `json:"secrets"`
	// AllowPrivateNetworks lets deliveries reach non-public addresses.
	AllowPrivateNetworks bool `json:"allow_private_networks,omitempty"`
	// MaxInFlight caps this endpoint's calls in flight (0: the default).
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// RateLimit is deliveries per second (0: none).
	RateLimit float64 `json:"rate_limit,omitempty"`
}

// Secret kinds.
const (
	SecretHMAC    = "v1"  // whsec_ symmetric key, HMAC-SHA256
	SecretEd25519 = "v1a" // whsk_ private key; the receiver holds whpk_
)

// EndpointSecret is one signing key of an endpoint.
type EndpointSecret struct {
	ID   string `json:"id"`   // stable, shown in lists instead of the key
	Kind string `json:"kind"` // SecretHMAC or SecretEd25519
	// Key is whsec_… (v1) or whsk_… (v1a, the private key); never logged.
	Key string `json:"key"`
	// Public is the whpk_… key a v1a receiver verifies with.
	Public    string    `json:"public,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt, when set, ends the secret's signing (a rotated-out key
	// keeps signing until then).
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// Active reports whether the secret still signs at now.
func (s EndpointSecret) Active(now time.Time) bool {
	return s.ExpiresAt.IsZero() || now.Before(s.ExpiresAt)
}

// marshalSpec encodes a spec for storage.
func marshalSpec(s *EndpointSpec) ([]byte, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode endpoint spec: %w", err)
	}
	return b, nil
}

// UnmarshalSpec decodes a stored spec.
func UnmarshalSpec(b []byte) (*EndpointSpec, error) {
	var s EndpointSpec
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode endpoint spec: %w", err)
	}
	return &s, nil
}

// Endpoint is a Standard Webhooks endpoint messages are published to.
type Endpoint struct {
	ID     string
	Origin string // OriginConfig or OriginAPI
	EndpointSpec
	Enabled bool
	// DisabledReason says why it is disabled (410 Gone, failing since …,
	// an operator); empty when enabled.
	DisabledReason string
	DisabledAt     time.Time
	// FailingSince is when its current run of failed deliveries began;
	// zero after a success.
	FailingSince time.Time
	Deleted      bool
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// EndpointPutParams creates or replaces an endpoint's spec.
type EndpointPutParams struct {
	ID     string
	Origin string
	Spec   EndpointSpec
	// Enabled is the state of a new endpoint; a replace keeps the stored
	// state unless ForceDisabled.
	Enabled bool
	// ForceDisabled disables an existing endpoint on replace (config says
	// enabled: false).
	ForceDisabled bool
	// Undelete revives a deleted endpoint of the same id on replace.
	Undelete bool
	Actor    string
	Now      time.Time
}

// EndpointStateParams changes an endpoint's state; nil fields are kept.
type EndpointStateParams struct {
	ID      string
	Enabled *bool
	// Reason is stored as DisabledReason when disabling, and is the audit
	// row's detail.
	Reason string
	// FailingSince sets (non-zero) or clears (zero) when failures began.
	FailingSince *time.Time
	// Delete marks the endpoint deleted (and disabled): it leaves the
	// lists and receives no new messages; its effects stay in the ledger.
	Delete bool
	Actor  string
	Now    time.Time
}

// MessagePublishParams stores and fans out one message.
type MessagePublishParams struct {
	// ID is the new message's id (msg_…); unused on a replay.
	ID string
	// Key is the Idempotency-Key; Fingerprint the SHA-256 (hex) of the
	// canonical request; the key is held until KeyExpiresAt.
	Key          string
	Fingerprint  string
	KeyExpiresAt time.Time
	Type         string
	// Payload is the body endpoints receive: {"type","timestamp","data"}.
	// The delivery row keeps it byte for byte; the effect's request holds
	// it as JSON, which PostgreSQL (jsonb) normalises once (key order,
	// spacing), so every attempt still sends the same bytes.
	Payload []byte
	// Headers are kept on the delivery row (JSON object), for the console.
	Headers map[string]string
	// CausationID and Hop carry a flow's chain onto the effects.
	CausationID string
	Hop         int
	// TraceContext is the traceparent of the publish's span ("" when
	// tracing is off): the deliveries to the endpoints continue its trace.
	TraceContext string
	Actor        string
	Now          time.Time
	// Handoff, when set, is this process's delivery worker: the publish
	// inserts the deliveries the worker has room for already claimed for
	// it, and it starts their calls once the publish commits
	// (publishclaim.go). A group uses its first message's.
	Handoff PublishHandoff
}

// MessagePublishResult is what MessagePublish did.
type MessagePublishResult struct {
	// ID is the message id: the new one, or the original's on a replay.
	ID string
	// Replayed: the key was already held; nothing was written.
	Replayed bool
	// Fingerprint is the original request's (equal to the params' unless
	// the key was reused for another payload).
	Fingerprint string
	// Endpoints are the endpoint ids the new message was fanned out to.
	Endpoints []string
	CreatedAt time.Time
}

// publishRequest is the stored request of a message's effect: a POST of
// the payload with the message id as webhook-id (the receiver's dedupe
// key, the same on every attempt). The delivery action adds the
// per-attempt timestamp and signatures.
func publishRequest(messageID string, payload []byte) []byte {
	b, _ := json.Marshal(struct {
		Method  string            `json:"method"`
		Path    string            `json:"path"`
		Headers map[string]string `json:"headers"`
		Body    json.RawMessage   `json:"body"`
	}{"POST", "", map[string]string{"webhook-id": messageID}, payload})
	return b
}

// ReasonConfigDisabled is the DisabledReason of an endpoint the config
// disables (EndpointPutParams.ForceDisabled).
const ReasonConfigDisabled = "disabled in the config"

// publishVersionSort is the version_sort of a message's effects: Now in
// unix microseconds, zero-padded to a fixed width so that text order is
// time order, then the message id to break ties.
func publishVersionSort(now time.Time, messageID string) string {
	return fmt.Sprintf("%020d", now.UnixMicro()) + messageID
}

// checkEndpointPut rejects params no database state could make valid.
func checkEndpointPut(p *EndpointPutParams) error {
	switch {
	case p.ID == "":
		return fmt.Errorf("endpoint without an id: %w", ErrInvalidArgument)
	case len(p.ID) > MaxIdentityBytes:
		return fmt.Errorf("endpoint id longer than %d bytes: %w", MaxIdentityBytes, ErrInvalidArgument)
	case p.Origin != OriginConfig && p.Origin != OriginAPI:
		return fmt.Errorf("endpoint origin %q: %w", p.Origin, ErrInvalidArgument)
	case p.Now.IsZero():
		return fmt.Errorf("endpoint put without a time: %w", ErrInvalidArgument)
	}
	// A malformed glob would silently match nothing: refuse it here too,
	// whatever validated it before.
	for _, t := range p.Spec.Types {
		if err := CheckTypePattern(t); err != nil {
			return fmt.Errorf("endpoint %s: %w: %w", p.ID, ErrInvalidArgument, err)
		}
	}
	return nil
}

// checkMessagePublish rejects params no database state could make valid.
func checkMessagePublish(p *MessagePublishParams) error {
	switch {
	case p.ID == "" || p.Key == "":
		return fmt.Errorf("message without an id or idempotency key: %w", ErrInvalidArgument)
	case len(p.ID) > MaxIdentityBytes || len(p.Key) > MaxIdentityBytes || len(p.Type) > MaxIdentityBytes:
		return fmt.Errorf("message id, key or type longer than %d bytes: %w", MaxIdentityBytes, ErrInvalidArgument)
	case p.Now.IsZero():
		return fmt.Errorf("message without a time: %w", ErrInvalidArgument)
	case !json.Valid(p.Payload):
		// The payload is embedded in each effect's request as JSON.
		return fmt.Errorf("message payload is not JSON: %w", ErrInvalidArgument)
	}
	return nil
}

// endpointAuditDetail is the audit detail of an endpoint's creation or
// update. It names the URL's host only: a URL may carry credentials or a
// token in its user info, path or query, and an audit row is read by
// everyone who reads the console.
func endpointAuditDetail(verb string, origin string, s *EndpointSpec) string {
	host := "an invalid URL"
	if u, err := url.Parse(s.URL); err == nil && u.Host != "" {
		host = u.Host
	}
	types := "every type"
	if len(s.Types) > 0 {
		types = fmt.Sprintf("%d type pattern(s)", len(s.Types))
	}
	return fmt.Sprintf("%s (%s): delivers %s to %s, %d signing secret(s)", verb, origin, types, host, len(s.Secrets))
}

// messagePublishedDetail is the audit detail of a published message.
func messagePublishedDetail(typ string, endpoints int) string {
	return fmt.Sprintf("message of type %q fanned out to %d endpoint(s)", typ, endpoints)
}

// endpointStateDetail is the audit detail of a state change: the reason
// given, or what happened when none was.
func endpointStateDetail(reason, fallback string) string {
	if reason != "" {
		return reason
	}
	return fallback
}

// endpointChange is what a driver writes for EndpointPut or
// EndpointSetState: the endpoint row as it must be stored, and the audit
// rows that go with it in the same transaction. The rules live here once;
// the drivers only run the statements.
type endpointChange struct {
	Endpoint *Endpoint
	Audit    []*AuditInsertParams
}

// planEndpointPut decides EndpointPut from the stored row (nil when there
// is none). A deleted row is revived only with Undelete, which starts it
// over as a new endpoint; replacing it without Undelete is ErrConflict
// (its id stays taken by the effects that name it).
func planEndpointPut(cur *Endpoint, p *EndpointPutParams) (*endpointChange, error) {
	now := p.Now.UTC()
	ep := &Endpoint{ID: p.ID, EndpointSpec: p.Spec, UpdatedAt: now}
	ch := &endpointChange{Endpoint: ep}
	audit := func(action, detail string) {
		ch.Audit = append(ch.Audit, &AuditInsertParams{At: now, Actor: p.Actor, Action: action, Entity: p.ID, Detail: detail})
	}
	switch {
	case cur != nil && cur.Deleted && !p.Undelete:
		return nil, fmt.Errorf("endpoint %s was deleted: %w", p.ID, ErrConflict)
	case cur == nil || cur.Deleted:
		ep.Origin = p.Origin
		ep.Enabled = p.Enabled && !p.ForceDisabled
		ep.CreatedAt = now
		verb := "created"
		if cur != nil {
			verb = "revived"
		}
		if !ep.Enabled {
			ep.DisabledReason, ep.DisabledAt = "created disabled", now
			if p.ForceDisabled {
				ep.DisabledReason = ReasonConfigDisabled
			}
			verb += " disabled"
		}
		audit(ActionEndpointCreated, endpointAuditDetail(verb, ep.Origin, &ep.EndpointSpec))
	default:
		ep.Origin, ep.CreatedAt, ep.FailingSince = cur.Origin, cur.CreatedAt, cur.FailingSince
		ep.Enabled, ep.DisabledReason, ep.DisabledAt = cur.Enabled, cur.DisabledReason, cur.DisabledAt
		audit(ActionEndpointUpdated, endpointAuditDetail("updated", ep.Origin, &ep.EndpointSpec))
		if p.ForceDisabled {
			ep.DisabledReason = ReasonConfigDisabled
			if ep.Enabled {
				ep.Enabled, ep.DisabledAt = false, now
				audit(ActionEndpointDisabled, ReasonConfigDisabled)
			}
		}
	}
	return ch, nil
}

// planEndpointState decides EndpointSetState from the stored row (nil when
// there is none): ErrNotFound for a missing or deleted endpoint.
func planEndpointState(cur *Endpoint, p *EndpointStateParams) (*endpointChange, error) {
	if cur == nil || cur.Deleted {
		return nil, fmt.Errorf("endpoint %s: %w", p.ID, ErrNotFound)
	}
	now := p.Now.UTC()
	ep := *cur
	ep.UpdatedAt = now
	ch := &endpointChange{Endpoint: &ep}
	audit := func(action, detail string) {
		ch.Audit = append(ch.Audit, &AuditInsertParams{At: now, Actor: p.Actor, Action: action, Entity: p.ID, Detail: detail})
	}
	if p.FailingSince != nil {
		ep.FailingSince = p.FailingSince.UTC()
		if p.FailingSince.IsZero() {
			ep.FailingSince = time.Time{}
		}
	}
	switch {
	case p.Delete:
		if ep.Enabled {
			ep.DisabledAt = now
		}
		ep.Deleted, ep.Enabled = true, false
		ep.DisabledReason = endpointStateDetail(p.Reason, "deleted")
		audit(ActionEndpointDeleted, endpointStateDetail(p.Reason, "deleted"))
	case p.Enabled != nil && *p.Enabled && !ep.Enabled:
		ep.Enabled, ep.DisabledReason, ep.DisabledAt = true, "", time.Time{}
		audit(ActionEndpointEnabled, endpointStateDetail(p.Reason, "enabled"))
	case p.Enabled != nil && !*p.Enabled && ep.Enabled:
		ep.Enabled, ep.DisabledReason, ep.DisabledAt = false, endpointStateDetail(p.Reason, "disabled"), now
		audit(ActionEndpointDisabled, endpointStateDetail(p.Reason, "disabled"))
	}
	return ch, nil
}

// PublishTx is the statements of the publishing path.
type PublishTx interface {
	// EndpointReserve returns the stored endpoint p.ID (nil when there is
	// none) and holds its id for the transaction: where the database has
	// row locks it locks the row it found, or, when there is none,
	// inserts a disabled placeholder of p's origin and spec at Now (so
	// that a concurrent first put of the id waits and then finds this
	// one's), which EndpointWrite then replaces.
	EndpointReserve(ctx context.Context, p *EndpointReserveParams) (*Endpoint, error)
	// EndpointRead returns the stored endpoint id (nil when there is
	// none), locked for update where the database has row locks.
	EndpointRead(ctx context.Context, id string) (*Endpoint, error)
	// EndpointWrite stores ep in full, spec being its spec as
	// MarshalSpec encodes it, inserting it or replacing what is stored.
	EndpointWrite(ctx context.Context, ep *Endpoint, spec []byte) error
	// EndpointWriteState stores ep's state: enabled, disabled reason and
	// time, failing since, deleted and updated_at.
	EndpointWriteState(ctx context.Context, ep *Endpoint) error
	// IdempotencyKeysHold writes the key of each of ps (its fingerprint,
	// message id, Now and KeyExpiresAt) unless the key is held: an expired
	// row of the key is taken over in place. It answers, in the order of
	// ps, whether this transaction holds each key now. The keys of ps are
	// distinct. Where the database has row locks, a concurrent publish of
	// the same new key waits for this one's commit, and the keys are
	// written in key order, so that two transactions sharing keys wait
	// for one another in one order and never deadlock.
	IdempotencyKeysHold(ctx context.Context, ps []*MessagePublishParams) ([]bool, error)
	// IdempotencyKeyGet returns the message id, fingerprint and creation
	// time (as ID, Fingerprint and CreatedAt) of the key's holder.
	IdempotencyKeyGet(ctx context.Context, key string) (*MessagePublishResult, error)
	// MessagesInsert stores each message of ps as its event (source
	// PublishSource, event id p.ID, type, causation and hop, received at
	// Now, disposition applied, routed, one delivery) and that delivery
	// (request id p.ID, batch index 0, the headers as a JSON object, the
	// payload byte for byte), and returns the events' pks in the order of
	// ps. An id already taken fails the call.
	MessagesInsert(ctx context.Context, ps []*MessagePublishParams) ([]int64, error)
	// EndpointSpecs returns the id and the stored spec of every endpoint
	// that is not deleted, in id order.
	EndpointSpecs(ctx context.Context) ([]EndpointSpecRow, error)
	// MessageEffectsInsert inserts each effect of ms, state approved,
	// created and updated at Now, unless its episode key exists; with a
	// claim, some of them already claimed (MessageEffectsClaim). Each
	// element of ms is the effects of one message, none of them empty:
	// they share every field but the episode key, entity and destination,
	// so a driver may write the shared ones once a message.
	MessageEffectsInsert(ctx context.Context, ms [][]*MessageEffect, claim *MessageEffectsClaim) error
}

// EndpointReserveParams reserves an endpoint's id.
type EndpointReserveParams struct {
	ID, Origin string
	Spec       []byte
	Now        time.Time
}

// EndpointSpecRow is an endpoint's stored spec.
type EndpointSpecRow struct {
	ID   string
	Spec []byte
}

// EndpointSpecsAhead is a transaction that can send EndpointSpecs' read
// with its next statement that answers, at no round trip of its own
// (PostgreSQL's pipelined transaction), filling *rows by the time that
// statement returns; a failed read fails that statement. A group of
// publishes asks for the endpoints before it holds its keys: read with
// the keys' hold, instead of after the messages are stored, they cost the
// group a round trip less (docs/benchmarks-history.md, "Run AK"), and
// every message of the group still sees the endpoints as they were when
// it was published.
type EndpointSpecsAhead interface {
	EndpointSpecsAhead(rows *[]EndpointSpecRow)
}

// MessageEffect is a message's delivery to one endpoint, as the ledger
// holds it.
type MessageEffect struct {
	EpisodeKey, Flow, Entity, Version, VersionSort, Effect, Destination string
	Request                                                             []byte
	EventPK                                                             int64
	CausationID                                                         string
	Hop                                                                 int
	Now                                                                 time.Time
}

// EndpointPut inserts or replaces an endpoint (see Publishing).
func (r *Rules) EndpointPut(ctx context.Context, p *EndpointPutParams) (*Endpoint, error) {
	if err := checkEndpointPut(p); err != nil {
		return nil, fmt.Errorf("put endpoint: %w", err)
	}
	spec, err := marshalSpec(&p.Spec)
	if err != nil {
		return nil, fmt.Errorf("put endpoint %s: %w", p.ID, err)
	}
	var out *Endpoint
	err = r.db.InTx(ctx, TxWrite, func(ctx context.Context, tx Tx) error {
		cur, err := tx.EndpointReserve(ctx, &EndpointReserveParams{ID: p.ID, Origin: p.Origin, Spec: spec, Now: p.Now})
		if err != nil {
			return fmt.Errorf("reserve endpoint: %w", err)
		}
		change, err := planEndpointPut(cur, p)
		if err != nil {
			return err
		}
		if err := tx.EndpointWrite(ctx, change.Endpoint, spec); err != nil {
			return fmt.Errorf("write endpoint: %w", err)
		}
		out = change.Endpoint
		return auditAll(ctx, tx, change.Audit)
	})
	if err != nil {
		return nil, fmt.Errorf("put endpoint %s: %w", p.ID, err)
	}
	return out, nil
}

// EndpointSetState enables, disables or deletes an endpoint, or records
// when it started failing (see Publishing).
func (r *Rules) EndpointSetState(ctx context.Context, p *EndpointStateParams) (*Endpoint, error) {
	var out *Endpoint
	err := r.db.InTx(ctx, TxWrite, func(ctx context.Context, tx Tx) error {
		cur, err := tx.EndpointRead(ctx, p.ID)
		if err != nil {
			return fmt.Errorf("read endpoint: %w", err)
		}
		change, err := planEndpointState(cur, p)
		if err != nil {
			return err
		}
		if err := tx.EndpointWriteState(ctx, change.Endpoint); err != nil {
			return fmt.Errorf("write endpoint: %w", err)
		}
		out = change.Endpoint
		return auditAll(ctx, tx, change.Audit)
	})
	if err != nil {
		return nil, fmt.Errorf("set state of endpoint %s: %w", p.ID, err)
	}
	return out, nil
}

func auditAll(ctx context.Context, tx Tx, audits []*AuditInsertParams) error {
	for _, a := range audits {
		if err := tx.Audit(ctx, a); err != nil {
			return err
		}
	}
	return nil
}

// MessagePublish stores a message and fans it out in one transaction (see
// Publishing). The idempotency key is written first and gates everything
// else: a publish that finds it held writes nothing and answers with the
// holder's message, a replay.
//
// On PostgreSQL concurrent publishes share a transaction
// (MessagePublishGroup): apart, each paid a commit, and each backend
// inserted its effects into the same index pages as every other one,
// waiting on their locks and on the table's extension; together they took
// a fifth more messages to every endpoint per second, and a lone publish
// still goes at once (docs/benchmarks-history.md, "Publishes in
// groups"). The group runs on a context no caller cancels: a caller that
// went away would otherwise roll back the others' publishes with its own;
// a caller gone before its publish joins a group publishes nothing.
// SQLite's one writer already commits concurrent writes together
// (QueuedDriver), and a group of its own there only held the next
// publishes back until the previous group had committed.
func (r *Rules) MessagePublish(ctx context.Context, p *MessagePublishParams) (*MessagePublishResult, error) {
	var a PublishAnswer
	if r.publisher == nil {
		a = r.MessagePublishGroup(ctx, []*MessagePublishParams{p})[0]
	} else if err := ctx.Err(); err != nil {
		a.Err = fmt.Errorf("publish message %s: %w", p.ID, err)
	} else {
		a = r.publisher.Do(context.WithoutCancel(ctx), p)
	}
	return a.Result, a.Err
}

// PublishAnswer is one publish's answer in a group (MessagePublishGroup).
type PublishAnswer struct {
	Result *MessagePublishResult
	Err    error
}

// Publish groups hold messages whose payloads add up to at most
// maxPublishGroupBytes, each counted as at least publishGroupFloor: up to
// 64 small messages, or a large one alone.
const (
	maxPublishGroupBytes = 1 << 20
	publishGroupFloor    = 16 << 10
)

func publishSize(p *MessagePublishParams) int { return max(len(p.Payload), publishGroupFloor) }

// MessagePublishGroup publishes each message of ps as MessagePublish
// does, all in one transaction, and answers each in order. A key that
// appears twice is held by the first and replayed by the second, as if
// they came one after the other. Should the group fail as a whole (a
// message id taken, a lost connection), each message is published alone,
// so that one cannot fail another; PublishesAlone counts such groups.
func (r *Rules) MessagePublishGroup(ctx context.Context, ps []*MessagePublishParams) []PublishAnswer {
	out := make([]PublishAnswer, len(ps))
	valid := make([]int, 0, len(ps))
	for i, p := range ps {
		if err := checkMessagePublish(p); err != nil {
			out[i].Err = fmt.Errorf("publish message: %w", err)
			continue
		}
		valid = append(valid, i)
	}
	alone := func() []PublishAnswer {
		for _, i := range valid {
			out[i].Result, out[i].Err = r.publishAlone(ctx, ps[i])
		}
		return out
	}
	if len(valid) < 2 {
		return alone()
	}
	group := pick(ps, valid)
	hd := newHanding(group)
	err := r.db.InTx(ctx, TxWrite, func(ctx context.Context, tx Tx) error {
		rs, err := publishMessages(ctx, tx, group, hd)
		if err != nil {
			return err // each is published alone, and answered there
		}
		for j, i := range valid {
			out[i].Result = rs[j]
		}
		return nil
	})
	hd.finish(err == nil, group)
	if err != nil {
		r.publishesAlone.Add(1)
		return alone()
	}
	return out
}

// PublishesAlone reports how many groups of publishes failed as a whole
// and were published one by one since the store was opened: a group of
// new messages never does.
func (r *Rules) PublishesAlone() int64 { return r.publishesAlone.Load() }

// publishAlone is one message's own transaction.
func (r *Rules) publishAlone(ctx context.Context, p *MessagePublishParams) (*MessagePublishResult, error) {
	var res *MessagePublishResult
	ps := []*MessagePublishParams{p}
	hd := newHanding(ps)
	err := r.db.InTx(ctx, TxWrite, func(ctx context.Context, tx Tx) error {
		rs, err := publishMessages(ctx, tx, ps, hd)
		if err == nil {
			res = rs[0]
		}
		return err
	})
	hd.finish(err == nil, ps)
	if err != nil {
		return nil, fmt.Errorf("publish message %s: %w", p.ID, err)
	}
	return res, nil
}

// publishTarget is an endpoint a message may go to: its id and the
// types it subscribes to.
type publishTarget struct {
	id    string
	types []string
}

// publishTargets reads and parses the endpoints a transaction's messages
// may go to, once for the transaction: every message of a group joined it
// before the group began, so each sees the endpoints as they were when it
// was published. ahead, when not nil, holds the rows read ahead
// (EndpointSpecsAhead), and nothing more is read.
func publishTargets(ctx context.Context, tx Tx, ahead *[]EndpointSpecRow) ([]publishTarget, error) {
	var rows []EndpointSpecRow
	if ahead != nil {
		rows = *ahead
	} else {
		var err error
		if rows, err = tx.EndpointSpecs(ctx); err != nil {
			return nil, fmt.Errorf("read endpoints: %w", err)
		}
	}
	out := make([]publishTarget, 0, len(rows))
	for _, r := range rows {
		spec, err := UnmarshalSpec(r.Spec)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", r.ID, err)
		}
		out = append(out, publishTarget{id: r.ID, types: spec.Types})
	}
	return out, nil
}

// publishMessages publishes ps in tx and answers each, in order. The
// idempotency keys are written first and gate everything else: a publish
// that finds its key held writes nothing and answers with the holder's
// message, a replay. A key that comes twice is held by its first message,
// and the later ones replay whatever the first answers, as if they came
// one after the other.
//
// Each step is one call for the whole group: the keys, then the new
// messages' events and deliveries. On PostgreSQL each of those answers
// is a round trip, and a group paid two for every message, one after the
// other, while its publishers waited (docs/benchmarks-history.md,
// "A group's publishes in two round trips"). hd, when not nil, hands the
// deliveries to this process's worker.
func publishMessages(ctx context.Context, tx Tx, ps []*MessagePublishParams, hd *handing) ([]*MessagePublishResult, error) {
	out := make([]*MessagePublishResult, len(ps))
	first := make(map[string]int, len(ps))
	var keyed []int // the first message of each key, by index in ps
	for i, p := range ps {
		if _, ok := first[p.Key]; !ok {
			first[p.Key] = i
			keyed = append(keyed, i)
		}
	}
	var ahead *[]EndpointSpecRow
	if a, ok := tx.(EndpointSpecsAhead); ok {
		ahead = &[]EndpointSpecRow{}
		a.EndpointSpecsAhead(ahead)
	}
	held, err := tx.IdempotencyKeysHold(ctx, pick(ps, keyed))
	if err != nil {
		return nil, fmt.Errorf("hold idempotency keys: %w", err)
	}
	var fresh []int // the messages to store, by index in ps
	for j, i := range keyed {
		if held[j] {
			fresh = append(fresh, i)
			continue
		}
		res, err := tx.IdempotencyKeyGet(ctx, ps[i].Key)
		if err != nil {
			return nil, fmt.Errorf("read idempotency key: %w", err)
		}
		// The key and its event are written together at one Now, so the
		// key's created_at is the event's received_at.
		res.Replayed, res.CreatedAt = true, res.CreatedAt.UTC()
		out[i] = res
	}
	if len(fresh) > 0 {
		rs, err := storeMessages(ctx, tx, pick(ps, fresh), hd, ahead)
		if err != nil {
			return nil, err
		}
		for j, i := range fresh {
			out[i] = rs[j]
		}
	}
	for i, p := range ps {
		if out[i] == nil {
			// A later message of a key: a replay of the first, as the
			// store would answer it (times kept to the microsecond).
			f := out[first[p.Key]]
			out[i] = &MessagePublishResult{ID: f.ID, Fingerprint: f.Fingerprint, CreatedAt: f.CreatedAt.Truncate(time.Microsecond), Replayed: true}
		}
	}
	return out, nil
}

// storeMessages stores the new messages ps, applied and routed from the
// start (the flow engine never sees a message as pending or unrouted
// work), fans each out to the endpoints whose types it matches (ahead,
// when not nil, read already), and answers each.
func storeMessages(ctx context.Context, tx Tx, ps []*MessagePublishParams, hd *handing, ahead *[]EndpointSpecRow) ([]*MessagePublishResult, error) {
	pks, err := tx.MessagesInsert(ctx, ps)
	if err != nil {
		return nil, fmt.Errorf("record messages: %w", err)
	}
	endpoints, err := publishTargets(ctx, tx, ahead)
	if err != nil {
		return nil, err
	}
	out := make([]*MessagePublishResult, len(ps))
	var fans [][]*MessageEffect
	audits := make([]*AuditInsertParams, len(ps))
	for i, p := range ps {
		var fan []*MessageEffect
		out[i], fan = fanOut(p, pks[i], endpoints)
		if len(fan) > 0 {
			fans = append(fans, fan)
		}
		audits[i] = &AuditInsertParams{At: p.Now, Actor: p.Actor, Action: ActionMessagePublished,
			Source: PublishSource, EventID: p.ID, Detail: messagePublishedDetail(p.Type, len(out[i].Endpoints))}
	}
	if len(fans) > 0 {
		// One call for the whole fan-out: inserting the effects one by
		// one was the largest part of a publish's time in the writer.
		claim, err := hd.reserve(fans)
		if err != nil {
			return nil, err
		}
		if err := tx.MessageEffectsInsert(ctx, fans, claim); err != nil {
			return nil, fmt.Errorf("insert effects: %w", err)
		}
	}
	if err := tx.Audit(ctx, audits...); err != nil {
		return nil, err
	}
	return out, nil
}

// pick is the elements of ps at the indexes at, in that order.
func pick(ps []*MessagePublishParams, at []int) []*MessagePublishParams {
	out := make([]*MessagePublishParams, len(at))
	for j, i := range at {
		out[j] = ps[i]
	}
	return out
}

// fanOut is the answer to message p, stored as event pk, and its effects:
// one for each of endpoints whose types it matches.
func fanOut(p *MessagePublishParams, pk int64, endpoints []publishTarget) (*MessagePublishResult, []*MessageEffect) {
	res := &MessagePublishResult{ID: p.ID, Fingerprint: p.Fingerprint, CreatedAt: p.Now.UTC(), Endpoints: []string{}}
	request := publishRequest(p.ID, p.Payload)
	versionSort := publishVersionSort(p.Now, p.ID)
	var effects []*MessageEffect
	for _, t := range endpoints {
		if !matchType(t.types, p.Type) {
			continue
		}
		effects = append(effects, &MessageEffect{EpisodeKey: PublishEpisodeKey(p.ID, t.id), Flow: PublishFlow,
			Entity: t.id, Version: p.ID, VersionSort: versionSort, Effect: PublishEffect, Destination: EndpointDestination(t.id),
			Request: request, EventPK: pk, CausationID: p.CausationID, Hop: p.Hop, Now: p.Now})
		res.Endpoints = append(res.Endpoints, t.id)
	}
	return res, effects
}
