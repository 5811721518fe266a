// Package store is the durable contract every hookledger component writes
// through. Each database has its own driver package (sqlite, postgres) with
// hand-written SQL and embedded migrations; domain code sees only this
// contract, so dialect differences never leak out of a driver. The
// storetest package is the conformance suite every driver passes.
//
// Methods follow the NounVerb(ctx, *NounVerbParams) shape. Every method that
// records time takes it from its params: the store never reads a clock.
package store

import (
	"context"
	"errors"
	"time"
)

// MaxIdentityBytes caps every identity the receiver stores and the
// processor computes (event id, type, entity, account): far above any
// vendor's ids, and far below the size of a PostgreSQL index entry.
const MaxIdentityBytes = 512

// ErrConflict reports a unique-constraint violation, detected by the
// database's error code (never by message text).
var ErrConflict = errors.New("unique constraint violated")

// ErrUnavailable wraps failures to reach or commit to the database, which
// the receiver answers with 503 and Retry-After.
var ErrUnavailable = errors.New("store unavailable")

// ErrNotFound reports that the row a method acts on does not exist.
var ErrNotFound = errors.New("not found")

// ErrInvalidArgument reports params no database state could make valid (an
// unknown operator action, a resolve without a note): the caller's mistake,
// never a failure of the database. Callers that serve people can tell it
// apart from a store failure with errors.Is.
var ErrInvalidArgument = errors.New("invalid argument")

// Store is the contract both drivers implement.
type Store interface {
	// Pipeline is the ordered processor's part (pipeline.go).
	Pipeline
	// Ledger is the delivery worker's and the operators' part (ledger.go).
	Ledger
	// Outcomes is the signals', deadlines', compensation's, verification's
	// and check's part (signals.go).
	Outcomes
	EventResolver // closing dead-lettered events by hand (events_resolve.go)
	EntityHistory // an entity's work in business order (entity_history.go)
	Retention     // deleting what is past its retention (retention.go)
	Stats         // bounded summaries for the console and publishing (stats.go)
	Publishing    // endpoints and the messages published to them (publish.go)
	// Ping reports whether the database answers.
	Ping(ctx context.Context) error
	// ProbeWrite makes one small durable write (a single row rewritten with
	// now), for /readyz: a database that answers reads but cannot commit
	// is not ready to acknowledge webhooks.
	ProbeWrite(ctx context.Context, now time.Time) error
	// Migrate applies the embedded schema migrations not yet applied and
	// returns their names. Safe when several processes start at once.
	Migrate(ctx context.Context) ([]string, error)
	// InboxCommit durably records every submission in ONE transaction (the
	// group commit). Each submission gets its own outcome: a submission that
	// fails alone is rolled back to its savepoint and reports its error
	// without failing the others. A non-nil error means nothing committed.
	InboxCommit(ctx context.Context, p *InboxCommitParams) ([]SubmissionResult, error)
	// EventList returns events in id order after the cursor, filtered by
	// every set field of the params (see EventListParams).
	EventList(ctx context.Context, p *EventListParams) (*EventListResult, error)
	// DeliveryList returns the deliveries of events, in id order.
	DeliveryList(ctx context.Context, p *DeliveryListParams) ([]*Delivery, error)
	// AuditInsert writes one audit row.
	AuditInsert(ctx context.Context, p *AuditInsertParams) (int64, error)
	// AuditList returns audit rows in id order, filtered by every set field
	// of the params.
	AuditList(ctx context.Context, p *AuditListParams) ([]*AuditEntry, error)
	// Close releases the connections.
	Close() error
}

// Disposition is the closed set of event outcomes (docs/architecture.md, "Closed state sets").
type Disposition string

// The dispositions. Accepted is the only non-terminal one.
const (
	DispositionAccepted     Disposition = "accepted"
	DispositionApplied      Disposition = "applied"
	DispositionDuplicate    Disposition = "duplicate"
	DispositionStale        Disposition = "stale"
	DispositionSuperseded   Disposition = "superseded"
	DispositionUnrouted     Disposition = "unrouted"
	DispositionDeadLettered Disposition = "dead_lettered"
	DispositionResolved     Disposition = "resolved"
)

