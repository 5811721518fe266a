package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrLeaseLost reports that a worker's entity lease expired or was taken by
// another worker: the caller's transaction was rolled back and it must stop
// working on that entity (fencing).
var ErrLeaseLost = errors.New("entity lease lost")

// Pipeline is the part of the contract the ordered processor uses: routing
// accepted events to flows, leasing entities, applying one event per
// transaction behind the revision guard, and the effect ledger.
type Pipeline interface {
	// EventListUnrouted returns accepted events not yet routed to flows, in
	// pk order, each with the body of its first delivery.
	EventListUnrouted(ctx context.Context, p *EventListUnroutedParams) ([]*RoutableEvent, error)
	// Shared reports whether several processes may share the database
	// (PostgreSQL) rather than one process owning it (SQLite), whose one
	// writer the routing transaction holds (EventRouteNextParams.Settle).
	Shared() bool
	// EventRoute records routing decisions: a work item per (event, flow),
	// an entity row per (flow, entity), and marks the events routed. An
	// event with no route ends unrouted. Routing an event twice creates no
	// second work item (safe for concurrent routers): a decision for an
	// event that is already routed is skipped as a whole.
	EventRoute(ctx context.Context, p *EventRouteParams) error
	// EventRouteNext routes the next page of accepted, unrouted events in
	// one transaction: it takes up to Limit of them in pk order (each with
	// the body of its first delivery), asks Decide for their decisions and
	// records those as EventRoute would. Concurrent callers, in one
	// process or in several, take disjoint pages: an event another caller
	// holds is passed over, so no event is read or decided twice. It
	// returns the number of events taken (0: none was waiting) and the
	// leases Claim asked for.
	EventRouteNext(ctx context.Context, p *EventRouteNextParams) (RoutedPage, error)
	// EventRouteStored routes events decided from the requests that
	// carried them, before anything read them back: each is found by the
	// delivery that stored it and routed, with what Claim and Settle ask,
	// as EventRouteNext would route a page holding it. An event is routed
	// only when that delivery is its only one and it is stored exactly as
	// it was decided; the others are left to EventRouteNext.
	EventRouteStored(ctx context.Context, p *EventRouteStoredParams) (RoutedPage, error)
	// EntityClaim leases up to Limit entities (as many as Slots grants)
	// that have pending work, whose lease is free or expired and whose
	// not_before has passed, in claim order (not_before, flow, entity).
	EntityClaim(ctx context.Context, p *EntityClaimParams) ([]*Lease, error)
	// EntityRelease gives a lease back (only if the token still holds it),
	// optionally deferring the entity until RetryAt. Releasing a lease that
	// was already lost is a no-op, not an error.
	EntityRelease(ctx context.Context, p *EntityReleaseParams) error
	// WorkListPending returns an entity's pending work items in business
	// order (order key, then id), with their events.
	WorkListPending(ctx context.Context, p *WorkListPendingParams) ([]*WorkItem, error)
	// WorkListPendingGroup is WorkListPending for several entities at
	// once: one answer per params, in order (a driver may read them in
	// one query).
	WorkListPendingGroup(ctx context.Context, ps []*WorkListPendingParams) ([][]*WorkItem, error)
	// FlowApply settles one work item in ONE transaction: fencing check,
	// feedback-loop guard, revision guard, projection update, superseding
	// older pending effects of the same name, effect inserts under the
	// unique episode key, dispositions and audit rows. It returns
	// ErrLeaseLost (nothing written) when the lease no longer holds, and an
	// error when the work item is not the leased entity's or not EventPK's.
	// An effect whose episode already exists is counted as existing and
	// left as it is (a superseded row is not revived).
	FlowApply(ctx context.Context, p *FlowApplyParams) (*FlowApplyResult, error)
	// FlowApplyBatch settles several work items of one leased entity in
	// one transaction, in the order given, each exactly as FlowApply
	// would: a hot entity's backlog costs one commit instead of one per
	// event. Any error rolls all of them back (ErrLeaseLost included), and
	// the caller may retry them one by one.
	FlowApplyBatch(ctx context.Context, ps []*FlowApplyParams) ([]*FlowApplyResult, error)
	// FlowApplyGroup settles submissions, each the work items of one
	// leased entity (no two for one entity), each exactly as
	// FlowApplyBatch would, and answers per submission: what
	// FlowApplyBatch would have returned for it. A driver may settle
	// several submissions in one transaction (a group commit for
	// processing, as InboxCommit is for receiving); one submission's
	// failure never fails another's.
	FlowApplyGroup(ctx context.Context, subs [][]*FlowApplyParams) []FlowApplyOutcome
	// FlowApplyGroupClaim is FlowApplyGroup that also claims due effects,
	// claims[i] as Ledger.EffectClaim would, in the transaction that
	// settles the group, and returns what each claim took (nothing when
	// the group was settled submission by submission).
	FlowApplyGroupClaim(ctx context.Context, subs [][]*FlowApplyParams, claims []*EffectClaimParams) ([]FlowApplyOutcome, [][]*ClaimedEffect)
	// ProjectionGet returns the projection of one entity of one flow, or
	// nil when it has none.
	ProjectionGet(ctx context.Context, p *ProjectionGetParams) (*Projection, error)
	// EffectList pages through the effect ledger.
	EffectList(ctx context.Context, p *EffectListParams) ([]*Effect, error)
	// ReplayCreate records a replay attempt and enqueues new work items for
	// the given routes (same events, same identities, a new replay id).
	// Failed routes are not replayed; the replay's items count is the number
	// of work items enqueued.
	ReplayCreate(ctx context.Context, p *ReplayCreateParams) (int64, error)
	// ReplayBegin, ReplayEnqueue and ReplayFinish are ReplayCreate in
	// batches, a transaction each, for a selection of any size (see
	// replay.go): the replay, then its work at most ReplayBatchMost
	// events at a time, then its planned mark and audit row.
	ReplayBegin(ctx context.Context, p *ReplayCreateParams) (int64, error)
	ReplayEnqueue(ctx context.Context, id int64, p *ReplayCreateParams) (int64, error)
	ReplayFinish(ctx context.Context, id int64, p *ReplayCreateParams) error
	// ReplayProgress counts what a replay's work has come to; nil when no
	// such replay exists.
	ReplayProgress(ctx context.Context, id int64) (*ReplayProgress, error)
	// WorkCount reports pending work, for drains and readiness of tests.
	WorkCount(ctx context.Context) (pending int64, err error)
}

