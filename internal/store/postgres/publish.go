package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hookledger/hookledger/internal/store"
)

// The statements of the publishing path (store.PublishTx). Each call is
// one plain transaction at READ COMMITTED (store.TxWrite): publishing is
// rare next to ingest, so its statements are planned for their
// arguments.

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

// lockEndpoint reads the endpoint, or nil, and takes its row lock so that
// concurrent changes of one endpoint take turns.
func (a txn) lockEndpoint(ctx context.Context, id string) (*store.Endpoint, error) {
	sql := `SELECT ` + endpointColumns + ` FROM endpoints WHERE id = $1 FOR UPDATE`
	var ep *store.Endpoint
	err := a.t.query(ctx, "read endpoint", sql, []any{id}, func(rows pgx.Rows) error {
		if !rows.Next() {
			return nil
		}
		var err error
		ep, err = scanEndpoint(rows)
		return err
	})
	return ep, err
}

// EndpointReserve: two first puts of one id at once: the loser's insert
// waits for the winner and then inserts nothing, and the row it then
// locks is the winner's, replaced as any existing endpoint is. The
// reserved row is written in full by EndpointWrite.
func (a txn) EndpointReserve(ctx context.Context, p *store.EndpointReserveParams) (*store.Endpoint, error) {
	inserted := false
	err := a.t.query(ctx, "reserve endpoint", `INSERT INTO endpoints (id, origin, spec, enabled, created_at, updated_at)
		VALUES ($1, $2, $3::jsonb, false, $4, $4) ON CONFLICT (id) DO NOTHING RETURNING true`,
		[]any{p.ID, p.Origin, string(p.Spec), p.Now}, func(rows pgx.Rows) error {
			inserted = rows.Next()
			return nil
		})
	if err != nil || inserted {
		return nil, dbErrors.Classify(err)
	}
	return a.lockEndpoint(ctx, p.ID)
}

func (a txn) EndpointRead(ctx context.Context, id string) (*store.Endpoint, error) {
	return a.lockEndpoint(ctx, id)
}

// EndpointWrite updates the row: EndpointReserve left one, the
// placeholder or the row it locked.
func (a txn) EndpointWrite(ctx context.Context, ep *store.Endpoint, spec []byte) error {
	return dbErrors.Classify(a.t.query(ctx, "write endpoint", `UPDATE endpoints SET origin = $2, spec = $3::jsonb, enabled = $4, disabled_reason = $5,
		disabled_at = $6, failing_since = $7, deleted = $8, created_at = $9, updated_at = $10 WHERE id = $1`,
		[]any{ep.ID, ep.Origin, string(spec), ep.Enabled, ep.DisabledReason, nullTime(ep.DisabledAt), nullTime(ep.FailingSince),
			ep.Deleted, ep.CreatedAt, ep.UpdatedAt}, nil))
}

func (a txn) EndpointWriteState(ctx context.Context, ep *store.Endpoint) error {
	return dbErrors.Classify(a.t.query(ctx, "write endpoint", `UPDATE endpoints SET enabled = $2, disabled_reason = $3, disabled_at = $4,
		failing_since = $5, deleted = $6, updated_at = $7 WHERE id = $1`,
		[]any{ep.ID, ep.Enabled, ep.DisabledReason, nullTime(ep.DisabledAt), nullTime(ep.FailingSince), ep.Deleted, ep.UpdatedAt}, nil))
}

