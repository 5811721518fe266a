package store

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// The outcome signals' registry. Each signal is one SignalDef, written
// once here, and everything that shows a signal reads it from a
// SignalRegistry: MeasureSignals measures the registry's signals from the
// rows a driver's queries return; the config accepts their names under
// signals.thresholds and takes their defaults from it; package signals
// judges and reports them (GET /api/v1/signals, hookledger status, the
// Prometheus gauges, the history); the console words each card and links
// its numbers from it. docs/signals.md says how to add a signal.
//
// Like the sender kinds' registry, it is a value: BuiltinSignals builds
// the product's signals each time it is called, NewSignalRegistry checks
// any other set (a test's), and nothing registers itself.

// The pinned names of the built-in outcome signals.
const (
	SignalRevisionLag              = "revision_lag"
	SignalUnfinishedEvents         = "unfinished_events"
	SignalDeadlineRisk             = "deadline_risk"
	SignalUnknownOutcomes          = "unknown_outcomes"
	SignalKeyConflicts             = "key_conflicts"
	SignalDeadLetters              = "dead_letters"
	SignalReconciliationMismatches = "reconciliation_mismatches"
	SignalCompensationOutstanding  = "compensation_outstanding"
	SignalLoopBlocks               = "loop_blocks"
)

// SignalNames returns the built-in signals' names in their pinned order.
func SignalNames() []string { return BuiltinSignals().Names() }

// SignalDef is everything hookledger knows about one outcome signal.
type SignalDef struct {
	// Name is the pinned name: the API's, the gauges' label, the config's
	// key under signals.thresholds and the history's.
	Name string
	// Title and Help word the signal for people (the console's card): a
	// title, and one sentence saying what it counts.
	Title, Help string
	// Defaults are the thresholds when the config sets none; 0 is off.
	Defaults SignalLimits
	// Measure fills an empty measure from the rows of the driver's
	// queries, which read returns (SignalQuery says what each query's rows
	// are). It may read several queries, or read one only when another
	// found something; a query two signals read runs once per snapshot.
	Measure func(m *SignalMeasure, read SignalRead) error
	// List is the console list the value leads to, Also further lists
	// the card offers, and Keys the lists the breakdown's keys lead to.
	List SignalList
	Also []SignalList
	Keys []SignalKeyLink
}

// SignalLimits are a signal's thresholds: warn (alert) when the value is
// at least Warn (Alert), or the oldest counted item at least WarnAge
// (AlertAge) old; 0 turns a check off.
type SignalLimits struct {
	Warn, Alert       int64
	WarnAge, AlertAge time.Duration
}

// SignalList is a console list (/events, /effects, /audit, /entity) with
// the filters that show what a number counts.
type SignalList struct {
	// Label words a further list on the card; the value's own list has
	// none.
	Label string
	Path  string
	// Filters are name, value pairs.
	Filters []string
	// Window adds from=<start of signals.window>, for a signal that counts
	// audit rows in the window, so that the list shows the rows counted.
	Window bool
}

// SignalKeyLink links keys of one breakdown dimension to a list.
type SignalKeyLink struct {
	Dim string
	// Key links this key only; "" links every key but Except.
	Key, Except string
	List        SignalList
	// As names the filters the key is added to List as: one name takes
	// the key whole; several take its parts split at "/" (a
	// "<flow>/<entity>" key as flow and entity), and a key without as
	// many parts is not linked. None: List is the key's list as it is.
	As []string
}

// SignalRead returns the rows of one of the driver's signal queries. The
// rows are shared by every signal that reads the query: read them, never
// change them.
type SignalRead func(q SignalQuery) ([]SignalRow, error)

// SignalRow is one grouped row of a signal query: a breakdown key and a
// sub-key, a count, and the time the oldest counted item started to count
// (zero when the query has none).
type SignalRow struct {
	Key, Sub string
	N        int64
	Oldest   time.Time
}

// SignalQuery names one of the reads every driver answers for the
// signals, with its own SQL (SignalReader). Each reads indexes and
// maintained columns only, never a scan of every event or effect, so that
// its cost follows the size of what it reports rather than the store's.
// What its rows hold is written on each; a new signal either folds the
// rows of an existing query differently or adds a query here and in both
// drivers.
type SignalQuery string

