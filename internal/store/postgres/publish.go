package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// The publishing path (see store.Publishing). Each call is one plain
// transaction at READ COMMITTED: publishing is rare next to ingest, so it
// takes no part in the pipelined machinery.

const endpointColumns = `id, origin, spec, enabled, disabled_reason, disabled_at, failing_since, deleted, created_at, updated_at`

func scanEndpoint(r pgx.Row) (*store.Endpoint, error) {
	var (
		ep                       store.Endpoint
		spec                     []byte
		disabledAt, failingSince *time.Time
	)
	if err := r.Scan(&ep.ID, &ep.Origin, &spec, &ep.Enabled, &ep.DisabledReason, &disabledAt, &failingSince, &ep.Deleted,
		&ep.CreatedAt, &ep.UpdatedAt); err != nil {
		return nil, err
	}
	s, err := store.UnmarshalSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", ep.ID, err)
	}
	ep.EndpointSpec = *s
	ep.DisabledAt, ep.FailingSince = fromNull(disabledAt), fromNull(failingSince)
	ep.CreatedAt, ep.UpdatedAt = ep.CreatedAt.UTC(), ep.UpdatedAt.UTC()
	return &ep, nil
}

// getEndpoint reads the endpoint, or nil; lock takes its row lock so that
// concurrent changes of one endpoint take turns.
func getEndpoint(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, id string, lock bool) (*store.Endpoint, error) {
	sql := `SELECT ` + endpointColumns + ` FROM endpoints WHERE id = $1`
	if lock {
		sql += ` FOR UPDATE`
	}
	ep, err := scanEndpoint(q.QueryRow(ctx, sql, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return ep, err
}

func writeAudits(ctx context.Context, tx pgx.Tx, audits []*store.AuditInsertParams) error {
	for _, a := range audits {
		if _, err := tx.Exec(ctx, insertAuditSQL, a.At, a.Actor, a.Action, a.Source, a.EventID, a.Entity, a.Detail); err != nil {
			return wrapErr("insert audit", err)
		}
	}
	return nil
}

// EndpointPut inserts or replaces an endpoint (see store.Publishing).
func (s *Store) EndpointPut(ctx context.Context, p *store.EndpointPutParams) (*store.Endpoint, error) {
	if err := store.CheckEndpointPut(p); err != nil {
		return nil, fmt.Errorf("put endpoint: %w", err)
	}
	spec, err := store.MarshalSpec(&p.Spec)
	if err != nil {
		return nil, fmt.Errorf("put endpoint %s: %w", p.ID, err)
	}
	var out *store.Endpoint
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Two first puts of one id at once: the loser's insert waits for
		// the winner and then inserts nothing, and the row it then locks is
		// the winner's, replaced as any existing endpoint is. The reserved
		// row is written in full below.
		inserted := false
		err := tx.QueryRow(ctx, `INSERT INTO endpoints (id, origin, spec, enabled, created_at, updated_at)
			VALUES ($1, $2, $3::jsonb, false, $4, $4) ON CONFLICT (id) DO NOTHING RETURNING true`,
			p.ID, p.Origin, string(spec), p.Now).Scan(&inserted)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return wrapErr("reserve endpoint", err)
		}
		var cur *store.Endpoint
		if !inserted {
			if cur, err = getEndpoint(ctx, tx, p.ID, true); err != nil {
				return fmt.Errorf("read endpoint: %w", err)
			}
		}
		plan, err := store.PlanEndpointPut(cur, p)
		if err != nil {
			return err
		}
		ep := plan.Endpoint
		if _, err := tx.Exec(ctx, `UPDATE endpoints SET origin = $2, spec = $3::jsonb, enabled = $4, disabled_reason = $5,
			disabled_at = $6, failing_since = $7, deleted = $8, created_at = $9, updated_at = $10 WHERE id = $1`,
			ep.ID, ep.Origin, string(spec), ep.Enabled, ep.DisabledReason, nullTime(ep.DisabledAt), nullTime(ep.FailingSince),
			ep.Deleted, ep.CreatedAt, ep.UpdatedAt); err != nil {
			return wrapErr("write endpoint", err)
		}
		out = ep
		return writeAudits(ctx, tx, plan.Audit)
	})
	if err != nil {
		return nil, fmt.Errorf("put endpoint %s: %w", p.ID, err)
	}
	return out, nil
}