// EventListUnroutedParams selects unrouted events.
type EventListUnroutedParams struct {
	Limit int
}

// EventRouteNextParams routes the next page of unrouted events.
type EventRouteNextParams struct {
	Limit int
	Now   time.Time
	// Decide computes the routing decisions of the events taken, called
	// once with at least one event: inside the transaction that records
	// them where processes share the database (Driver.Shared), before it
	// elsewhere.
	Decide func(evs []*RoutableEvent) []*RouteDecision
	// Claim, when set with a Limit above zero, also leases up to Limit
	// ready entities, as EntityClaim would, in the transaction that
	// records the page (only when the page took an event). The processor
	// would otherwise claim the entities it just made ready in a
	// transaction of its own: one commit more between a webhook and its
	// effect, and on PostgreSQL one transaction more per lone webhook.
	Claim *EntityClaimParams
	// Settle, when set, settles work of the entities Claim leased in the
	// routing transaction itself: it is called inside the transaction
	// with the leases that carry their work (Lease.Pending, read there),
	// chooses what to settle, and the submissions and claims it returns
	// are settled and run there as FlowApplyGroupClaim would. A lone
	// webhook then costs the routing transaction and no processing
	// transaction of its own. Should the transaction fail with them, the
	// page is routed again without Settle, and RoutedPage.Settled is nil:
	// the caller settles those entities' work itself.
	//
	// On a database one process owns, the transaction holds the one
	// writer while Settle runs: Settle should assemble what Decide
	// prepared rather than compute there, and only the work of the page's
	// own events is carried (the driver lists keys, the page has the
	// events).
	Settle func(ctx context.Context, leases []*Lease) RouteSettle
	// SettleMax, when above zero, settles in routing only pages of at
	// most that many events: a larger page is a busy pipeline, whose
	// processor settles many entities in shared statements. On a
	// database one process owns a larger page lists no work in routing
	// either.
	SettleMax int
}