// The signal queries.
const (
	// SignalQueryLagByFlow: entities whose newest routed order key is ahead
	// of the settled one, a row per flow: Key the flow, Oldest the
	// earliest behind_since.
	SignalQueryLagByFlow SignalQuery = "lag_by_flow"
	// SignalQueryLagLargest: at most one row, the lagging entity with the
	// most routed events ahead of its settled key (pending or dead
	// lettered), among the 100 that have lagged longest, so that the
	// cost stays bounded in an incident: Key "<flow>/<entity>", N those
	// events.
	SignalQueryLagLargest SignalQuery = "lag_largest"
	// SignalQueryUnfinished: events with disposition accepted, a row per
	// source: Key the source, Oldest the earliest received_at.
	SignalQueryUnfinished SignalQuery = "unfinished"
	// SignalQueryDeadline: pending effects (approved, submitting,
	// acknowledged, retry_wait, needs_reconciliation) whose deadline_at
	// has passed at Now or whose deadline_warn_at has come: Key the
	// destination, Sub "passed" or "near", Oldest the earliest passed
	// deadline_at (zero in a near row).
	SignalQueryDeadline SignalQuery = "deadline"
	// SignalQueryUnknown: effects in needs_reconciliation without a
	// mismatch mark, plus submitting effects whose lease ran out at Now:
	// Key the destination, Oldest the earliest updated_at.
	SignalQueryUnknown SignalQuery = "unknown"
	// SignalQueryWindowAudit: audit rows key_conflict, loop_blocked and
	// loop_hop_limit at or after Now-Window: Key the action, Sub the kind
	// (a key_conflict's first word of detail, episode_key or version;
	// the action otherwise), Oldest the earliest.
	SignalQueryWindowAudit SignalQuery = "window_audit"
	// SignalQueryWindowStart: where SignalQueryWindowAudit's window
	// starts, the lowest id of the audit rows at the earliest time at or
	// after Now-Window: one row with N that id, or none when no audit row
	// is that recent. A step of SignalQueryWindowAudit, read by no signal.
	SignalQueryWindowStart SignalQuery = "window_start"
	// SignalQueryDeadEffects: dead effects, a row per owner: Key the owner
	// ("unassigned" for none), Oldest the earliest updated_at.
	SignalQueryDeadEffects SignalQuery = "dead_effects"
	// SignalQueryDeadEvents: dead-lettered events, one row: Key "events",
	// Oldest the earliest received_at.
	SignalQueryDeadEvents SignalQuery = "dead_events"
	// SignalQueryDeadEventsByFlow: dead-lettered events by the flow that
	// dead-lettered them, a row per flow: Key the flow, N its events.
	SignalQueryDeadEventsByFlow SignalQuery = "dead_events_by_flow"
	// SignalQueryMismatch: effects with a mismatch mark: Key the
	// destination, Oldest the earliest mismatch_at.
	SignalQueryMismatch SignalQuery = "mismatch"
	// SignalQueryCompensation: compensation effects not done, resolved or
	// superseded: Key the destination, Oldest the earliest created_at.
	SignalQueryCompensation SignalQuery = "compensation"
)

// SignalQueries returns every signal query, for a driver's tests.
func SignalQueries() []SignalQuery {
	return []SignalQuery{SignalQueryLagByFlow, SignalQueryLagLargest, SignalQueryUnfinished, SignalQueryDeadline,
		SignalQueryUnknown, SignalQueryWindowAudit, SignalQueryWindowStart, SignalQueryDeadEffects, SignalQueryDeadEvents, SignalQueryDeadEventsByFlow, SignalQueryMismatch,
		SignalQueryCompensation}
}

// ErrUnknownSignalQuery is a driver's answer for a query it does not have.
var ErrUnknownSignalQuery = errors.New("unknown signal query")

// SignalRegistry is a checked, ordered set of signals. It has no method
// that changes it.
type SignalRegistry struct {
	defs []SignalDef
}