// EndpointGet returns the endpoint, deleted or not, or nil.
func (s *Store) EndpointGet(ctx context.Context, id string) (*store.Endpoint, error) {
	ep, err := getEndpoint(ctx, s.pool, id, false)
	if err != nil {
		return nil, fmt.Errorf("get endpoint %s: %w", id, err)
	}
	return ep, nil
}

// EndpointList returns the endpoints that are not deleted, in id order.
func (s *Store) EndpointList(ctx context.Context) ([]*store.Endpoint, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE NOT deleted ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Endpoint, error) { return scanEndpoint(r) })
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	return out, nil
}

// EndpointSetState enables, disables or deletes an endpoint, or records
// when it started failing.
func (s *Store) EndpointSetState(ctx context.Context, p *store.EndpointStateParams) (*store.Endpoint, error) {
	var out *store.Endpoint
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		cur, err := getEndpoint(ctx, tx, p.ID, true)
		if err != nil {
			return fmt.Errorf("read endpoint: %w", err)
		}
		plan, err := store.PlanEndpointState(cur, p)
		if err != nil {
			return err
		}
		ep := plan.Endpoint
		if _, err := tx.Exec(ctx, `UPDATE endpoints SET enabled = $2, disabled_reason = $3, disabled_at = $4,
			failing_since = $5, deleted = $6, updated_at = $7 WHERE id = $1`,
			ep.ID, ep.Enabled, ep.DisabledReason, nullTime(ep.DisabledAt), nullTime(ep.FailingSince), ep.Deleted, ep.UpdatedAt); err != nil {
			return wrapErr("write endpoint", err)
		}
		out = ep
		return writeAudits(ctx, tx, plan.Audit)
	})
	if err != nil {
		return nil, fmt.Errorf("set state of endpoint %s: %w", p.ID, err)
	}
	return out, nil
}

// MessagePublish stores a message and fans it out in one transaction.
//
// The idempotency key is written first and gates everything else: a
// concurrent publish of the same new key blocks on the key's uncommitted
// row, and once the first transaction commits its insert does nothing and
// it reads the first message back (READ COMMITTED takes a new snapshot per
// statement), ending as a replay instead of a second message or an error.
func (s *Store) MessagePublish(ctx context.Context, p *store.MessagePublishParams) (*store.MessagePublishResult, error) {
	if err := store.CheckMessagePublish(p); err != nil {
		return nil, fmt.Errorf("publish message: %w", err)
	}
	var res *store.MessagePublishResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = publishMessage(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("publish message %s: %w", p.ID, err)
	}
	return res, nil
}