// settles reports whether a page of n events settles in routing.
func (p *EventRouteNextParams) settles(n int) bool {
	return settles(p.Settle, p.Claim, p.SettleMax, n)
}

// settles reports whether a page of n events settles in routing, with
// settle, claim and settleMax as EventRouteNextParams has them.
func settles(settle func(context.Context, []*Lease) RouteSettle, claim *EntityClaimParams, settleMax, n int) bool {
	return settle != nil && claim != nil && claim.Limit > 0 && claim.List > 0 && (settleMax <= 0 || n <= settleMax)
}

// EventRouteStoredParams routes events decided before they were read
// back (Pipeline.EventRouteStored).
type EventRouteStoredParams struct {
	Now time.Time
	// Events are the events as they were decided, each as the delivery
	// Keys[i] carried it (PK unset), and Decisions[i] is Events[i]'s
	// (EventPK unset). Once the page is recorded, the PK of each event it
	// routed is set in both; the others' stay zero.
	Events    []*RoutableEvent
	Keys      []DeliveryKey
	Decisions []*RouteDecision
	// Claim, Settle and SettleMax are EventRouteNextParams'; Settle sees
	// only the leases of the events found and routed.
	Claim     *EntityClaimParams
	Settle    func(ctx context.Context, leases []*Lease) RouteSettle
	SettleMax int
	// Queued, when set, is called once the routing is queued for the
	// database's one writer, where it has one (QueuedDriver), or else
	// before it runs; again should the page be routed again.
	Queued func()
}

// DeliveryKey names one delivery of an event: the request that carried
// it, and its place in that request.
type DeliveryKey struct {
	Source, EventID string
	RequestID       string
	BatchIndex      int
}

// RouteSettle is what EventRouteNextParams.Settle asks the routing
// transaction to settle: one submission per leased entity, each under
// that entity's lease, and the effect claims to run after them.
type RouteSettle struct {
	Subs   [][]*FlowApplyParams
	Claims []*EffectClaimParams
}

// RoutedPage is what EventRouteNext did.
type RoutedPage struct {
	Events int      // events taken (0: none was waiting)
	Leases []*Lease // the leases Claim took, in claim order
	// Settled is, in RouteSettle.Subs' order, what each submission came
	// to, and Claimed what each of its claims took; both nil when the
	// page settled nothing (Settle was not called, returned nothing, or
	// the transaction failed with it and the page was routed without).
	Settled []FlowApplyOutcome
	Claimed [][]*ClaimedEffect
}

// RoutableEvent is an accepted event with what routing and processing need.
type RoutableEvent struct {
	PK          int64
	Source      string
	EventID     string
	Type        string
	Entity      string // the receiver's envelope entity (a flow may compute its own)
	Account     string
	OccurredAt  time.Time
	ReceivedAt  time.Time
	CausationID string
	Hop         int
	Body        []byte
	// ContentType is the Content-Type the first delivery came with (kept
	// beside its body), "" when it had none: a forward sends it on.
	ContentType string
	// TraceContext is the traceparent the event was received under, ""
	// when it was not traced.
	TraceContext string
}

// EventRouteParams is a batch of routing decisions.
type EventRouteParams struct {
	Now       time.Time
	Decisions []*RouteDecision
}

// RouteDecision says which flows an event goes to. No routes: unrouted.
type RouteDecision struct {
	EventPK int64
	Routes  []Route
}

// Route puts an event on one entity of one flow.
type Route struct {
	Flow   string
	Entity string
	// OrderKey sorts the entity's work into business order (a padded
	// revision, an occurrence time with tie-break, or arrival for refetch).
	OrderKey string
	// Failed, when set, records that the route could not be computed (the
	// entity expression failed): the work item is created already settled
	// as dead_lettered with this reason, visible in the exception queue.
	Failed string
}