// Dispositions returns the closed set, for validating a filter.
func Dispositions() []Disposition {
	return []Disposition{DispositionAccepted, DispositionApplied, DispositionDuplicate, DispositionStale,
		DispositionSuperseded, DispositionUnrouted, DispositionDeadLettered, DispositionResolved}
}

// InboxCommitParams is one group commit.
type InboxCommitParams struct {
	Submissions []*Submission
	// Queued, when set, is called once the group is queued for the
	// database's one writer, where the driver has one (SQLite): a write
	// queued after that runs after the group's, in its transaction or a
	// later one. A driver without one never calls it.
	Queued func()
}

// Submission is what one inbound request contributes: every delivery it
// carried (a HubSpot batch carries up to 100), committed all or nothing,
// plus audit rows that belong with it.
type Submission struct {
	Deliveries []*DeliveryInput
	Audit      []*AuditInsertParams
}

// DeliveryInput is one event as carried by one transport attempt.
type DeliveryInput struct {
	// RequestID identifies the HTTP request; BatchIndex the event's place
	// in it. Neither is ever part of an event or effect identity.
	RequestID  string
	BatchIndex int
	Source     string
	EventID    string
	Type       string
	Entity     string
	Account    string
	// OccurredAt is the sender's occurrence time; zero when unknown.
	OccurredAt time.Time
	// ReceivedAt is when hookledger read the request (OR03: kept apart).
	ReceivedAt time.Time
	// Unrouted says no flow subscribes to the event's type, known at
	// receipt: a new event is then created unrouted (terminal, WH05) with
	// its audit row in the same transaction, instead of costing the router
	// a second write.
	Unrouted bool
	// CausationID and Hop come from the inbound causation headers (the
	// feedback-loop guard); empty and 0 when the sender set none.
	CausationID string
	Hop         int
	// TraceContext is the W3C traceparent of the span that received the
	// event ("" when tracing is off): processing and delivery continue
	// its trace, days later and in another process.
	TraceContext string
	// Headers are the selected request headers worth keeping as evidence
	// (never signature values or credentials).
	Headers map[string]string
	Body    []byte
}

// SubmissionResult is one submission's own outcome in a group commit.
type SubmissionResult struct {
	// Err is set when this submission alone failed and was rolled back.
	Err   error
	Items []DeliveryOutcome
}

// DeliveryOutcome is the fate of one delivery in a committed submission.
type DeliveryOutcome struct {
	DeliveryID int64
	EventPK    int64
	// Duplicate is true when the event (source, event id) already existed:
	// the delivery is recorded as another delivery of that event.
	Duplicate bool
}

// Event is one distinct event (unique on source + event id).
type Event struct {
	PK          int64
	Source      string
	EventID     string
	Type        string
	Entity      string
	Account     string
	OccurredAt  time.Time // zero when unknown
	ReceivedAt  time.Time // first receipt
	Deliveries  int
	Disposition Disposition
	// Routes is where each flow put the event; filled only when the list
	// asked for it (EventListParams.WithRoutes).
	Routes []EventRoute
}

// EventRoute is one flow's place for an event: the entity the flow
// computed and how its latest pass settled (a replay is a later pass).
type EventRoute struct {
	Flow string
	// Entity is empty when the route could not be computed (a dead letter).
	Entity string
	// Disposition is accepted while the flow's work is pending.
	Disposition Disposition
	// Reason says why the route ended as it did (a dead letter's cause, a
	// stale or duplicate event's comparison); empty when there is none.
	Reason string
}

// addEventRoute records one work row's route on its event, for drivers that
// read an event's work rows in (flow, pass) order: a later pass of a flow
// replaces the earlier one. A pending row has no disposition yet and reads
// as accepted.
func addEventRoute(e *Event, r EventRoute) {
	if e == nil {
		return
	}
	if r.Disposition == "" {
		r.Disposition = DispositionAccepted
	}
	if n := len(e.Routes); n > 0 && e.Routes[n-1].Flow == r.Flow {
		e.Routes[n-1] = r
		return
	}
	e.Routes = append(e.Routes, r)
}