// EndpointGet returns the endpoint, deleted or not, or nil.
func (s *Store) EndpointGet(ctx context.Context, id string) (*store.Endpoint, error) {
	ep, err := scanEndpoint(s.pool.QueryRow(ctx, `SELECT `+endpointColumns+` FROM endpoints WHERE id = $1`, id))
	if err != nil {
		return store.NoRow[store.Endpoint](err, pgx.ErrNoRows, "get endpoint %s", id)
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

// IdempotencyKeysHold writes a group's keys in one statement. A
// concurrent publish of the same new key blocks on the key's uncommitted
// row, and once the first transaction commits its insert does nothing and
// it reads the first message back (READ COMMITTED takes a new snapshot per
// statement), ending as a replay instead of a second message or an error.
// The keys go in in key order: two groups holding some of the same keys
// in different orders would otherwise each wait for the other's.
func (a txn) IdempotencyKeysHold(ctx context.Context, ps []*store.MessagePublishParams) ([]bool, error) {
	n := len(ps)
	keys, fps, ids := make([]string, n), make([]string, n), make([]string, n)
	created, expires := make([]time.Time, n), make([]time.Time, n)
	for i, p := range ps {
		keys[i], fps[i], ids[i], created[i], expires[i] = p.Key, p.Fingerprint, p.ID, p.Now, p.KeyExpiresAt
	}
	got := make(map[string]bool, n)
	err := a.t.query(ctx, "hold keys", holdKeysSQL, []any{keys, fps, ids, created, expires}, func(rows pgx.Rows) error {
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			got[k] = true
		}
		return nil
	})
	if err != nil {
		return nil, dbErrors.Classify(err)
	}
	held := make([]bool, n)
	for i, k := range keys {
		held[i] = got[k]
	}
	return held, nil
}

// holdKeysSQL inserts the keys $1 with their fingerprints $2, message ids
// $3, creation $4 and expiry $5, taking over an expired row in place, and
// returns the keys it holds.
const holdKeysSQL = `INSERT INTO idempotency_keys (key, fingerprint, message_id, created_at, expires_at)
	SELECT key, fingerprint, message_id, created_at, expires_at
	FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[], $5::timestamptz[])
		AS u(key, fingerprint, message_id, created_at, expires_at)
	ORDER BY key
	ON CONFLICT (key) DO UPDATE SET fingerprint = excluded.fingerprint, message_id = excluded.message_id,
		created_at = excluded.created_at, expires_at = excluded.expires_at
	WHERE idempotency_keys.expires_at <= excluded.created_at
	RETURNING key`

func (a txn) IdempotencyKeyGet(ctx context.Context, key string) (*store.MessagePublishResult, error) {
	var res *store.MessagePublishResult
	err := a.t.query(ctx, "read key", `SELECT message_id, fingerprint, created_at FROM idempotency_keys WHERE key = $1`,
		[]any{key}, func(rows pgx.Rows) error {
			if !rows.Next() {
				return pgx.ErrNoRows
			}
			res = &store.MessagePublishResult{}
			return rows.Scan(&res.ID, &res.Fingerprint, &res.CreatedAt)
		})
	return res, err
}

// MessagesInsert stores a group's events and their deliveries in one
// statement: each delivery finds its event by the message id, which the
// events' unique key makes one row.
func (a txn) MessagesInsert(ctx context.Context, ps []*store.MessagePublishParams) ([]int64, error) {
	n := len(ps)
	ids, types, causes, traces, hdrs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	at, hops, bodies := make([]time.Time, n), make([]int32, n), make([][]byte, n)
	for i, p := range ps {
		hdr, body, err := deliveryJSON(p.Headers, p.Payload)
		if err != nil {
			return nil, fmt.Errorf("message %s: %w", p.ID, err)
		}
		ids[i], types[i], causes[i], traces[i], hdrs[i] = p.ID, p.Type, p.CausationID, p.TraceContext, hdr
		at[i], hops[i], bodies[i] = p.Now, int32(p.Hop), body //nolint:gosec // hop counts are bounded by the loop guard
	}
	pks := make(map[string]int64, n)
	err := a.t.query(ctx, "messages", insertMessagesSQL, []any{store.PublishSource, ids, types, at, causes, hops, traces, hdrs, bodies},
		func(rows pgx.Rows) error {
			for rows.Next() {
				var id string
				var pk int64
				if err := rows.Scan(&id, &pk); err != nil {
					return err
				}
				pks[id] = pk
			}
			return nil
		})
	if err != nil {
		return nil, dbErrors.Classify(err)
	}
	out := make([]int64, n)
	for i, id := range ids {
		if out[i] = pks[id]; out[i] == 0 {
			return nil, fmt.Errorf("message %s: no pk returned", id)
		}
	}
	return out, nil
}

// insertMessagesSQL stores messages as events of source $1 (ids $2, types
// $3, received at $4, causations $5, hops $6, trace contexts $7) and one
// delivery each (headers $8, bodies $9), and returns each id's event pk.
// RETURNING promises no order, so the pks come back by id.
const insertMessagesSQL = `WITH m AS (SELECT * FROM unnest($2::text[], $3::text[], $4::timestamptz[], $5::text[], $6::int[], $7::text[],
		$8::jsonb[], $9::bytea[]) WITH ORDINALITY AS m(id, type, at, causation_id, hop, trace_context, headers, body, n)),
	e AS (INSERT INTO events (source, event_id, type, entity, account, received_at, causation_id, hop, disposition, routed, deliveries, trace_context)
		SELECT $1::text, id, type, '', '', at, causation_id, hop, 'applied', true, 1, trace_context FROM m ORDER BY n
		RETURNING event_id, pk),
	d AS (INSERT INTO deliveries (event_pk, request_id, batch_index, source, event_id, type, entity, account, received_at, causation_id, hop, headers, body)
		SELECT e.pk, m.id, 0, $1, m.id, m.type, '', '', m.at, m.causation_id, m.hop, m.headers, m.body
		FROM m JOIN e ON e.event_id = m.id ORDER BY m.n)
	SELECT event_id, pk FROM e`

func (a txn) EndpointSpecs(ctx context.Context) ([]store.EndpointSpecRow, error) {
	var out []store.EndpointSpecRow
	err := a.t.query(ctx, "read endpoints", endpointSpecsSQL, nil, scanEndpointSpecs(&out))
	return out, dbErrors.Classify(err)
}

// EndpointSpecsAhead queues EndpointSpecs' read to go with the next
// statement that answers (store.EndpointSpecsAhead): a group of publishes
// reads the endpoints with its keys' hold.
func (a txn) EndpointSpecsAhead(rows *[]store.EndpointSpecRow) {
	a.t.later("read endpoints", endpointSpecsSQL, nil, scanEndpointSpecs(rows))
}

// endpointSpecsSQL reads every endpoint's stored spec (EndpointSpecs).
const endpointSpecsSQL = `SELECT id, spec FROM endpoints WHERE NOT deleted ORDER BY id`

// scanEndpointSpecs appends endpointSpecsSQL's rows to *out.
func scanEndpointSpecs(out *[]store.EndpointSpecRow) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var r store.EndpointSpecRow
			if err := rows.Scan(&r.ID, &r.Spec); err != nil {
				return err
			}
			*out = append(*out, r)
		}
		return nil
	}
}

