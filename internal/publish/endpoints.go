package publish

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

// Errors the admin API maps onto status codes.
var (
	// ErrInvalid is a request that names a bad field (400).
	ErrInvalid = errors.New("invalid request")
	// ErrConflict is a request the endpoint's state forbids (409).
	ErrConflict = errors.New("conflict")
)

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

func conflict(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrConflict, fmt.Sprintf(format, args...))
}

// newSecret makes a signing key: kind v1 gives whsec_ and 32 random bytes,
// v1a an ed25519 key pair as whsk_ (the seed) with its whpk_ public key.
func newSecret(kind string, now time.Time) (store.EndpointSecret, error) {
	var key string
	switch kind {
	case "", store.SecretHMAC:
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return store.EndpointSecret{}, fmt.Errorf("generate secret: %w", err)
		}
		key = "whsec_" + base64.StdEncoding.EncodeToString(b)
	case store.SecretEd25519:
		_, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return store.EndpointSecret{}, fmt.Errorf("generate key pair: %w", err)
		}
		key = "whsk_" + base64.StdEncoding.EncodeToString(priv.Seed())
	default:
		return store.EndpointSecret{}, invalid("kind: %q is not v1 (HMAC-SHA256) or v1a (ed25519)", kind)
	}
	return secretOf(key, now)
}

// secretOf describes a key. Its id is derived from the key, so the same
// key written in the config keeps its id across restarts; eight bytes of
// a SHA-256 tell nothing usable about a key of 24 bytes or more.
func secretOf(key string, now time.Time) (store.EndpointSecret, error) {
	kind, pub, err := config.ParseSecret(key)
	if err != nil {
		return store.EndpointSecret{}, invalid("secret: %v", err)
	}
	sum := sha256.Sum256([]byte(key))
	return store.EndpointSecret{ID: "sec_" + hex.EncodeToString(sum[:8]), Kind: kind, Key: key, Public: pub, CreatedAt: now.UTC()}, nil
}

// Sync writes the config's endpoints to the store: their spec comes from
// the file, their state stays (a 410 or an operator may have disabled
// one) unless the file says enabled: false. An endpoint without secrets
// in the file keeps the ones stored, or gets one generated on its first
// start. Config endpoints no longer in the file are deleted.
func (s *Service) Sync(ctx context.Context) error {
	now := s.clk.Now()
	inFile := map[string]bool{}
	for _, ec := range s.cfg.Endpoints {
		inFile[ec.ID] = true
		old, err := s.st.EndpointGet(ctx, ec.ID)
		if err != nil {
			return fmt.Errorf("sync endpoint %s: %w", ec.ID, err)
		}
		spec := store.EndpointSpec{URL: ec.URL, Description: ec.Description, Owner: ec.Owner, Types: ec.Types,
			AllowPrivateNetworks: ec.AllowPrivateNetworks, MaxInFlight: ec.MaxInFlight, RateLimit: ec.RateLimit}
		for _, k := range ec.Secrets {
			sec, err := secretOf(k, now)
			if err != nil {
				return fmt.Errorf("endpoint %s: %w", ec.ID, err)
			}
			if old != nil {
				// Keep when it was first seen.
				for _, o := range old.Secrets {
					if o.ID == sec.ID {
						sec.CreatedAt = o.CreatedAt
					}
				}
			}
			spec.Secrets = append(spec.Secrets, sec)
		}
		if len(spec.Secrets) == 0 {
			if old != nil && len(old.Secrets) > 0 {
				spec.Secrets = old.Secrets
			} else {
				sec, err := newSecret(store.SecretHMAC, now)
				if err != nil {
					return err
				}
				spec.Secrets = []store.EndpointSecret{sec}
				s.log.Info("endpoint secret generated (read it with GET /api/v1/endpoints/{id}/secrets)", "endpoint", ec.ID)
			}
		}
		_, err = s.st.EndpointPut(ctx, &store.EndpointPutParams{ID: ec.ID, Origin: store.OriginConfig, Spec: spec,
			Enabled: ec.Enabled == nil || *ec.Enabled, ForceDisabled: ec.Enabled != nil && !*ec.Enabled, Undelete: true,
			Actor: "config", Now: now})
		if err != nil {
			return fmt.Errorf("sync endpoint %s: %w", ec.ID, err)
		}
	}
	list, err := s.st.EndpointList(ctx)
	if err != nil {
		return fmt.Errorf("sync endpoints: %w", err)
	}
	for _, e := range list {
		if e.Origin != store.OriginConfig || inFile[e.ID] {
			continue
		}
		// Removed from the file. With messages still to deliver it is only
		// disabled, so they park in sight; a start after they are resolved
		// deletes it.
		left, err := s.undelivered(ctx, e.ID)
		if err != nil {
			return fmt.Errorf("sync endpoints: %w", err)
		}
		p := &store.EndpointStateParams{ID: e.ID, Delete: true, Reason: "removed from the config file", Actor: "config", Now: now}
		if left != nil {
			off := false
			p = &store.EndpointStateParams{ID: e.ID, Enabled: &off, Actor: "config", Now: now,
				Reason: "removed from the config file; deleted at a start after its parked messages are resolved"}
			s.log.Warn("endpoint removed from the config file still has messages to deliver: disabled, not deleted", "endpoint", e.ID, "effect", left.ID)
		}
		if _, err := s.st.EndpointSetState(ctx, p); err != nil {
			return fmt.Errorf("sync endpoints: %w", err)
		}
		if left != nil {
			if _, err := s.st.EffectsDueNow(ctx, store.EndpointDestination(e.ID), now); err != nil {
				return fmt.Errorf("sync endpoints: %w", err)
			}
		}
	}
	return nil
}