// EntityClaimParams asks for leases.
type EntityClaimParams struct {
	// Owner names the worker; each lease gets a fresh token from it.
	Owner    string
	Now      time.Time
	LeaseFor time.Duration
	Limit    int
	// Slots, when set, is the claimer's count of free workers, asked as
	// the claim runs: on a database one process owns, when its one
	// writer runs the claim, not when the claim was queued. A claim
	// waiting for the writer then holds no worker, and whichever claim
	// the writer runs first takes the free ones. The claim leases at most
	// what Slots.Take grants of Limit (none when it grants none), and
	// tells Slots.Leased how many it took, inside its transaction.
	Slots Slots
	// List, above zero, asks a claim made inside routing's transaction
	// (EventRouteNextParams.Claim) for the first List pending items of
	// each entity it leases, read in that transaction where the driver
	// reads there (RouteTx.WorkListLeased): Lease.Pending.
	List int
	// ReadAhead tells a listing lease (List above zero) that its
	// transaction goes on to settle the listed work in one group
	// (EventRouteNextParams.Settle): a driver that pays a round trip for
	// ApplyTx.ReadGroup may read what that group reads with the lease,
	// and answer ReadGroup from there while nothing was written since.
	ReadAhead bool
}

// Slots is a claimer's count of free workers (EntityClaimParams.Slots).
// A transaction tried again asks again: Take then counts what the claim
// still holds from the attempt before.
type Slots interface {
	// Take promises up to limit free workers to the claim about to
	// lease, and returns how many it holds.
	Take(limit int) int
	// Leased tells how many of them the claim's leases fill. The others
	// are free again at once, for the claims that the same transaction
	// runs after this one: given back only once the claim's commit
	// ended, they were held through every job of a group commit.
	Leased(n int)
}

// Lease runs lease, a driver's lease statement, for as many entities as
// p may lease as it runs: Limit, or what Slots grants of it, telling
// Slots what the statement took. Drivers lease through it, in the
// claim's transaction.
func (p *EntityClaimParams) Lease(lease func(limit int) ([]*Lease, error)) ([]*Lease, error) {
	limit := p.Limit
	if p.Slots != nil {
		limit = min(p.Slots.Take(limit), limit)
	}
	if limit <= 0 {
		return nil, nil
	}
	leases, err := lease(limit)
	if err == nil && p.Slots != nil {
		p.Slots.Leased(len(leases))
	}
	return leases, err
}

// Lease is a worker's exclusive right to process one entity until Until.
type Lease struct {
	Flow   string
	Entity string
	Token  string
	Until  time.Time
	// Pending is the entity's first page of pending work in business
	// order, read in the transaction that took the lease
	// (EntityClaimParams.List); nil when it was not read there.
	Pending []*WorkItem
}

// EntityReleaseParams gives a lease back.
type EntityReleaseParams struct {
	Lease *Lease
	Now   time.Time
	// RetryAt defers the entity (a failing entity must not be retried in a
	// hot loop, nor block the others); zero makes it claimable at once.
	RetryAt time.Time
}

// WorkListPendingParams selects one entity's pending work.
type WorkListPendingParams struct {
	Flow   string
	Entity string
	Limit  int
}

// WorkItem is one (event, flow) to process, possibly a replay.
type WorkItem struct {
	ID       int64
	Flow     string
	Entity   string
	OrderKey string
	ReplayID int64 // 0 for the first pass
	Event    RoutableEvent
}

