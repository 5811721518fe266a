package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// The statements of the publishing path (store.PublishTx). Its writes go
// through the shared writer like the pipeline's: the single writer
// serialises them, so two publishes of one idempotency key take turns and
// the second finds the first's key.

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

// EndpointReserve reads the row: the transaction holds the only write
// lock, so nothing needs reserving.
func (a txn) EndpointReserve(ctx context.Context, p *store.EndpointReserveParams) (*store.Endpoint, error) {
	return getEndpoint(ctx, a.tx, p.ID)
}

func (a txn) EndpointRead(ctx context.Context, id string) (*store.Endpoint, error) {
	return getEndpoint(ctx, a.tx, id)
}

func (a txn) EndpointWrite(ctx context.Context, ep *store.Endpoint, spec []byte) error {
	_, err := a.tx.ExecContext(ctx, `INSERT INTO endpoints (`+endpointColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET origin = excluded.origin, spec = excluded.spec, enabled = excluded.enabled,
			disabled_reason = excluded.disabled_reason, disabled_at = excluded.disabled_at,
			failing_since = excluded.failing_since, deleted = excluded.deleted,
			created_at = excluded.created_at, updated_at = excluded.updated_at`,
		ep.ID, ep.Origin, string(spec), boolInt(ep.Enabled), ep.DisabledReason, micros(ep.DisabledAt), micros(ep.FailingSince),
		boolInt(ep.Deleted), ep.CreatedAt.UnixMicro(), ep.UpdatedAt.UnixMicro())
	return dbErrors.Classify(err)
}

func (a txn) EndpointWriteState(ctx context.Context, ep *store.Endpoint) error {
	_, err := a.tx.ExecContext(ctx, `UPDATE endpoints SET enabled = ?, disabled_reason = ?, disabled_at = ?,
		failing_since = ?, deleted = ?, updated_at = ? WHERE id = ?`,
		boolInt(ep.Enabled), ep.DisabledReason, micros(ep.DisabledAt), micros(ep.FailingSince), boolInt(ep.Deleted),
		ep.UpdatedAt.UnixMicro(), ep.ID)
	return dbErrors.Classify(err)
}

// EndpointGet returns the endpoint, deleted or not, or nil.
func (s *Store) EndpointGet(ctx context.Context, id string) (*store.Endpoint, error) {
	ep, err := scanEndpoint(s.readQueryRow(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE id = ?`, id))
	if err != nil {
		return store.NoRow[store.Endpoint](err, sql.ErrNoRows, "get endpoint %s", id)
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

// IdempotencyKeysHold: the single writer serialises two publishes of one
// key, so the second finds the first's; a statement a key costs no round
// trip here.
func (a txn) IdempotencyKeysHold(ctx context.Context, ps []*store.MessagePublishParams) ([]bool, error) {
	return eachMessage(ps, func(p *store.MessagePublishParams) (bool, error) { return a.holdKey(ctx, p) })
}

// eachMessage is fn's answer for each of ps, in order, or the first error.
func eachMessage[T any](ps []*store.MessagePublishParams, fn func(*store.MessagePublishParams) (T, error)) ([]T, error) {
	out := make([]T, len(ps))
	for i, p := range ps {
		var err error
		if out[i], err = fn(p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (a txn) holdKey(ctx context.Context, p *store.MessagePublishParams) (bool, error) {
	r, err := a.tx.ExecContext(ctx, `INSERT INTO idempotency_keys (key, fingerprint, message_id, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, message_id = excluded.message_id,
			created_at = excluded.created_at, expires_at = excluded.expires_at
		WHERE idempotency_keys.expires_at <= excluded.created_at`,
		p.Key, p.Fingerprint, p.ID, p.Now.UnixMicro(), p.KeyExpiresAt.UnixMicro())
	if err != nil {
		return false, dbErrors.Classify(err)
	}
	n, err := r.RowsAffected()
	return n == 1, err
}

func (a txn) IdempotencyKeyGet(ctx context.Context, key string) (*store.MessagePublishResult, error) {
	res := &store.MessagePublishResult{}
	var created int64
	if err := a.tx.QueryRowContext(ctx, `SELECT message_id, fingerprint, created_at FROM idempotency_keys WHERE key = ?`, key).
		Scan(&res.ID, &res.Fingerprint, &created); err != nil {
		return nil, err
	}
	res.CreatedAt = fromUnix(created)
	return res, nil
}

// MessagesInsert stores the messages one by one, two statements each.
func (a txn) MessagesInsert(ctx context.Context, ps []*store.MessagePublishParams) ([]int64, error) {
	return eachMessage(ps, func(p *store.MessagePublishParams) (int64, error) { return a.insertMessage(ctx, p) })
}

func (a txn) insertMessage(ctx context.Context, p *store.MessagePublishParams) (int64, error) {
	headers, err := json.Marshal(nonNilMap(p.Headers))
	if err != nil {
		return 0, fmt.Errorf("encode headers: %w", err)
	}
	now := p.Now.UnixMicro()
	var pk int64
	if err := a.tx.QueryRowContext(ctx, `INSERT INTO events
		(source, event_id, type, entity, account, received_at, causation_id, hop, disposition, routed, deliveries, trace_context)
		VALUES (?, ?, ?, '', '', ?, ?, ?, 'applied', 1, 1, ?) RETURNING pk`,
		store.PublishSource, p.ID, p.Type, now, p.CausationID, p.Hop, p.TraceContext).Scan(&pk); err != nil {
		return 0, dbErrors.Wrap("event", err)
	}
	if _, err := a.tx.ExecContext(ctx, `INSERT INTO deliveries
		(event_pk, request_id, batch_index, source, event_id, type, entity, account, received_at, causation_id, hop, headers, body)
		VALUES (?, ?, 0, ?, ?, ?, '', '', ?, ?, ?, ?, ?)`,
		pk, p.ID, store.PublishSource, p.ID, p.Type, now, p.CausationID, p.Hop, string(headers), nonNilBytes(p.Payload)); err != nil {
		return 0, dbErrors.Wrap("delivery", err)
	}
	return pk, nil
}

func (a txn) EndpointSpecs(ctx context.Context) ([]store.EndpointSpecRow, error) {
	var out []store.EndpointSpecRow
	err := a.each(ctx, `SELECT id, spec FROM endpoints WHERE deleted = 0 ORDER BY id`, nil, func(sc scanner) error {
		var r store.EndpointSpecRow
		var spec string
		err := sc.Scan(&r.ID, &spec)
		r.Spec = []byte(spec)
		out = append(out, r)
		return err
	})
	return out, err
}

// effectsPerInsert bounds the rows of one multi-row INSERT: 3 parameters
// a row stay far below SQLite's limit, and a fan-out of any size reuses
// at most two prepared statements (a full one and the rest).
const effectsPerInsert = 64

// MessageEffectsInsert writes each message's effects a statement per up
// to effectsPerInsert of them. What they share (the request, the same for
// every endpoint, and the message's fields) is bound once as numbered
// parameters; each row binds only its episode key, entity and
// destination.
//
// With a claim, the destinations where something is due already are found
// first, one indexed probe each; each message's effects the claim takes
// are then inserted submitting by a statement of their own, the others
// approved.
func (a txn) MessageEffectsInsert(ctx context.Context, ms [][]*store.MessageEffect, claim *store.MessageEffectsClaim) error {
	room, err := a.claimRoom(ctx, claim)
	if err != nil {
		return err
	}
	at := 0 // each effect's index over the call, for its token
	for _, es := range ms {
		var taken, left []*store.MessageEffect
		var tokens []string
		for _, e := range es {
			if room[e.Destination] > 0 {
				room[e.Destination]--
				taken, tokens = append(taken, e), append(tokens, claim.Tokens[at])
			} else {
				left = append(left, e)
			}
			at++
		}
		if len(taken) > 0 {
			if err := a.insertClaimed(ctx, taken, tokens, claim); err != nil {
				return err
			}
		}
		for len(left) > 0 {
			n := min(len(left), effectsPerInsert)
			if err := a.insertEffects(ctx, left[:n]); err != nil {
				return err
			}
			left = left[n:]
		}
	}
	return nil
}

// claimRoom is how many new effects the claim may take at each of its
// destinations: its limit where nothing is due, none elsewhere.
func (a txn) claimRoom(ctx context.Context, claim *store.MessageEffectsClaim) (map[string]int, error) {
	room := map[string]int{}
	if claim == nil {
		return room, nil
	}
	where, args := effectDueSQL(claim.Now.UnixMicro(), claim.MaxRedrives)
	q := `SELECT EXISTS (SELECT 1 FROM effects f WHERE ` + where + ` AND f.destination = ?)`
	for i, d := range claim.Destinations {
		var due bool
		if err := a.tx.QueryRowContext(ctx, q, append(args, d)...).Scan(&due); err != nil {
			return nil, fmt.Errorf("find effects due at %s: %w", d, dbErrors.Classify(err))
		}
		if !due {
			room[d] = claim.Limits[i]
		}
	}
	return room, nil
}

// sharedEffectArgs are the arguments ?1 to ?9 of a message's effects'
// insert: what they share.
func sharedEffectArgs(e *store.MessageEffect) []any {
	return []any{e.Flow, e.Version, e.VersionSort, e.Effect, string(e.Request), e.EventPK, e.CausationID, e.Hop, e.Now.UnixMicro()}
}

func (a txn) insertEffects(ctx context.Context, es []*store.MessageEffect) error {
	args := sharedEffectArgs(es[0])
	var q strings.Builder
	q.WriteString(`INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at) VALUES `)
	for i, r := range es {
		if i > 0 {
			q.WriteString(", ")
		}
		k := len(args)
		fmt.Fprintf(&q, "(?%d, ?1, ?%d, ?2, ?3, ?4, ?%d, 'approved', ?5, ?6, ?7, ?8, ?9, ?9)", k+1, k+2, k+3)
		args = append(args, r.EpisodeKey, r.Entity, r.Destination)
	}
	q.WriteString(` ON CONFLICT (episode_key) DO NOTHING`)
	_, err := a.tx.ExecContext(ctx, q.String(), args...)
	return dbErrors.Classify(err)
}

// insertClaimed inserts one message's effects es submitting, leased as
// claim says under tokens, and adds each it inserted to claim.Rows. A
// message has one effect per endpoint, far fewer than SQLite's parameter
// limit allows in one statement.
func (a txn) insertClaimed(ctx context.Context, es []*store.MessageEffect, tokens []string, claim *store.MessageEffectsClaim) error {
	args := append(sharedEffectArgs(es[0]), claim.Now.UnixMicro(), claim.Until.UnixMicro())
	var q strings.Builder
	q.WriteString(`INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at,
		lease_token, lease_until, next_attempt_at, claimed_at) VALUES `)
	for i, r := range es {
		if i > 0 {
			q.WriteString(", ")
		}
		k := len(args)
		fmt.Fprintf(&q, "(?%d, ?1, ?%d, ?2, ?3, ?4, ?%d, 'submitting', ?5, ?6, ?7, ?8, ?9, ?10, ?%d, ?11, ?11, ?10)", k+1, k+2, k+3, k+4)
		args = append(args, r.EpisodeKey, r.Entity, r.Destination, tokens[i])
	}
	q.WriteString(` ON CONFLICT (episode_key) DO NOTHING RETURNING id, episode_key`)
	return dbErrors.Classify(a.each(ctx, q.String(), args, func(sc scanner) error {
		r := store.InsertedMessageEffect{Claimed: true, Request: es[0].Request}
		if err := sc.Scan(&r.ID, &r.EpisodeKey); err != nil {
			return err
		}
		claim.Rows = append(claim.Rows, r)
		return nil
	}))
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