// EndpointInput is what the admin API may set on an endpoint; nil fields
// are left as they are on an update.
type EndpointInput struct {
	ID                   *string   `json:"id"`
	URL                  *string   `json:"url"`
	Description          *string   `json:"description"`
	Owner                *string   `json:"owner"`
	Types                *[]string `json:"types"`
	Enabled              *bool     `json:"enabled"`
	AllowPrivateNetworks *bool     `json:"allow_private_networks"`
	MaxInFlight          *int      `json:"max_in_flight"`
	RateLimit            *float64  `json:"rate_limit"`
	// Secret (create only) is the first signing key; SecretKind asks for
	// a generated one of that kind (v1 or v1a) instead.
	Secret     *string `json:"secret"`
	SecretKind *string `json:"secret_kind"`
}

func (in *EndpointInput) apply(spec *store.EndpointSpec) error {
	if in.URL != nil {
		var bad error
		config.CheckEndpointURL(func(f string, a ...any) { bad = invalid("url: %s", fmt.Sprintf(f, a...)) }, *in.URL)
		if bad != nil {
			return bad
		}
		spec.URL = *in.URL
	}
	// Free text, but text every store holds: NUL or invalid UTF-8 would
	// come back from PostgreSQL as a failure of the store.
	if in.Description != nil {
		if err := store.CheckText("description", *in.Description); err != nil {
			return invalid("%v", err)
		}
		spec.Description = *in.Description
	}
	if in.Owner != nil {
		if err := store.CheckText("owner", *in.Owner); err != nil {
			return invalid("%v", err)
		}
		spec.Owner = *in.Owner
	}
	if in.Types != nil {
		for i, t := range *in.Types {
			if err := store.CheckTypePattern(t); err != nil {
				return invalid("types[%d]: %v", i, err)
			}
		}
		spec.Types = *in.Types
	}
	if in.AllowPrivateNetworks != nil {
		spec.AllowPrivateNetworks = *in.AllowPrivateNetworks
	}
	if in.MaxInFlight != nil {
		if *in.MaxInFlight < 0 || *in.MaxInFlight > 1024 {
			return invalid("max_in_flight: must be from 1 to 1024 (0 for the default)")
		}
		spec.MaxInFlight = *in.MaxInFlight
	}
	if in.RateLimit != nil {
		if *in.RateLimit < 0 {
			return invalid("rate_limit: must be positive (deliveries per second; 0 for none)")
		}
		spec.RateLimit = *in.RateLimit
	}
	return nil
}