// signalNameRE is what a signal's name may be: it is a config key, a
// Prometheus label value and a history name, written by people.
var signalNameRE = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// NewSignalRegistry checks defs and returns them as a registry, in the
// order given (the order every reader shows them in).
func NewSignalRegistry(defs ...SignalDef) (*SignalRegistry, error) {
	var errs []error
	seen := map[string]bool{}
	for i, d := range defs {
		switch {
		case !signalNameRE.MatchString(d.Name):
			errs = append(errs, fmt.Errorf("signal %d: name %q: want lower case letters, digits and _, starting with a letter", i, d.Name))
			continue
		case seen[d.Name]:
			errs = append(errs, fmt.Errorf("signal %s: name given twice", d.Name))
		}
		seen[d.Name] = true
		if d.Title == "" || d.Help == "" {
			errs = append(errs, fmt.Errorf("signal %s: title and help are required", d.Name))
		}
		if d.Measure == nil {
			errs = append(errs, fmt.Errorf("signal %s: measure is required", d.Name))
		}
		l := d.Defaults
		if l.Warn < 0 || l.Alert < 0 || l.WarnAge < 0 || l.AlertAge < 0 {
			errs = append(errs, fmt.Errorf("signal %s: a default threshold is negative", d.Name))
		}
		for _, list := range append([]SignalList{d.List}, d.Also...) {
			if !strings.HasPrefix(list.Path, "/") || len(list.Filters)%2 != 0 {
				errs = append(errs, fmt.Errorf("signal %s: list %q: want a path and name, value pairs", d.Name, list.Path))
			}
		}
		for _, k := range d.Keys {
			if k.Dim == "" || !strings.HasPrefix(k.List.Path, "/") || len(k.List.Filters)%2 != 0 {
				errs = append(errs, fmt.Errorf("signal %s: key link %q: want a dimension, a path and name, value pairs", d.Name, k.Dim))
			}
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("signal registry: %w", errors.Join(errs...))
	}
	return &SignalRegistry{defs: slices.Clone(defs)}, nil
}

// Names returns the signals' names in order.
func (r *SignalRegistry) Names() []string {
	out := make([]string, len(r.defs))
	for i, d := range r.defs {
		out[i] = d.Name
	}
	return out
}

// All returns the signals in order. Their lists are the registry's own:
// read them, never change them.
func (r *SignalRegistry) All() []SignalDef { return slices.Clone(r.defs) }

// Lookup returns the named signal.
func (r *SignalRegistry) Lookup(name string) (SignalDef, bool) {
	for _, d := range r.defs {
		if d.Name == name {
			return d, true
		}
	}
	return SignalDef{}, false
}

// BuiltinSignals returns the product's outcome signals in their pinned
// order.
func BuiltinSignals() *SignalRegistry {
	r, err := NewSignalRegistry(revisionLag(), unfinishedEvents(), deadlineRisk(), unknownOutcomes(), keyConflicts(),
		deadLetters(), reconciliationMismatches(), compensationOutstanding(), loopBlocks())
	if err != nil {
		panic(err) // the built-in definitions are checked by TestBuiltinSignals
	}
	return r
}

// The lists the built-in signals link to, built afresh for each registry
// so that no two registries share a slice.
func acceptedEvents() SignalList {
	return SignalList{Path: "/events", Filters: []string{"disposition", string(DispositionAccepted)}}
}

func reconciling() SignalList {
	return SignalList{Path: "/effects", Filters: []string{"state", string(EffectNeedsReconciliation)}}
}

// byDestination links the destination dimension to list filtered by it.
func byDestination(list SignalList) []SignalKeyLink {
	return []SignalKeyLink{{Dim: "destination", List: list, As: []string{"destination"}}}
}

// countBy is the most common measure: every row of q counts, broken down
// by its key as dim.
func countBy(q SignalQuery, dim string) func(*SignalMeasure, SignalRead) error {
	return func(m *SignalMeasure, read SignalRead) error {
		rows, err := read(q)
		if err != nil {
			return err
		}
		for _, r := range rows {
			m.Count(r.N, r.Oldest)
			m.Break(dim, r.Key, r.N)
		}
		return nil
	}
}

// revisionLag: entities whose newest routed order key is ahead of the
// settled one; breakdown "flow", and "largest_gap" with the lagging
// entity that has the most events ahead (SignalQueryLagLargest). An
// entity is behind for seconds during any burst, so only age counts: 5
// minutes is far past a healthy pipeline's latency (warn), 30 minutes
// means something is stuck, such as a dead-lettered newest revision
// (alert).
func revisionLag() SignalDef {
	return SignalDef{
		Name:     SignalRevisionLag,
		Title:    "Revision lag",
		Help:     "Entities whose newest routed event is not applied yet.",
		Defaults: SignalLimits{WarnAge: 5 * time.Minute, AlertAge: 30 * time.Minute},
		Measure: func(m *SignalMeasure, read SignalRead) error {
			if err := countBy(SignalQueryLagByFlow, "flow")(m, read); err != nil || m.Value == 0 {
				return err // nothing lags: no entity to probe
			}
			rows, err := read(SignalQueryLagLargest)
			if err != nil {
				return err
			}
			for _, r := range rows {
				m.Break("largest_gap", r.Key, r.N)
			}
			return nil
		},
		List: acceptedEvents(),
		Keys: []SignalKeyLink{{Dim: "largest_gap", List: SignalList{Path: "/entity"}, As: []string{"flow", "entity"}}},
	}
}

// unfinishedEvents: events with disposition accepted; breakdown
// "source". Age only, as for revision_lag: a burst leaves many events
// briefly unfinished.
func unfinishedEvents() SignalDef {
	return SignalDef{
		Name:     SignalUnfinishedEvents,
		Title:    "Unfinished events",
		Help:     "Events accepted and not yet in a final disposition.",
		Defaults: SignalLimits{WarnAge: 5 * time.Minute, AlertAge: 30 * time.Minute},
		Measure:  countBy(SignalQueryUnfinished, "source"),
		List:     acceptedEvents(),
		Keys:     []SignalKeyLink{{Dim: "source", List: acceptedEvents(), As: []string{"source"}}},
	}
}

// deadlineRisk: pending effects whose deadline_warn_at has come (near) or
// whose deadline_at has passed (passed); Oldest is the earliest passed
// deadline; breakdown "state" (near, passed) and "destination". Near and
// Passed split the value, because a near deadline still leaves time to
// act and a passed one does not: every near deadline warns and every
// passed one alerts, a business deadline being the point of declaring
// one.
func deadlineRisk() SignalDef {
	// Every state: an escalated effect may still be trying ("any" is the
	// lists' filter for every state).
	missed := SignalList{Path: "/effects", Filters: []string{"state", "any", "deadline_missed", "true"}}
	return SignalDef{
		Name:     SignalDeadlineRisk,
		Title:    "Deadline risk",
		Help:     "Pending effects near or past their business deadline.",
		Defaults: SignalLimits{Warn: 1, Alert: 1},
		Measure: func(m *SignalMeasure, read SignalRead) error {
			rows, err := read(SignalQueryDeadline)
			if err != nil {
				return err
			}
			for _, r := range rows {
				m.Count(r.N, r.Oldest)
				m.Break("state", r.Sub, r.N)
				m.Break("destination", r.Key, r.N)
				if r.Sub == "passed" {
					m.Passed += r.N
				} else {
					m.Near += r.N
				}
			}
			return nil
		},
		List: missed,
		Keys: byDestination(missed),
	}
}

// unknownOutcomes: effects whose call may or may not have happened;
// breakdown "destination". Any warns (the reconciler usually settles it
// within minutes); one still unknown after an hour needs a person to look
// at the destination (alert).
func unknownOutcomes() SignalDef {
	return SignalDef{
		Name:     SignalUnknownOutcomes,
		Title:    "Unknown outcomes",
		Help:     "Effects whose call may or may not have happened.",
		Defaults: SignalLimits{Warn: 1, AlertAge: time.Hour},
		Measure:  countBy(SignalQueryUnknown, "destination"),
		List:     reconciling(),
		Keys:     byDestination(reconciling()),
	}
}

// windowAudit measures the window's audit rows of one signal: those whose
// action mine says are its own, broken down by kind.
func windowAudit(mine func(action string) bool) func(*SignalMeasure, SignalRead) error {
	return func(m *SignalMeasure, read SignalRead) error {
		rows, err := read(SignalQueryWindowAudit)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if mine(r.Key) {
				m.Count(r.N, r.Oldest)
				m.Break("kind", r.Sub, r.N)
			}
		}
		return nil
	}
}