func publishMessage(ctx context.Context, tx pgx.Tx, p *store.MessagePublishParams) (*store.MessagePublishResult, error) {
	// An expired row of the key is taken over in place; a live one makes
	// this a replay that writes nothing.
	held := false
	err := tx.QueryRow(ctx, `INSERT INTO idempotency_keys (key, fingerprint, message_id, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, message_id = excluded.message_id,
			created_at = excluded.created_at, expires_at = excluded.expires_at
		WHERE idempotency_keys.expires_at <= excluded.created_at
		RETURNING true`,
		p.Key, p.Fingerprint, p.ID, p.Now, p.KeyExpiresAt).Scan(&held)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, wrapErr("hold idempotency key", err)
	}
	if !held {
		res := &store.MessagePublishResult{Replayed: true}
		if err := tx.QueryRow(ctx, `SELECT message_id, fingerprint, created_at FROM idempotency_keys WHERE key = $1`, p.Key).
			Scan(&res.ID, &res.Fingerprint, &res.CreatedAt); err != nil {
			return nil, fmt.Errorf("read idempotency key: %w", err)
		}
		// The key and its event are written together at one Now, so the
		// key's created_at is the event's received_at.
		res.CreatedAt = res.CreatedAt.UTC()
		return res, nil
	}
	// Applied and routed from the start: the flow engine never sees a
	// message as pending or unrouted work.
	var pk int64
	if err := tx.QueryRow(ctx, `INSERT INTO events
		(source, event_id, type, entity, account, received_at, causation_id, hop, disposition, routed, deliveries)
		VALUES ($1, $2, $3, '', '', $4, $5, $6, 'applied', true, 1) RETURNING pk`,
		store.PublishSource, p.ID, p.Type, p.Now, p.CausationID, p.Hop).Scan(&pk); err != nil {
		return nil, wrapErr("record message event", err)
	}
	headers := p.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	payload := p.Payload
	if payload == nil {
		payload = []byte{}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO deliveries
		(event_pk, request_id, batch_index, source, event_id, type, entity, account, received_at, causation_id, hop, headers, body)
		VALUES ($1, $2, 0, $3, $4, $5, '', '', $6, $7, $8, $9, $10)`,
		pk, p.ID, store.PublishSource, p.ID, p.Type, p.Now, p.CausationID, p.Hop, headers, payload); err != nil {
		return nil, wrapErr("record message delivery", err)
	}
	type target struct {
		id   string
		spec []byte
	}
	rows, err := tx.Query(ctx, `SELECT id, spec FROM endpoints WHERE NOT deleted ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read endpoints: %w", err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (target, error) {
		var t target
		err := r.Scan(&t.id, &t.spec)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("read endpoints: %w", err)
	}
	res := &store.MessagePublishResult{ID: p.ID, Fingerprint: p.Fingerprint, CreatedAt: p.Now.UTC(), Endpoints: []string{}}
	request := string(store.PublishRequest(p.ID, p.Payload))
	versionSort := store.PublishVersionSort(p.Now, p.ID)
	for _, t := range all {
		spec, err := store.UnmarshalSpec(t.spec)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", t.id, err)
		}
		if !store.MatchType(spec.Types, p.Type) {
			continue
		}
		if _, err := tx.Exec(ctx, `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
			state, request, source_event_pk, causation_id, hop, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, 'approved', $8::jsonb, $9, $10, $11, $12, $12) ON CONFLICT (episode_key) DO NOTHING`,
			store.PublishEpisodeKey(p.ID, t.id), store.PublishFlow, t.id, p.ID, versionSort, store.PublishEffect,
			store.EndpointDestination(t.id), request, pk, p.CausationID, p.Hop, p.Now); err != nil {
			return nil, wrapErr("insert effect", err)
		}
		res.Endpoints = append(res.Endpoints, t.id)
	}
	if _, err := tx.Exec(ctx, insertAuditSQL, p.Now, p.Actor, store.ActionMessagePublished, store.PublishSource, p.ID, "",
		store.MessagePublishedDetail(p.Type, len(res.Endpoints))); err != nil {
		return nil, wrapErr("insert audit", err)
	}
	return res, nil
}

// IdempotencyPrune deletes up to limit keys expired at now.
func (s *Store) IdempotencyPrune(ctx context.Context, now time.Time, limit int) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE key IN
		(SELECT key FROM idempotency_keys WHERE expires_at <= $1 ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		now, store.ClampLimit(limit))
	if err != nil {
		return 0, fmt.Errorf("prune idempotency keys: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// EffectsDueNow brings the destination's waiting retries forward to now.
func (s *Store) EffectsDueNow(ctx context.Context, destination string, now time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE effects SET next_attempt_at = $1
		WHERE destination = $2 AND state = 'retry_wait' AND next_attempt_at > $1`, now, destination)
	if err != nil {
		return 0, fmt.Errorf("make effects of %s due: %w", destination, err)
	}
	return int(tag.RowsAffected()), nil
}