// Create makes an endpoint through the admin API and returns it with its
// first secret (shown once here; GET …/secrets shows it again).
func (s *Service) Create(ctx context.Context, in *EndpointInput, actor string) (*store.Endpoint, error) {
	now := s.clk.Now()
	id := ""
	if in.ID != nil {
		id = *in.ID
	}
	if id == "" {
		b := make([]byte, 8)
		if _, err := rand.Read(b); err != nil {
			return nil, fmt.Errorf("endpoint id: %w", err)
		}
		id = "ep_" + hex.EncodeToString(b)
	}
	if !config.ValidEndpointID(id) {
		return nil, invalid("id: %q: use letters, digits, '_', '.' and '-' (at most 64)", id)
	}
	if in.URL == nil {
		return nil, invalid("url: required")
	}
	var spec store.EndpointSpec
	if err := in.apply(&spec); err != nil {
		return nil, err
	}
	var sec store.EndpointSecret
	var err error
	switch {
	case in.Secret != nil:
		sec, err = secretOf(*in.Secret, now)
	case in.SecretKind != nil:
		sec, err = newSecret(*in.SecretKind, now)
	default:
		sec, err = newSecret(store.SecretHMAC, now)
	}
	if err != nil {
		return nil, err
	}
	spec.Secrets = []store.EndpointSecret{sec}
	if old, err := s.st.EndpointGet(ctx, id); err != nil {
		return nil, err
	} else if old != nil && !old.Deleted {
		return nil, conflict("endpoint %s exists", id)
	}
	e, err := s.st.EndpointPut(ctx, &store.EndpointPutParams{ID: id, Origin: store.OriginAPI, Spec: spec,
		Enabled: in.Enabled == nil || *in.Enabled, ForceDisabled: in.Enabled != nil && !*in.Enabled, Undelete: true, Actor: actor, Now: now})
	if err != nil {
		return nil, err
	}
	return e, s.Refresh(ctx)
}

// Get returns one endpoint as stored, or nil.
func (s *Service) Get(ctx context.Context, id string) (*store.Endpoint, error) {
	e, err := s.st.EndpointGet(ctx, id)
	if err != nil || e == nil || e.Deleted {
		return nil, err
	}
	return e, nil
}

// List returns the endpoints.
func (s *Service) List(ctx context.Context) ([]*store.Endpoint, error) {
	return s.st.EndpointList(ctx)
}

// Update changes an endpoint. An endpoint from the config file takes only
// enabled: its other fields belong to the file.
func (s *Service) Update(ctx context.Context, id string, in *EndpointInput, actor string) (*store.Endpoint, error) {
	e, err := s.Get(ctx, id)
	if err != nil || e == nil {
		return nil, err
	}
	if in.ID != nil && *in.ID != id {
		return nil, invalid("id: an endpoint's id cannot change")
	}
	if in.Secret != nil || in.SecretKind != nil {
		return nil, invalid("secret: change secrets with POST /api/v1/endpoints/%s/rotate", id)
	}
	specChange := in.URL != nil || in.Description != nil || in.Owner != nil || in.Types != nil ||
		in.AllowPrivateNetworks != nil || in.MaxInFlight != nil || in.RateLimit != nil
	if specChange {
		if e.Origin == store.OriginConfig {
			return nil, conflict("endpoint %s is defined in the config file: change it there (only enabled can be set here)", id)
		}
		spec := e.EndpointSpec
		if err := in.apply(&spec); err != nil {
			return nil, err
		}
		if e, err = s.st.EndpointPut(ctx, &store.EndpointPutParams{ID: id, Origin: e.Origin, Spec: spec, Actor: actor, Now: s.clk.Now()}); err != nil {
			return nil, err
		}
	}
	if in.Enabled != nil && *in.Enabled != e.Enabled {
		if e, err = s.SetEnabled(ctx, id, *in.Enabled, "by "+actor, actor); err != nil {
			return nil, err
		}
	}
	return e, s.Refresh(ctx)
}