// FlowApplyParams settles one work item.
type FlowApplyParams struct {
	Lease   *Lease
	Now     time.Time
	WorkID  int64
	EventPK int64
	Actor   string
	// ReleaseIfDrained frees the lease in the same transaction when the
	// entity has no pending work left once this item is settled: the
	// worker was about to release it anyway, and this saves a commit.
	ReleaseIfDrained bool

	// Fail, when set, settles the item dead_lettered with this reason
	// (an expression failed, the refetch answered 404, ...); nothing else
	// below applies.
	Fail string

	// Version identifies the business version: Version is shown (r18,
	// h:3fa2…), VersionSort compares. Ordered false means the version is a
	// hash: only equality is meaningful, and a different hash is newer
	// because it was refetched after the current one.
	Version     string
	VersionSort string
	Ordered     bool
	// State is the projected business state (canonical JSON).
	State json.RawMessage

	// Causation for the feedback-loop guard; empty ID skips it.
	CausationID string
	Hop         int
	MaxHops     int

	// Effects to insert when the event is applied.
	Effects []*EffectInsert
	// Skipped are effects the flow chose not to create, each with why (a
	// destination that sends changes only, and a state equal to the one
	// applied before): an audit row each when the event is applied, so
	// that "why was nothing sent?" has an answer.
	Skipped []*SkippedEffect
}

// SkippedEffect is an effect the flow did not create.
type SkippedEffect struct {
	EpisodeKey  string
	Effect      string
	Destination string
	Reason      string
}

// EffectInsert is one effect row to create behind its episode key.
type EffectInsert struct {
	EpisodeKey  string
	Effect      string
	Destination string
	Request     json.RawMessage
	CausationID string
	Hop         int
	// Compensates, when not 0, makes this the compensation of that effect
	// (compensate_when held): the insert is decided in the transaction
	// from the original's state. An original that was never sent
	// (approved, retry_wait) is superseded instead, audited
	// effect_superseded, and no compensation is made; one that ended
	// superseded or dead needs none; otherwise the compensation is
	// inserted. Compensations never supersede one another.
	Compensates int64
	// DeadlineAt is the business deadline (zero: none); DeadlineWarnAt is
	// when deadline_risk starts to warn; OnDeadline is "" (keep trying
	// after the deadline) or "dead" (hand it to a person).
	DeadlineAt     time.Time
	DeadlineWarnAt time.Time
	OnDeadline     string
}

// FlowApplyResult is what the transaction decided.
type FlowApplyResult struct {
	Disposition Disposition
	// Reason explains a non-applied disposition (stale: "version r2 is
	// older than applied r3", loop_blocked, version_conflict, ...).
	Reason          string
	EffectsInserted int
	EffectsExisting int
	// EffectsSkipped counts the Skipped effects recorded.
	EffectsSkipped int
	Superseded     int
	// Released says ReleaseIfDrained freed the lease: the entity had no
	// pending work left.
	Released bool
}

// ProjectionGetParams names one entity of one flow.
type ProjectionGetParams struct {
	Flow   string
	Entity string
}

// Projection is the newest applied business state of one entity.
type Projection struct {
	Flow           string
	Entity         string
	Version        string
	VersionSort    string
	State          json.RawMessage
	AppliedEventPK int64
	UpdatedAt      time.Time
	Pending        int
}

// EffectState is the closed set of effect states (docs/architecture.md, "Closed state sets").
type EffectState string

// The effect states.
const (
	EffectApproved            EffectState = "approved"
	EffectSubmitting          EffectState = "submitting"
	EffectAcknowledged        EffectState = "acknowledged"
	EffectDone                EffectState = "done"
	EffectNeedsReconciliation EffectState = "needs_reconciliation"
	EffectRetryWait           EffectState = "retry_wait"
	EffectSuperseded          EffectState = "superseded"
	EffectDead                EffectState = "dead"
	EffectResolved            EffectState = "resolved"
)

// EffectStates returns the closed set, for validating a filter.
func EffectStates() []EffectState {
	return []EffectState{EffectApproved, EffectSubmitting, EffectAcknowledged, EffectDone, EffectNeedsReconciliation,
		EffectRetryWait, EffectSuperseded, EffectDead, EffectResolved}
}

// ExceptionStates are the states of the exception queue: the effects that
// wait for a person.
func ExceptionStates() []EffectState {
	return []EffectState{EffectDead, EffectNeedsReconciliation}
}

