package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/hookledger/hookledger/internal/store"
)

// InboxCommit writes every submission in one transaction. The common case
// is pipelined whole and costs the database one statement, whatever the
// group's size (inboxGroupSQL): BEGIN, the statement and COMMIT go in one
// round trip. The statement writes the audit row of each new event
// received unrouted itself (inboxUnroutedAuditCTE); only a group whose
// submissions carry audit rows of their own sends them with COMMIT in a
// second round trip, once the statement has answered which deliveries are
// duplicates. A statement costs PostgreSQL more to start (bind, executor
// set-up, constraint and trigger preparation) than a 2 KB row costs to
// insert, so a group of thirty submissions written row by row spent most
// of the database's processor time on set-up (docs/architecture.md,
// "Storage").
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

// inboxGroupSQL stores a group in one statement. It records each
// distinct event of the group once, counting all its deliveries in the
// group: one statement may not update a row twice. A new event takes the
// first delivery's fields, as it would delivery by delivery. A new event
// that needs routing ($11) is queued for the router (0015_route_queue);
// it is new when its deliveries are the group's alone. The deliveries
// ($15 on, deliveryParams.args) are inserted each joined to its event's
// row in up. The group's $14 delivery ids are drawn in the statement and
// handed out in the order the deliveries arrived, so that no id depends
// on the order of a RETURNING clause, which SQL does not promise; each
// row answers the ids inserted.
const inboxGroupSQL = inboxGroupWith + inboxGroupAnswer

// inboxGroupUnroutedSQL is inboxGroupSQL writing, besides, the audit row
// of each new event received unrouted (inboxUnroutedAuditCTE).
var inboxGroupUnroutedSQL = inboxGroupWith + inboxUnroutedAuditCTE + inboxGroupAnswer

// inboxGroupWith is inboxGroupSQL's writes.
const inboxGroupWith = `WITH up AS (INSERT INTO events
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
		WHERE g.route AND up.deliveries = g.deliveries),
	ids AS MATERIALIZED (SELECT nextval('deliveries_id_seq'::regclass) AS id FROM generate_series(1, $14::int)),
	nid AS (SELECT id, row_number() OVER (ORDER BY id) AS n FROM ids),
	d AS (INSERT INTO deliveries
		(id, event_pk, request_id, batch_index, source, event_id, type, entity, account, occurred_at, received_at, causation_id, hop, headers, body)
		OVERRIDING SYSTEM VALUE
		SELECT nid.id, up.pk, x.request_id, x.batch_index, x.source, x.event_id, x.type, x.entity, x.account, x.occurred_at,
			x.received_at, x.causation_id, x.hop, x.headers, x.body
		FROM unnest($15::text[], $16::int[], $17::text[], $18::text[], $19::text[], $20::text[], $21::text[],
			$22::timestamptz[], $23::timestamptz[], $24::text[], $25::int[], $26::jsonb[], $27::bytea[]) WITH ORDINALITY
			AS x(request_id, batch_index, source, event_id, type, entity, account, occurred_at, received_at, causation_id, hop, headers, body, n)
		JOIN nid ON nid.n = x.n
		JOIN up ON up.source = x.source AND up.event_id = x.event_id
		RETURNING id)`

// inboxGroupAnswer is inboxGroupSQL's answer: each event with its pk and
// its deliveries in all, and the ids of the deliveries inserted.
const inboxGroupAnswer = `
	SELECT source, event_id, pk, deliveries, (SELECT array_agg(id ORDER BY id) FROM d) FROM up`

// inboxUnroutedAuditCTE writes the audit row of each new event received
// unrouted (store.UnroutedAudit): $28 on are each event's row
// (auditArrays), its action empty where none is due. Whether the event
// is new is the statement's own answer (its deliveries are the group's
// alone, as for the route queue), so the group need not wait for that
// answer before COMMIT: a round trip and a wake-up of the database less
// for every group that stores such an event (docs/benchmarks-history.md,
// "Run AK"). The rows go in the order the events were first seen, the
// order the deliveries would write them in.
var inboxUnroutedAuditCTE = `,
	a AS (INSERT INTO audit (` + auditInsertColumns + `)
		SELECT ` + auditInsertColumns + `
		FROM unnest($12::int[], ` + auditArrays.params(28) + `) WITH ORDINALITY AS r(deliveries, ` + auditInsertColumns + `, n)
		WHERE r.action <> '' AND EXISTS (SELECT FROM up
			WHERE up.source = r.source AND up.event_id = r.event_id AND up.deliveries = r.deliveries)
		ORDER BY r.n)`