// SetEnabled enables or disables an endpoint. Enabling re-drives its
// parked messages, oldest first, so they are claimed in the order they
// were published.
func (s *Service) SetEnabled(ctx context.Context, id string, enabled bool, reason, actor string) (*store.Endpoint, error) {
	now := s.clk.Now()
	p := &store.EndpointStateParams{ID: id, Enabled: &enabled, Reason: reason, Actor: actor, Now: now}
	if enabled {
		zero := time.Time{}
		p.FailingSince = &zero
	}
	e, err := s.st.EndpointSetState(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := s.Refresh(ctx); err != nil {
		return e, err
	}
	if !enabled {
		// Messages waiting for a retry park now, in sight, instead of at
		// their next retry hours from now.
		n, err := s.st.EffectsDueNow(ctx, store.EndpointDestination(id), now)
		if err != nil {
			return e, fmt.Errorf("park waiting messages of %s: %w", id, err)
		}
		if n > 0 {
			s.opts.Wake()
		}
	}
	if enabled {
		n, err := s.unpark(ctx, id, actor)
		if err != nil {
			return e, fmt.Errorf("re-drive parked messages of %s: %w", id, err)
		}
		if n > 0 {
			s.log.Info("parked messages re-driven", "endpoint", id, "messages", n)
			s.opts.Wake()
		}
	}
	return e, nil
}

// unpark moves the endpoint's dead effects back to approved in id order
// (the order of their messages); each is audited as an operator's retry.
func (s *Service) unpark(ctx context.Context, id, actor string) (int, error) {
	n := 0
	after := int64(0)
	for {
		list, err := s.st.EffectList(ctx, &store.EffectListParams{Destination: store.EndpointDestination(id),
			State: store.EffectDead, AfterID: after, Limit: 500, WithoutRequest: true})
		if err != nil {
			return n, err
		}
		for _, f := range list {
			after = f.ID
			_, err := s.st.EffectOperate(ctx, &store.EffectOperateParams{EffectID: f.ID, Action: store.OperateRetry,
				Actor: actor, Note: "endpoint " + id + " enabled", Now: s.clk.Now()})
			if err != nil && !errors.Is(err, store.ErrInvalidTransition) {
				return n, err
			}
			if err == nil {
				n++
			}
		}
		if len(list) < 500 {
			return n, nil
		}
	}
}

// Delete removes an endpoint that is disabled and has no message left to
// deliver, parked ones included: a parked message of a deleted endpoint
// could be retried into a destination no process serves, out of sight.
func (s *Service) Delete(ctx context.Context, id, actor string) error {
	e, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	if e == nil {
		return store.ErrNotFound
	}
	if e.Origin == store.OriginConfig {
		return conflict("endpoint %s is defined in the config file: remove it there", id)
	}
	if e.Enabled {
		return conflict("endpoint %s is enabled: disable it first, so its messages park in the exception queue instead of vanishing", id)
	}
	left, err := s.undelivered(ctx, id)
	if err != nil {
		return err
	}
	if left != nil {
		return conflict("endpoint %s still has messages to deliver (effect %d is %s): enable it to deliver them, or resolve its parked messages in the exception queue, then delete it",
			id, left.ID, left.State)
	}
	if _, err := s.st.EndpointSetState(ctx, &store.EndpointStateParams{ID: id, Delete: true, Reason: "deleted by " + actor, Actor: actor, Now: s.clk.Now()}); err != nil {
		return err
	}
	return s.Refresh(ctx)
}

// undelivered returns one of the endpoint's messages that is not final
// (parked ones included), or nil.
func (s *Service) undelivered(ctx context.Context, id string) (*store.Effect, error) {
	list, err := s.st.EffectList(ctx, &store.EffectListParams{Destination: store.EndpointDestination(id),
		States: []store.EffectState{store.EffectApproved, store.EffectRetryWait, store.EffectSubmitting, store.EffectNeedsReconciliation,
			store.EffectDead}, Limit: 1, WithoutRequest: true})
	if err != nil || len(list) == 0 {
		return nil, err
	}
	return list[0], nil
}

// Rotate adds a signing key (the one given, or a generated one of kind)
// and ends the others after overlap (negative: the configured default);
// meanwhile every delivery carries a signature by each.
func (s *Service) Rotate(ctx context.Context, id, key, kind string, overlap time.Duration, actor string) (*store.Endpoint, store.EndpointSecret, error) {
	e, err := s.Get(ctx, id)
	if err != nil || e == nil {
		if err == nil {
			err = store.ErrNotFound
		}
		return nil, store.EndpointSecret{}, err
	}
	if e.Origin == store.OriginConfig {
		return nil, store.EndpointSecret{}, conflict("endpoint %s is defined in the config file: list the new secret beside the old one there, then remove the old one", id)
	}
	now := s.clk.Now()
	if overlap < 0 {
		overlap = s.cfg.Publish.RotationOverlap.D()
	}
	var sec store.EndpointSecret
	if key != "" {
		sec, err = secretOf(key, now)
	} else {
		sec, err = newSecret(kind, now)
	}
	if err != nil {
		return nil, sec, err
	}
	spec := e.EndpointSpec
	var keep []store.EndpointSecret
	for _, o := range spec.Secrets {
		if o.ID == sec.ID {
			return nil, sec, conflict("that secret is already one of endpoint %s's", id)
		}
		if !o.Active(now) {
			continue // expired: dropped now
		}
		if o.ExpiresAt.IsZero() || o.ExpiresAt.After(now.Add(overlap)) {
			o.ExpiresAt = now.Add(overlap).UTC()
		}
		keep = append(keep, o)
	}
	spec.Secrets = append(keep, sec)
	e, err = s.st.EndpointPut(ctx, &store.EndpointPutParams{ID: id, Origin: e.Origin, Spec: spec, Actor: actor, Now: now})
	if err != nil {
		return nil, sec, err
	}
	return e, sec, s.Refresh(ctx)
}

// delivered records the outcome of one delivery to an endpoint: a success
// ends its run of failures; a 410 disables it at once; a failure starts a
// run, or disables it when the run has lasted publish.disable_after.
func (s *Service) delivered(ctx context.Context, id string, status int, failed bool) {
	e := s.endpoint(id)
	if e == nil {
		return
	}
	now := s.clk.Now()
	var err error
	switch {
	case !failed && e.FailingSince.IsZero():
		// Nothing changes: no write, and no re-read of every endpoint
		// (once per delivery, it was the largest share of the fan-out's
		// CPU).
		return
	case !failed:
		zero := time.Time{}
		_, err = s.st.EndpointSetState(ctx, &store.EndpointStateParams{ID: id, FailingSince: &zero, Actor: "delivery", Now: now})
	case status == 410:
		s.disable(ctx, e, "it answered 410 Gone at "+now.UTC().Format(time.RFC3339))
		return
	case e.FailingSince.IsZero():
		_, err = s.st.EndpointSetState(ctx, &store.EndpointStateParams{ID: id, FailingSince: &now, Actor: "delivery", Now: now})
	case now.Sub(e.FailingSince) >= s.cfg.Publish.DisableAfter.D() && e.Enabled:
		s.disable(ctx, e, fmt.Sprintf("every delivery has failed since %s (publish.disable_after %s)",
			e.FailingSince.UTC().Format(time.RFC3339), s.cfg.Publish.DisableAfter.D()))
		return
	default:
		return
	}
	if err != nil {
		s.log.Warn("endpoint state not recorded", "endpoint", id, "err", err)
		return
	}
	if err := s.Refresh(ctx); err != nil {
		s.log.Warn("endpoints not re-read", "err", err)
	}
}

func (s *Service) disable(ctx context.Context, e *store.Endpoint, reason string) {
	if !e.Enabled {
		return
	}
	// Deliveries in flight together (max_in_flight above 1) each read the
	// endpoint enabled in the snapshot and each decide to disable it; the
	// owner would be told once per delivery. The decision is taken again
	// on the stored endpoint, one delivery at a time.
	s.disableMu.Lock()
	defer s.disableMu.Unlock()
	cur, err := s.st.EndpointGet(ctx, e.ID)
	if err != nil {
		s.log.Warn("endpoint not disabled", "endpoint", e.ID, "err", err)
		return
	}
	if cur == nil || cur.Deleted || !cur.Enabled {
		return
	}
	if _, err := s.SetEnabled(ctx, e.ID, false, reason, "delivery"); err != nil {
		s.log.Warn("endpoint not disabled", "endpoint", e.ID, "err", err)
		return
	}
	s.m.disabled.Inc()
	s.log.Warn("endpoint disabled", "endpoint", e.ID, "reason", reason)
	if s.opts.Notify != nil {
		s.opts.Notify(deliver.Notification{Destination: "endpoint " + e.ID, Owner: e.Owner,
			Reason:          "disabled: " + reason + "; its messages are parked in the exception queue",
			SuggestedRepair: fmt.Sprintf("fix the receiver, then enable the endpoint (PATCH /api/v1/endpoints/%s {\"enabled\": true}): the parked messages are delivered in order", e.ID)})
	}
}

// Counts are an endpoint's messages parked in the exception queue (dead)
// and those waiting for a retry or a reconciliation. Calls in flight and
// messages due now are not counted: they are on the wire or about to be.
type Counts struct{ Parked, Pending int }

// Backlogs counts every endpoint's messages with the ledger's one count of
// parked effects per destination (no effect rows are read), by endpoint id.
func (s *Service) Backlogs(ctx context.Context) (map[string]Counts, error) {
	counts, err := s.st.EffectParked(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]Counts{}
	for _, c := range counts {
		id, ok := strings.CutPrefix(c.Destination, store.EndpointDestinationPrefix)
		if !ok {
			continue
		}
		n := out[id]
		if c.State == store.EffectDead {
			n.Parked += int(c.Count)
		} else {
			n.Pending += int(c.Count)
		}
		out[id] = n
	}
	return out, nil
}