// EffectListParams filters the ledger; zero fields do not filter, and an
// effect must match every set field.
type EffectListParams struct {
	Flow   string
	Entity string
	// State and States select the effects in any of the states named by
	// either (State is the one-state form).
	State       EffectState
	States      []EffectState
	Destination string
	Owner       string
	Class       ErrorClass
	// CreatedFrom/UpdatedFrom (inclusive) and CreatedTo/UpdatedTo
	// (exclusive) bound the effect's creation and last change.
	CreatedFrom, CreatedTo time.Time
	UpdatedFrom, UpdatedTo time.Time
	// DeadlineMissed selects the effects whose business deadline was
	// escalated (part of the exception queue's view).
	DeadlineMissed bool
	// Compensations selects compensation effects only.
	Compensations bool
	AfterID       int64
	Limit         int
	// WithoutRequest leaves each effect's Request empty: a list that
	// shows no request then reads none, so that its cost does not grow
	// with the requests' sizes.
	WithoutRequest bool
}

// StateSet is the union of State and States, sorted and each once, so
// that drivers write one statement text per set of states.
func (p *EffectListParams) StateSet() []EffectState {
	set := slices.Clone(p.States)
	if p.State != "" {
		set = append(set, p.State)
	}
	slices.Sort(set)
	return slices.Compact(set)
}

// Effect is one row of the effect ledger.
type Effect struct {
	ID            int64
	EpisodeKey    string
	Flow          string
	Entity        string
	Version       string
	Effect        string
	Destination   string
	State         EffectState
	Request       json.RawMessage
	Source        string
	SourceEventID string
	// TraceContext is the traceparent its source event was received
	// under, "" when it was not traced.
	TraceContext string
	// SourceEvents is every event that asked for the effect, oldest
	// first: the source event (Source, SourceEventID), then each later
	// event that asked for it while its episode key was held already (a
	// replay, a duplicate with a new id, another flow's route), each
	// once. EffectGet and EffectList fill it.
	SourceEvents []EventRef
	CausationID  string
	Hop          int
	// Attempts counts the calls the retry policy reads: an operator's
	// retry and a re-drive restart it. Calls counts every attempts row
	// the effect has (they are numbered 1 to Calls), and Restart says what
	// restarted Attempts since the last call (RestartOperatorRetry,
	// RestartRedrive), "" when nothing did: the next call's row says so.
	Attempts  int
	Calls     int
	Restart   string
	CreatedAt time.Time
	UpdatedAt time.Time

	// Delivery evidence and the exception queue.
	NextAttemptAt   time.Time // zero when nothing is scheduled
	Redrives        int
	ErrorClass      ErrorClass
	Reason          string
	SuggestedRepair string
	DestinationRef  string
	LastResponse    string
	Owner           string // who owns the repair of an effect in the exception queue
	Note            string // the operator's note (required to resolve)

	// Outcomes: the effect this one compensates (0 for none), the business
	// deadline and its escalation, and the verification mismatch mark
	// (zero times for none).
	Compensates      int64
	DeadlineAt       time.Time
	DeadlineWarnAt   time.Time
	OnDeadline       string
	DeadlineMissedAt time.Time
	MismatchAt       time.Time
}

// ReplayCreateParams records one replay attempt.
type ReplayCreateParams struct {
	Now   time.Time
	Actor string
	// Selection describes what was selected (for the audit trail).
	Selection string
	Decisions []*RouteDecision
}

// storableRoutes makes every route one that every driver writes (see
// StorableRoute); drivers call it before they write decisions.
func storableRoutes(ds []*RouteDecision) {
	for _, d := range ds {
		for i := range d.Routes {
			StorableRoute(&d.Routes[i])
		}
	}
}

// StorableRoute makes a route one that every driver writes: an entity or
// order key that is not storable text fails the route (a dead letter with
// the reason) instead of failing the page it is in, and a reason is
// storable text. The router applies it to every route it computes, so a
// replay, which leaves failed routes out, never writes such a route either.
func StorableRoute(r *Route) {
	if r.Failed == "" {
		if err := CheckID("entity", r.Entity); err != nil {
			r.Failed = err.Error()
		} else if err := CheckText("order key", r.OrderKey); err != nil {
			r.Failed = err.Error()
		}
		if r.Failed != "" {
			r.Entity, r.OrderKey = "", ""
		}
	}
	r.Failed = Storable(r.Failed)
}