// MessageEffectsInsert queues one INSERT for a group's effects: what a
// message's effects share (the request, the same for every endpoint,
// parsed as jsonb once, and the message's fields) is sent once a message,
// the episode keys, entities and destinations as arrays, each with the
// index of its message.
func (a txn) MessageEffectsInsert(_ context.Context, ms [][]*store.MessageEffect, claim *store.MessageEffectsClaim) error {
	var keys, entities, dests []string
	var of []int32
	n := len(ms)
	flows, versions, sorts, effects, requests, causes := make([]string, n), make([]string, n), make([]string, n),
		make([]string, n), make([]string, n), make([]string, n)
	pks, hops, at := make([]int64, n), make([]int32, n), make([]time.Time, n)
	for i, es := range ms {
		for _, e := range es {
			keys, entities, dests, of = append(keys, e.EpisodeKey), append(entities, e.Entity), append(dests, e.Destination),
				append(of, int32(i+1)) //nolint:gosec // a group holds at most a few dozen messages
		}
		e := es[0]
		flows[i], versions[i], sorts[i], effects[i], requests[i], causes[i] = e.Flow, e.Version, e.VersionSort, e.Effect, string(e.Request), e.CausationID
		pks[i], hops[i], at[i] = e.EventPK, int32(e.Hop), e.Now //nolint:gosec // hop counts are bounded by the loop guard
	}
	if len(keys) == 0 {
		return nil
	}
	if claim == nil {
		a.t.exec("insert effects", insertMessageEffectsSQL, keys, entities, dests, of, flows, versions, sorts, effects, requests, pks, causes, hops, at)
		return nil
	}
	limits := make([]int32, len(claim.Limits))
	for i, l := range claim.Limits {
		limits[i] = int32(l) //nolint:gosec // a claim's limit is a worker's room
	}
	a.t.later("insert claimed effects", insertClaimedMessageEffectsSQL,
		[]any{keys, entities, dests, of, flows, versions, sorts, effects, requests, pks, causes, hops, at,
			claim.Destinations, limits, claim.Tokens, claim.Now, claim.Until, claim.MaxRedrives},
		func(rows pgx.Rows) error {
			for rows.Next() {
				var r store.InsertedMessageEffect
				var request *string
				if err := rows.Scan(&r.ID, &r.EpisodeKey, &r.Claimed, &request); err != nil {
					return err
				}
				if request != nil {
					r.Request = []byte(*request)
				}
				claim.Rows = append(claim.Rows, r)
			}
			return rows.Err()
		})
	return nil
}