// keyConflicts: audit rows key_conflict in the window; breakdown "kind"
// (episode_key, version). Each is a key design or routing problem to look
// into (warn); the unique index already kept the business state correct,
// so it does not alert.
func keyConflicts() SignalDef {
	return SignalDef{
		Name:     SignalKeyConflicts,
		Title:    "Key conflicts",
		Help:     "Episode keys or versions that collided, in the window.",
		Defaults: SignalLimits{Warn: 1},
		Measure:  windowAudit(func(action string) bool { return action == ActionKeyConflict }),
		List:     SignalList{Path: "/audit", Filters: []string{"action", ActionKeyConflict}, Window: true},
	}
}

// deadLetters: dead effects plus dead-lettered events; breakdown "owner"
// (an effect's, else its destination's; an event's flows' owners, the
// event counted once under each owner of a flow that dead-lettered it)
// and "kind" (effects, events). Each waits for a person (warn);
// one left for a day means the exception queue is not being worked
// (alert).
func deadLetters() SignalDef {
	deadEffects := SignalList{Path: "/effects", Filters: []string{"state", string(EffectDead)}}
	deadEvents := SignalList{Label: "dead-lettered events", Path: "/events",
		Filters: []string{"disposition", string(DispositionDeadLettered)}}
	return SignalDef{
		Name:     SignalDeadLetters,
		Title:    "Dead letters",
		Help:     "Dead effects and dead-lettered events, waiting for a person.",
		Defaults: SignalLimits{Warn: 1, AlertAge: 24 * time.Hour},
		Measure: func(m *SignalMeasure, read SignalRead) error {
			rows, err := read(SignalQueryDeadEffects)
			if err != nil {
				return err
			}
			for _, r := range rows {
				m.Count(r.N, r.Oldest)
				m.Break("owner", r.Key, r.N)
				m.Break("kind", "effects", r.N)
			}
			if rows, err = read(SignalQueryDeadEvents); err != nil {
				return err
			}
			for _, r := range rows {
				m.Count(r.N, r.Oldest)
				m.Break("kind", "events", r.N)
			}
			if rows, err = read(SignalQueryDeadEventsByFlow); err != nil {
				return err
			}
			owners := map[string]int64{}
			for _, r := range rows {
				owners[m.flowOwner(r.Key)] += r.N
			}
			for o, n := range owners {
				m.Break("owner", o, n)
			}
			return nil
		},
		List: deadEffects,
		Also: []SignalList{deadEvents},
		Keys: []SignalKeyLink{
			{Dim: "kind", Key: "effects", List: deadEffects},
			{Dim: "kind", Key: "events", List: deadEvents},
			{Dim: "owner", Except: "unassigned", List: deadEffects, As: []string{"owner"}},
		},
	}
}