// checkDecisions reports a Decide answer that does not hold exactly one
// decision for each event taken: an event taken without a decision would
// be marked routed with no work, and lost. It makes every route storable
// first (StorableRoute), so one event's values cannot fail a page.
func checkDecisions(evs []*RoutableEvent, ds []*RouteDecision) error {
	storableRoutes(ds)
	taken := make(map[int64]bool, len(evs))
	for _, e := range evs {
		taken[e.PK] = true
	}
	for _, d := range ds {
		if !taken[d.EventPK] {
			return fmt.Errorf("routing decision for event %d, which is not in the page or decided twice", d.EventPK)
		}
		delete(taken, d.EventPK)
	}
	for _, e := range evs {
		if taken[e.PK] {
			return fmt.Errorf("no routing decision for event %d", e.PK)
		}
	}
	return nil
}

// EntityRelease frees a lease that the token still holds; a lease already
// lost to another worker is left alone and is not an error, because the
// releasing worker has nothing left to do either way.
func (r *Rules) EntityRelease(ctx context.Context, p *EntityReleaseParams) error {
	if p.Lease == nil {
		return errors.New("release entity: no lease")
	}
	if err := r.db.InTx(ctx, TxProcess, func(ctx context.Context, tx Tx) error {
		return tx.EntityLeaseFree(ctx, p)
	}); err != nil {
		return fmt.Errorf("release entity %s/%s: %w", p.Lease.Flow, p.Lease.Entity, err)
	}
	return nil
}

// EventRef names one event.
type EventRef struct {
	Source  string `json:"source"`
	EventID string `json:"event_id"`
}

// SourceEventIDs are the ids of every event that asked for the effect,
// oldest first (SourceEvents); the source event's alone when no other
// did.
func (e *Effect) SourceEventIDs() []string {
	out := make([]string, 0, max(len(e.SourceEvents), 1))
	for _, r := range e.SourceEvents {
		out = append(out, r.EventID)
	}
	if len(out) == 0 && e.SourceEventID != "" {
		out = append(out, e.SourceEventID)
	}
	return out
}

// SetLaterSources fills f.SourceEvents from its source event and the
// later ones a driver read as a JSON array of [source, event id] pairs,
// oldest first (an empty text is none).
func SetLaterSources(f *Effect, later string) error {
	f.SourceEvents = append(f.SourceEvents[:0], EventRef{Source: f.Source, EventID: f.SourceEventID})
	if later == "" || later == "[]" {
		return nil
	}
	var pairs [][2]string
	if err := json.Unmarshal([]byte(later), &pairs); err != nil {
		return fmt.Errorf("later source events of effect %d: %w", f.ID, err)
	}
	for _, p := range pairs {
		if p[1] != "" { // an event pruned since is no longer named
			f.SourceEvents = append(f.SourceEvents, EventRef{Source: p[0], EventID: p[1]})
		}
	}
	return nil
}

// ClaimedEntity is a lease as a claim statement returns it, with when its
// entity was due: the claim order.
type ClaimedEntity struct {
	NotBefore time.Time
	Lease     *Lease
}

// ClaimOrder returns the leases in claim order (not_before, flow,
// entity, in byte order): a claim that leases with UPDATE ... RETURNING
// gets its rows in no particular order.
func ClaimOrder(got []ClaimedEntity) []*Lease {
	slices.SortFunc(got, func(a, b ClaimedEntity) int {
		return cmp.Or(a.NotBefore.Compare(b.NotBefore), cmp.Compare(a.Lease.Flow, b.Lease.Flow), cmp.Compare(a.Lease.Entity, b.Lease.Entity))
	})
	out := make([]*Lease, len(got))
	for i, c := range got {
		out[i] = c.Lease
	}
	return out
}
