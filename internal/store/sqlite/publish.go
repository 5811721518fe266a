package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The publishing path (see store.Publishing). Its writes go through the
// shared writer like the pipeline's: the single writer serialises them, so
// two publishes of one idempotency key take turns and the second finds
// the first's key.

const endpointColumns = `id, origin, spec, enabled, disabled_reason, disabled_at, failing_since, deleted, created_at, updated_at`

func scanEndpoint(r scanner) (*store.Endpoint, error) {
	var (
		ep                       store.Endpoint
		spec                     string
		enabled, deleted         int64
		disabledAt, failingSince sql.NullInt64
		createdAt, updatedAt     int64
	)
	if err := r.Scan(&ep.ID, &ep.Origin, &spec, &enabled, &ep.DisabledReason, &disabledAt, &failingSince, &deleted,
		&createdAt, &updatedAt); err != nil {
		return nil, err
	}
	s, err := store.UnmarshalSpec([]byte(spec))
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", ep.ID, err)
	}
	ep.EndpointSpec = *s
	ep.Enabled, ep.Deleted = enabled != 0, deleted != 0
	ep.DisabledAt, ep.FailingSince = fromMicros(disabledAt), fromMicros(failingSince)
	ep.CreatedAt, ep.UpdatedAt = time.UnixMicro(createdAt).UTC(), time.UnixMicro(updatedAt).UTC()
	return &ep, nil
}

func getEndpoint(ctx context.Context, q *wtx, id string) (*store.Endpoint, error) {
	ep, err := scanEndpoint(q.QueryRowContext(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return ep, err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
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
	out, err := s.changeEndpoint(ctx, p.ID, func(cur *store.Endpoint) (*store.EndpointChange, error) { return store.PlanEndpointPut(cur, p) },
		func(ctx context.Context, tx *wtx, ep *store.Endpoint) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO endpoints (`+endpointColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET origin = excluded.origin, spec = excluded.spec, enabled = excluded.enabled,
				disabled_reason = excluded.disabled_reason, disabled_at = excluded.disabled_at,
				failing_since = excluded.failing_since, deleted = excluded.deleted,
				created_at = excluded.created_at, updated_at = excluded.updated_at`,
				ep.ID, ep.Origin, string(spec), boolInt(ep.Enabled), ep.DisabledReason, micros(ep.DisabledAt), micros(ep.FailingSince),
				boolInt(ep.Deleted), ep.CreatedAt.UnixMicro(), ep.UpdatedAt.UnixMicro())
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("put endpoint %s: %w", p.ID, err)
	}
	return out, nil
}

// changeEndpoint is one change of an endpoint in one transaction: read the
// row, let the store's rules plan the change, write it, audit it.
func (s *Store) changeEndpoint(ctx context.Context, id string, plan func(cur *store.Endpoint) (*store.EndpointChange, error),
	write func(ctx context.Context, tx *wtx, ep *store.Endpoint) error) (*store.Endpoint, error) {
	var out *store.Endpoint
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		cur, err := getEndpoint(ctx, tx, id)
		if err != nil {
			return fmt.Errorf("read endpoint: %w", err)
		}
		change, err := plan(cur)
		if err != nil {
			return err
		}
		if err := write(ctx, tx, change.Endpoint); err != nil {
			return wrapErr("write endpoint", err)
		}
		for _, a := range change.Audit {
			if _, err := insertAudit(ctx, tx, a); err != nil {
				return err
			}
		}
		out = change.Endpoint
		return nil
	})
	return out, err
}