// reconciliationMismatches: effects with a mismatch mark; breakdown
// "destination". The destination disagrees with a done effect: the
// business state is wrong now (alert at 1).
func reconciliationMismatches() SignalDef {
	return SignalDef{
		Name:     SignalReconciliationMismatches,
		Title:    "Reconciliation mismatches",
		Help:     "Done effects the destination does not have.",
		Defaults: SignalLimits{Alert: 1},
		Measure:  countBy(SignalQueryMismatch, "destination"),
		List:     reconciling(),
		Also: []SignalList{{Label: "mismatches found", Path: "/audit",
			Filters: []string{"action", ActionReconciliationMismatch}}},
		Keys: byDestination(reconciling()),
	}
}

// compensationOutstanding: compensation effects not done, resolved or
// superseded; breakdown "destination". An undo in flight warns; one not
// done within an hour leaves a half-undone business state (alert).
func compensationOutstanding() SignalDef {
	var states []string
	for _, s := range EffectStates() {
		switch s {
		case EffectDone, EffectResolved, EffectSuperseded:
			continue
		}
		states = append(states, string(s))
	}
	outstanding := SignalList{Path: "/effects", Filters: []string{"state", strings.Join(states, ","), "compensations", "true"}}
	return SignalDef{
		Name:     SignalCompensationOutstanding,
		Title:    "Compensation outstanding",
		Help:     "Compensations approved and not finished.",
		Defaults: SignalLimits{Warn: 1, AlertAge: time.Hour},
		Measure:  countBy(SignalQueryCompensation, "destination"),
		List:     outstanding,
		Keys:     byDestination(outstanding),
	}
}

// loopBlocks: audit rows loop_blocked and loop_hop_limit in the window;
// breakdown "kind" (the action). The guard held, but a flow is feeding
// itself (warn).
func loopBlocks() SignalDef {
	return SignalDef{
		Name:     SignalLoopBlocks,
		Title:    "Loop blocks",
		Help:     "Feedback loops and hop limits stopped, in the window.",
		Defaults: SignalLimits{Warn: 1},
		Measure:  windowAudit(func(action string) bool { return action != ActionKeyConflict }),
		List:     SignalList{Path: "/audit", Filters: []string{"action", ActionLoopBlocked}, Window: true},
		Also: []SignalList{{Label: "hop limits", Path: "/audit", Filters: []string{"action", ActionLoopHopLimit},
			Window: true}},
		Keys: []SignalKeyLink{{Dim: "kind", List: SignalList{Path: "/audit", Window: true}, As: []string{"action"}}},
	}
}
