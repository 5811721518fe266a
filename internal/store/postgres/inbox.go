package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookledger/hookledger/internal/store"
)

// InboxCommit writes every submission in one transaction. The common case
// is pipelined whole and costs the database one statement per table,
// whatever the group's size: BEGIN, the events' upsert and the deliveries'
// ids in one round trip; the deliveries, the audit rows and COMMIT in the
// second. A statement costs PostgreSQL more to start (bind, executor set-up,
// constraint and trigger preparation) than a 2 KB row costs to insert, so a
// group of thirty submissions written row by row spent most of the
// database's processor time on set-up (docs/architecture.md, "Storage").
// A statement that fails (a submission the database refuses) sends the
// group again the careful way, each submission under its own savepoint, so
// that one bad submission fails alone.
func (s *Store) InboxCommit(ctx context.Context, p *store.InboxCommitParams) ([]store.SubmissionResult, error) {
	results, err := s.inboxPipelined(ctx, p)
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return results, nil
	case errors.As(err, &pgErr):
		s.inboxCareful.Add(1)
		return s.inboxSavepoints(ctx, p)
	}
	return nil, s.unavailable("inbox commit", err)
}

// upsertEventsSQL records each distinct event of a group once, counting
// all its deliveries in the group: one statement may not update a row
// twice. A new event takes the first delivery's fields, as it would
// delivery by delivery. A new event that needs routing ($11) is queued
// for the router in the same statement (0015_route_queue); it is new when
// its deliveries are the group's alone.
const upsertEventsSQL = `WITH up AS (INSERT INTO events
	(source, event_id, type, entity, account, occurred_at, received_at, causation_id, hop, disposition, routed, deliveries, trace_context)
	SELECT source, event_id, type, entity, account, occurred_at, received_at, causation_id, hop, disposition, true, deliveries, trace_context
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::timestamptz[], $7::timestamptz[],
		$8::text[], $9::int[], $10::text[], $12::int[], $13::text[]) WITH ORDINALITY
		AS e(source, event_id, type, entity, account, occurred_at, received_at, causation_id, hop, disposition, deliveries, trace_context, n)
	ORDER BY n
	ON CONFLICT (source, event_id) DO UPDATE SET deliveries = events.deliveries + excluded.deliveries
	RETURNING source, event_id, pk, deliveries),
	q AS (INSERT INTO route_queue (pk) SELECT up.pk
		FROM up JOIN unnest($1::text[], $2::text[], $11::bool[], $12::int[]) AS g(source, event_id, route, deliveries)
			ON g.source = up.source AND g.event_id = up.event_id
		WHERE g.route AND up.deliveries = g.deliveries)
	SELECT source, event_id, pk, deliveries FROM up`

// deliveryIDsSQL draws the group's delivery ids ahead of their insert, so
// that each delivery knows its id without relying on the order of a
// RETURNING clause, which SQL does not promise.
const deliveryIDsSQL = `SELECT nextval('deliveries_id_seq'::regclass) FROM generate_series(1, $1::int)`

const insertDeliveriesSQL = `INSERT INTO deliveries
	(id, event_pk, request_id, batch_index, source, event_id, type, entity, account, occurred_at, received_at, causation_id, hop, headers, body)
	OVERRIDING SYSTEM VALUE
	SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[], $5::text[], $6::text[], $7::text[], $8::text[],
		$9::text[], $10::timestamptz[], $11::timestamptz[], $12::text[], $13::int[], $14::jsonb[], $15::bytea[])`

// eventKey names an event within a group.
type eventKey struct{ source, eventID string }