// messagesCTE is m, the messages of an insert of their effects: flows $5,
// versions $6, version sorts $7, effect names $8, requests $9, events
// $10, causations $11, hops $12, created at $13, each numbered i from 1.
// It is materialized so that each request is parsed once, not once an
// effect.
const messagesCTE = `m AS MATERIALIZED (
		SELECT i, flow, version, version_sort, effect, request::jsonb AS request, event_pk, causation_id, hop, at
		FROM unnest($5::text[], $6::text[], $7::text[], $8::text[], $9::text[], $10::bigint[], $11::text[], $12::int[], $13::timestamptz[])
			WITH ORDINALITY AS m(flow, version, version_sort, effect, request, event_pk, causation_id, hop, at, i))`

// insertMessageEffectsSQL inserts effects (episode keys $1, entities $2,
// destinations $3, each of message $4, counted from 1) of the messages m
// (messagesCTE).
const insertMessageEffectsSQL = `WITH ` + messagesCTE + `
	INSERT INTO effects (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at)
	SELECT u.k, m.flow, u.e, m.version, m.version_sort, m.effect, u.d, 'approved', m.request, m.event_pk, m.causation_id, m.hop, m.at, m.at
	FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) WITH ORDINALITY AS u(k, e, d, of, n)
		JOIN m ON m.i = u.of
	ORDER BY u.n
	ON CONFLICT (episode_key) DO NOTHING`

// insertClaimedMessageEffectsSQL is insertMessageEffectsSQL claiming, at
// each destination $14 where no effect is due at $17 (re-drives below
// $19), the first $15 of the new effects there (store.MessageEffectsClaim):
// submitting under the token $16 gives at the effect's place among $1,
// leased until $18. It returns every effect inserted: its id, episode
// key, whether it was claimed, and a claimed one's request as stored.
var insertClaimedMessageEffectsSQL = `WITH ` + messagesCTE + `,
	c AS MATERIALIZED (
		SELECT c.d, c.lim FROM unnest($14::text[], $15::int[]) AS c(d, lim)
		WHERE ` + firstClaimableSQL("c.d", "$17::timestamptz", "$19::int") + ` IS NULL),
	u AS (
		SELECT u.k, u.e, u.d, u.of, u.n, row_number() OVER (PARTITION BY u.d ORDER BY u.n) AS r
		FROM unnest($1::text[], $2::text[], $3::text[], $4::int[]) WITH ORDINALITY AS u(k, e, d, of, n))
	INSERT INTO effects AS f (episode_key, flow, entity, version, version_sort, effect, destination,
		state, request, source_event_pk, causation_id, hop, created_at, updated_at,
		lease_token, lease_until, next_attempt_at, claimed_at)
	SELECT u.k, m.flow, u.e, m.version, m.version_sort, m.effect, u.d,
		CASE WHEN u.r <= c.lim THEN 'submitting' ELSE 'approved' END, m.request, m.event_pk, m.causation_id, m.hop, m.at,
		CASE WHEN u.r <= c.lim THEN $17::timestamptz ELSE m.at END,
		CASE WHEN u.r <= c.lim THEN ($16::text[])[u.n] ELSE '' END,
		CASE WHEN u.r <= c.lim THEN $18::timestamptz ELSE '-infinity' END,
		CASE WHEN u.r <= c.lim THEN $18::timestamptz ELSE '-infinity' END,
		CASE WHEN u.r <= c.lim THEN $17::timestamptz ELSE '-infinity' END
	FROM u JOIN m ON u.of = m.i
		LEFT JOIN c ON c.d = u.d
	ORDER BY u.n
	ON CONFLICT (episode_key) DO NOTHING
	RETURNING f.id, f.episode_key, f.state = 'submitting', CASE WHEN f.state = 'submitting' THEN f.request::text END`

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