// EndpointGet returns the endpoint, deleted or not, or nil.
func (s *Store) EndpointGet(ctx context.Context, id string) (*store.Endpoint, error) {
	ep, err := scanEndpoint(s.readQueryRow(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get endpoint %s: %w", id, err)
	}
	return ep, nil
}

// EndpointList returns the endpoints that are not deleted, in id order.
func (s *Store) EndpointList(ctx context.Context) ([]*store.Endpoint, error) {
	rows, err := s.readQuery(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE deleted = 0 ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	defer rows.Close()
	var out []*store.Endpoint
	for rows.Next() {
		ep, err := scanEndpoint(rows)
		if err != nil {
			return nil, fmt.Errorf("list endpoints: %w", err)
		}
		out = append(out, ep)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list endpoints: %w", err)
	}
	return out, nil
}

// EndpointSetState enables, disables or deletes an endpoint, or records
// when it started failing.
func (s *Store) EndpointSetState(ctx context.Context, p *store.EndpointStateParams) (*store.Endpoint, error) {
	out, err := s.changeEndpoint(ctx, p.ID, func(cur *store.Endpoint) (*store.EndpointChange, error) { return store.PlanEndpointState(cur, p) },
		func(ctx context.Context, tx *wtx, ep *store.Endpoint) error {
			_, err := tx.ExecContext(ctx, `UPDATE endpoints SET enabled = ?, disabled_reason = ?, disabled_at = ?,
			failing_since = ?, deleted = ?, updated_at = ? WHERE id = ?`,
				boolInt(ep.Enabled), ep.DisabledReason, micros(ep.DisabledAt), micros(ep.FailingSince), boolInt(ep.Deleted),
				ep.UpdatedAt.UnixMicro(), ep.ID)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("set state of endpoint %s: %w", p.ID, err)
	}
	return out, nil
}

// MessagePublish stores a message and fans it out in one transaction.
func (s *Store) MessagePublish(ctx context.Context, p *store.MessagePublishParams) (*store.MessagePublishResult, error) {
	if err := store.CheckMessagePublish(p); err != nil {
		return nil, fmt.Errorf("publish message: %w", err)
	}
	headers, err := json.Marshal(nonNilMap(p.Headers))
	if err != nil {
		return nil, fmt.Errorf("publish message %s: encode headers: %w", p.ID, err)
	}
	var res *store.MessagePublishResult
	err = s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		var err error
		res, err = publishMessage(ctx, tx, p, string(headers))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("publish message %s: %w", p.ID, err)
	}
	return res, nil
}

func publishMessage(ctx context.Context, tx *wtx, p *store.MessagePublishParams, headers string) (*store.MessagePublishResult, error) {
	now := p.Now.UnixMicro()
	// The key first: it is the gate. An expired row of the key is taken
	// over in place; a live one makes this a replay that writes nothing.
	r, err := tx.ExecContext(ctx, `INSERT INTO idempotency_keys (key, fingerprint, message_id, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, message_id = excluded.message_id,
			created_at = excluded.created_at, expires_at = excluded.expires_at
		WHERE idempotency_keys.expires_at <= excluded.created_at`,
		p.Key, p.Fingerprint, p.ID, now, p.KeyExpiresAt.UnixMicro())
	if err != nil {
		return nil, wrapErr("hold idempotency key", err)
	}
	if n, err := r.RowsAffected(); err != nil {
		return nil, fmt.Errorf("hold idempotency key: %w", err)
	} else if n == 0 {
		res := &store.MessagePublishResult{Replayed: true}
		var created int64
		if err := tx.QueryRowContext(ctx, `SELECT message_id, fingerprint, created_at FROM idempotency_keys WHERE key = ?`, p.Key).
			Scan(&res.ID, &res.Fingerprint, &created); err != nil {
			return nil, fmt.Errorf("read idempotency key: %w", err)
		}
		// The key and its event are written together at one Now, so the
		// key's created_at is the event's received_at.
		res.CreatedAt = time.UnixMicro(created).UTC()
		return res, nil
	}
	// Applied and routed from the start: the flow engine never sees a
	// message as pending or unrouted work.
	var pk int64
	if err := tx.QueryRowContext(ctx, `INSERT INTO events
		(source, event_id, type, entity, account, received_at, causation_id, hop, disposition, routed, deliveries)
		VALUES (?, ?, ?, '', '', ?, ?, ?, 'applied', 1, 1) RETURNING pk`,
		store.PublishSource, p.ID, p.Type, now, p.CausationID, p.Hop).Scan(&pk); err != nil {
		return nil, wrapErr("record message event", err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO deliveries
		(event_pk, request_id, batch_index, source, event_id, type, entity, account, received_at, causation_id, hop, headers, body)
		VALUES (?, ?, 0, ?, ?, ?, '', '', ?, ?, ?, ?, ?)`,
		pk, p.ID, store.PublishSource, p.ID, p.Type, now, p.CausationID, p.Hop, headers, nonNilBytes(p.Payload)); err != nil {
		return nil, wrapErr("record message delivery", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT id, spec FROM endpoints WHERE deleted = 0 ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("read endpoints: %w", err)
	}
	type target struct{ id, spec string }
	var all []target
	for rows.Next() {
		var t target
		if err := rows.Scan(&t.id, &t.spec); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read endpoints: %w", err)
		}
		all = append(all, t)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("read endpoints: %w", err)
	}
	res := &store.MessagePublishResult{ID: p.ID, Fingerprint: p.Fingerprint, CreatedAt: p.Now.UTC(), Endpoints: []string{}}
	request := string(store.PublishRequest(p.ID, p.Payload))
	versionSort := store.PublishVersionSort(p.Now, p.ID)
	for _, t := range all {
		spec, err := store.UnmarshalSpec([]byte(t.spec))
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", t.id, err)
		}
		if !store.MatchType(spec.Types, p.Type) {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
			state, request, source_event_pk, causation_id, hop, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'approved', ?, ?, ?, ?, ?, ?) ON CONFLICT (episode_key) DO NOTHING`,
			store.PublishEpisodeKey(p.ID, t.id), store.PublishFlow, t.id, p.ID, versionSort, store.PublishEffect,
			store.EndpointDestination(t.id), request, pk, p.CausationID, p.Hop, now, now); err != nil {
			return nil, wrapErr("insert effect", err)
		}
		res.Endpoints = append(res.Endpoints, t.id)
	}
	if _, err := insertAudit(ctx, tx, &store.AuditInsertParams{At: p.Now, Actor: p.Actor, Action: store.ActionMessagePublished,
		Source: store.PublishSource, EventID: p.ID, Detail: store.MessagePublishedDetail(p.Type, len(res.Endpoints))}); err != nil {
		return nil, err
	}
	return res, nil
}

// IdempotencyPrune deletes up to limit keys expired at now.
func (s *Store) IdempotencyPrune(ctx context.Context, now time.Time, limit int) (int, error) {
	var n int64
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		r, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE key IN
			(SELECT key FROM idempotency_keys WHERE expires_at <= ? ORDER BY expires_at LIMIT ?)`,
			now.UnixMicro(), store.ClampLimit(limit))
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune idempotency keys: %w", err)
	}
	return int(n), nil
}

// EffectsDueNow brings the destination's waiting retries forward to now.
func (s *Store) EffectsDueNow(ctx context.Context, destination string, now time.Time) (int, error) {
	var n int64
	err := s.inTx(ctx, func(ctx context.Context, tx *wtx) error {
		r, err := tx.ExecContext(ctx, `UPDATE effects SET next_attempt_at = ?
			WHERE destination = ? AND state = 'retry_wait' AND next_attempt_at > ?`, now.UnixMicro(), destination, now.UnixMicro())
		if err != nil {
			return err
		}
		n, err = r.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("make effects of %s due: %w", destination, err)
	}
	return int(n), nil
}