// inboxPipelined is InboxCommit's fast path: any error rolls it back.
func (s *Store) inboxPipelined(ctx context.Context, p *store.InboxCommitParams) ([]store.SubmissionResult, error) {
	var dels []*store.DeliveryInput
	for _, sub := range p.Submissions {
		dels = append(dels, sub.Deliveries...)
	}
	// first[k] is the group's first delivery of event k, counts[k] how
	// many deliveries of it the group carries.
	first := make(map[eventKey]int, len(dels))
	counts := make(map[eventKey]int32, len(dels))
	var order []int
	for i, d := range dels {
		k := eventKey{d.Source, d.EventID}
		if _, ok := first[k]; !ok {
			first[k] = i
			order = append(order, i)
		}
		counts[k]++
	}
	ev := &eventParams{}
	for _, i := range order {
		d := dels[i]
		ev.add(d, counts[eventKey{d.Source, d.EventID}])
	}

	t, err := s.beginPipe(ctx, pipePlanSQL)
	if err != nil {
		return nil, err
	}
	type stored struct {
		pk    int64
		total int32
	}
	got := make(map[eventKey]stored, len(order))
	t.later("record events", upsertEventsSQL, ev.args(), func(rows pgx.Rows) error {
		for rows.Next() {
			var k eventKey
			var st stored
			if err := rows.Scan(&k.source, &k.eventID, &st.pk, &st.total); err != nil {
				return err
			}
			got[k] = st
		}
		return nil
	})
	ids := make([]int64, 0, len(dels))
	t.later("draw delivery ids", deliveryIDsSQL, []any{len(dels)}, func(rows pgx.Rows) error {
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	if err := t.flush(ctx); err != nil {
		t.rollback()
		return nil, err
	}
	if len(got) != len(order) || len(ids) != len(dels) {
		t.rollback()
		return nil, fmt.Errorf("inbox commit: %d of %d events and %d of %d delivery ids came back", len(got), len(order), len(ids), len(dels))
	}
	slices.Sort(ids) // ids in the group's order, as the deliveries arrived

	items := make([]store.DeliveryOutcome, len(dels))
	dc := &deliveryParams{}
	for i, d := range dels {
		k := eventKey{d.Source, d.EventID}
		st := got[k]
		// The group's first delivery of an event is a duplicate only if
		// the event existed before the group; the later ones always are.
		items[i] = store.DeliveryOutcome{DeliveryID: ids[i], EventPK: st.pk, Duplicate: first[k] != i || st.total > counts[k]}
		if err := dc.add(ids[i], st.pk, d); err != nil {
			t.rollback()
			return nil, err
		}
	}
	t.exec("record deliveries", insertDeliveriesSQL, dc.args()...)
	results := make([]store.SubmissionResult, len(p.Submissions))
	k := 0
	for i, sub := range p.Submissions {
		results[i].Items = items[k : k+len(sub.Deliveries)]
		for _, a := range submissionAudits(sub, results[i].Items) {
			t.audit(a)
		}
		k += len(sub.Deliveries)
	}
	if err := t.commit(ctx); err != nil {
		return nil, err
	}
	return results, nil
}

// eventFields are the columns an event and its deliveries both carry,
// one array per column.
type eventFields struct {
	source, eventID, typ, entity, account, causation []string
	occurred                                         []pgtype.Timestamptz
	received                                         []time.Time
	hop                                              []int32
}

func (c *eventFields) add(d *store.DeliveryInput) {
	c.source = append(c.source, d.Source)
	c.eventID = append(c.eventID, d.EventID)
	c.typ = append(c.typ, d.Type)
	c.entity = append(c.entity, d.Entity)
	c.account = append(c.account, d.Account)
	c.occurred = append(c.occurred, pgtype.Timestamptz{Time: d.OccurredAt, Valid: !d.OccurredAt.IsZero()})
	c.received = append(c.received, d.ReceivedAt)
	c.causation = append(c.causation, d.CausationID)
	c.hop = append(c.hop, int32(d.Hop)) //nolint:gosec // hop counts are bounded by the loop guard
}

// eventParams are the events' upsert parameters.
type eventParams struct {
	eventFields
	disposition []string
	deliveries  []int32
	route       []bool
	trace       []string
}

func (c *eventParams) add(d *store.DeliveryInput, deliveries int32) {
	disposition := store.DispositionAccepted
	if d.Unrouted {
		disposition = store.DispositionUnrouted
	}
	c.eventFields.add(d)
	c.disposition = append(c.disposition, string(disposition))
	// An event unrouted at receipt needs no routing.
	c.route = append(c.route, !d.Unrouted)
	c.deliveries = append(c.deliveries, deliveries)
	c.trace = append(c.trace, d.TraceContext)
}

func (c *eventParams) args() []any {
	return []any{c.source, c.eventID, c.typ, c.entity, c.account, c.occurred, c.received,
		c.causation, c.hop, c.disposition, c.route, c.deliveries, c.trace}
}

// deliveryParams are the deliveries' insert parameters.
type deliveryParams struct {
	eventFields
	id, eventPK    []int64
	requestID, hdr []string
	batchIndex     []int32
	body           [][]byte
}

// deliveryJSON is a delivery's headers as a JSON object and its body, as
// the deliveries table keeps them: never NULL, absent headers an empty
// object and an absent body empty bytes.
func deliveryJSON(headers map[string]string, body []byte) (string, []byte, error) {
	h, b := storedRequest(headers, body)
	hdr, err := json.Marshal(h)
	if err != nil {
		return "", nil, fmt.Errorf("headers: %w", err)
	}
	return string(hdr), b, nil
}

// storedRequest is headers and body with an absent one made empty.
func storedRequest(headers map[string]string, body []byte) (map[string]string, []byte) {
	if headers == nil {
		headers = map[string]string{}
	}
	if body == nil {
		body = []byte{}
	}
	return headers, body
}

func (c *deliveryParams) add(id, eventPK int64, d *store.DeliveryInput) error {
	hdr, body, err := deliveryJSON(d.Headers, d.Body)
	if err != nil {
		return fmt.Errorf("record delivery: %w", err)
	}
	c.eventFields.add(d)
	c.id = append(c.id, id)
	c.eventPK = append(c.eventPK, eventPK)
	c.requestID = append(c.requestID, d.RequestID)
	c.batchIndex = append(c.batchIndex, int32(d.BatchIndex)) //nolint:gosec // bounded by the sender's batch limit
	c.hdr = append(c.hdr, hdr)
	c.body = append(c.body, body)
	return nil
}

func (c *deliveryParams) args() []any {
	return []any{c.id, c.eventPK, c.requestID, c.batchIndex, c.source, c.eventID, c.typ, c.entity, c.account,
		c.occurred, c.received, c.causation, c.hop, c.hdr, c.body}
}