// eventKey names an event within a group.
type eventKey struct{ source, eventID string }

// storedEvent is an event's answer to the group's upsert: its pk and its
// deliveries in all, the group's included.
type storedEvent struct {
	pk    int64
	total int32
}

// inboxGroup is a group's deliveries in arrival order, with each distinct
// event's first delivery and its count of deliveries in the group.
type inboxGroup struct {
	dels   []*store.DeliveryInput
	first  map[eventKey]int
	counts map[eventKey]int32
	events eventParams // the distinct events, in the order first seen
}

func newInboxGroup(p *store.InboxCommitParams) *inboxGroup {
	g := &inboxGroup{}
	for _, sub := range p.Submissions {
		g.dels = append(g.dels, sub.Deliveries...)
	}
	g.first = make(map[eventKey]int, len(g.dels))
	g.counts = make(map[eventKey]int32, len(g.dels))
	var order []int
	for i, d := range g.dels {
		k := eventKey{d.Source, d.EventID}
		if _, ok := g.first[k]; !ok {
			g.first[k] = i
			order = append(order, i)
		}
		g.counts[k]++
	}
	for _, i := range order {
		d := g.dels[i]
		g.events.add(d, g.counts[eventKey{d.Source, d.EventID}])
	}
	return g
}

// scanStored reads inboxGroupSQL's answer: the events into got, the ids
// of the deliveries it inserted into ids.
func scanStored(got map[eventKey]storedEvent, ids *[]int64) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		for rows.Next() {
			var k eventKey
			var st storedEvent
			if err := rows.Scan(&k.source, &k.eventID, &st.pk, &st.total, ids); err != nil {
				return err
			}
			got[k] = st
		}
		return nil
	}
}

// outcomes are the deliveries' outcomes, given the events' answers and
// the deliveries' ids in arrival order, or an error if either falls short.
func (g *inboxGroup) outcomes(got map[eventKey]storedEvent, ids []int64) ([]store.DeliveryOutcome, error) {
	if len(got) != len(g.first) || len(ids) != len(g.dels) {
		return nil, fmt.Errorf("inbox commit: %d of %d events and %d of %d delivery ids came back", len(got), len(g.first), len(ids), len(g.dels))
	}
	items := make([]store.DeliveryOutcome, len(g.dels))
	for i, d := range g.dels {
		k := eventKey{d.Source, d.EventID}
		st := got[k]
		// The group's first delivery of an event is a duplicate only if
		// the event existed before the group; the later ones always are.
		items[i] = store.DeliveryOutcome{DeliveryID: ids[i], EventPK: st.pk, Duplicate: g.first[k] != i || st.total > g.counts[k]}
	}
	return items, nil
}

// submissionResults cuts the outcomes into the submissions' results.
func submissionResults(p *store.InboxCommitParams, items []store.DeliveryOutcome) []store.SubmissionResult {
	out := make([]store.SubmissionResult, len(p.Submissions))
	k := 0
	for i, sub := range p.Submissions {
		out[i].Items = items[k : k+len(sub.Deliveries)]
		k += len(sub.Deliveries)
	}
	return out
}

// carriesAudits tells whether a submission of the group carries audit
// rows of its own (store.Submission.Audit). Each submission's rows go
// before those of the events it stores unrouted, which follow from
// whether its deliveries are duplicates (submissionAudits), so such a
// group waits for the statement's answer and writes all its audit rows
// with COMMIT.
func carriesAudits(p *store.InboxCommitParams) bool {
	for _, sub := range p.Submissions {
		if len(sub.Audit) > 0 {
			return true
		}
	}
	return false
}