// EventListPage makes EventList's result of the events read for a page
// of limit (limit+1 of them when there are more, which sets the cursor),
// and fills their routes through routes when p asks for them.
func EventListPage(ctx context.Context, p *EventListParams, events []*Event, limit int,
	routes func(ctx context.Context, evs []*Event) error) (*EventListResult, error) {
	out := &EventListResult{Events: events}
	if len(events) > limit {
		out.Events = events[:limit]
		out.NextAfterPK = events[limit-1].PK
	}
	if p.WithRoutes && len(out.Events) > 0 {
		if err := routes(ctx, out.Events); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// FillEventRoutes fills the routes of a page of events from their work
// rows, which read hands to add, each with its event's pk, in (event pk,
// flow in byte order, pass) order.
func FillEventRoutes(evs []*Event, read func(pks []int64, add func(pk int64, r EventRoute)) error) error {
	byPK := make(map[int64]*Event, len(evs))
	pks := make([]int64, len(evs))
	for i, e := range evs {
		byPK[e.PK] = e
		pks[i] = e.PK
	}
	return read(pks, func(pk int64, r EventRoute) { addEventRoute(byPK[pk], r) })
}

// EventListParams filters EventList; zero fields do not filter, and an event
// must match every set field.
type EventListParams struct {
	Source      string
	EventID     string
	Type        string
	Disposition Disposition
	// Entity matches the envelope entity or the entity any flow computed
	// for the event (the entity of any of its routes).
	Entity string
	// ReceivedFrom (inclusive) and ReceivedTo (exclusive) bound the first
	// receipt.
	ReceivedFrom, ReceivedTo time.Time
	// OccurredFrom (inclusive) and OccurredTo (exclusive) bound the
	// sender's occurrence time; an event without one matches neither.
	OccurredFrom, OccurredTo time.Time
	// WithRoutes fills each event's Routes (one more query per page).
	WithRoutes bool
	// AfterPK is the paging cursor: only events with a larger PK.
	AfterPK int64
	// Limit defaults to 100 and is capped at 1000.
	Limit int
}

// EventListResult is one page.
type EventListResult struct {
	Events []*Event
	// NextAfterPK is the cursor for the next page, 0 when there is none.
	NextAfterPK int64
}

// Delivery is one stored transport attempt of one event.
type Delivery struct {
	ID          int64
	EventPK     int64
	RequestID   string
	BatchIndex  int
	Source      string
	EventID     string
	Type        string
	Entity      string
	Account     string
	OccurredAt  time.Time
	ReceivedAt  time.Time
	CausationID string
	Hop         int
	Headers     map[string]string
	// Body is the body as received, or its first BodyPrefix bytes when
	// the list asked for a prefix; BodySize is always the whole body's
	// size in bytes.
	Body     []byte
	BodySize int
}

// DeliveryListParams filters DeliveryList.
type DeliveryListParams struct {
	Source  string
	EventID string
	AfterID int64
	Limit   int
	// BodyPrefix, when positive, reads only the first BodyPrefix bytes of
	// each body: a page that shows a list of deliveries then reads a
	// fixed amount per delivery, whatever the bodies' sizes.
	BodyPrefix int
}

// AuditInsertParams is one audit row: who or what did what, when, and why.
type AuditInsertParams struct {
	At      time.Time
	Actor   string // "receiver", "worker", "operator:alice", ...
	Action  string // "tenant_mismatch", "disposition", ...
	Source  string
	EventID string
	Entity  string
	Detail  string // human-readable reason; never secrets
}

// AuditEntry is a stored audit row.
type AuditEntry struct {
	ID int64
	AuditInsertParams
}

// AuditListParams filters AuditList; zero fields do not filter, and a row
// must match every set field.
type AuditListParams struct {
	Action  string
	Source  string
	Entity  string
	EventID string
	// From (inclusive) and To (exclusive) bound the row's time.
	From, To time.Time
	AfterID  int64
	Limit    int
}

// ClampLimit applies the default and the cap shared by every list method.
func ClampLimit(n int) int {
	switch {
	case n <= 0:
		return 100
	case n > 1000:
		return 1000
	}
	return n
}