// inboxPipelined is InboxCommit's fast path: any error rolls it back. A
// group whose submissions carry no audit rows is one round trip: nothing
// it writes waits for an answer, and each round trip is a wake-up of the
// server and of PostgreSQL (docs/benchmarks-history.md, "Run AH").
func (s *Store) inboxPipelined(ctx context.Context, p *store.InboxCommitParams) ([]store.SubmissionResult, error) {
	g := newInboxGroup(p)
	dc := &deliveryParams{}
	for _, d := range g.dels {
		if err := dc.add(d); err != nil {
			return nil, err
		}
	}
	t, err := s.beginPipe(ctx, pipePlanSQL)
	if err != nil {
		return nil, err
	}
	got := make(map[eventKey]storedEvent, len(g.first))
	var ids []int64
	carried := carriesAudits(p)
	sql, args := inboxGroupSQL, append(append(g.events.args(), len(g.dels)), dc.args()...)
	if g.events.unrouted && !carried {
		sql, args = inboxGroupUnroutedSQL, append(args, auditArrays.args(g.events.audits)...)
	}
	t.later("record events and deliveries", sql, args, scanStored(got, &ids))
	if !carried {
		if err := t.commit(ctx); err != nil {
			return nil, err
		}
		// The statement inserts a delivery for every delivery of the
		// group and answers every event, so a shortfall is a fault of
		// this code. The group is committed by now: reported as failed,
		// it is sent again by its sender and then found a duplicate,
		// losing nothing.
		items, err := g.outcomes(got, ids)
		if err != nil {
			return nil, err
		}
		return submissionResults(p, items), nil
	}
	if err := t.flush(ctx); err != nil {
		t.rollback()
		return nil, err
	}
	items, err := g.outcomes(got, ids)
	if err != nil {
		t.rollback()
		return nil, err
	}
	out := submissionResults(p, items)
	for i, sub := range p.Submissions {
		for _, a := range submissionAudits(sub, out[i].Items) {
			t.audit(a)
		}
	}
	if err := t.commit(ctx); err != nil {
		return nil, err
	}
	return out, nil
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
	// audits are each event's audit row should it be new
	// (inboxUnroutedAuditCTE): one received unrouted has one, the others
	// an empty action. unrouted tells whether any event has one.
	audits   []*store.AuditInsertParams
	unrouted bool
}

// noAudit stands for the audit row of an event that writes none.
var noAudit = &store.AuditInsertParams{}

func (c *eventParams) add(d *store.DeliveryInput, deliveries int32) {
	disposition, audit := store.DispositionAccepted, noAudit
	if d.Unrouted {
		disposition, audit, c.unrouted = store.DispositionUnrouted, store.UnroutedAudit(d), true
	}
	c.eventFields.add(d)
	c.disposition = append(c.disposition, string(disposition))
	// An event unrouted at receipt needs no routing.
	c.route = append(c.route, !d.Unrouted)
	c.deliveries = append(c.deliveries, deliveries)
	c.trace = append(c.trace, d.TraceContext)
	c.audits = append(c.audits, audit)
}

func (c *eventParams) args() []any {
	return []any{c.source, c.eventID, c.typ, c.entity, c.account, c.occurred, c.received,
		c.causation, c.hop, c.disposition, c.route, c.deliveries, c.trace}
}

// deliveryParams are the deliveries' parameters of inboxGroupSQL; their
// ids and event pks come from the statement.
type deliveryParams struct {
	eventFields
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

func (c *deliveryParams) add(d *store.DeliveryInput) error {
	hdr, body, err := deliveryJSON(d.Headers, d.Body)
	if err != nil {
		return fmt.Errorf("record delivery: %w", err)
	}
	c.eventFields.add(d)
	c.requestID = append(c.requestID, d.RequestID)
	c.batchIndex = append(c.batchIndex, int32(d.BatchIndex)) //nolint:gosec // bounded by the sender's batch limit
	c.hdr = append(c.hdr, hdr)
	c.body = append(c.body, body)
	return nil
}

func (c *deliveryParams) args() []any {
	return []any{c.requestID, c.batchIndex, c.source, c.eventID, c.typ, c.entity, c.account,
		c.occurred, c.received, c.causation, c.hop, c.hdr, c.body}
}
