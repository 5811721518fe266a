// Package sim is the deterministic simulation of the ordered processor and
// the effect ledger (testing ladder, step 5). Its tests generate, from a
// seed, a world of entities whose business revisions are published by a
// source, then a schedule that delivers their webhooks duplicated,
// redelivered, semantically duplicated and reordered, runs several engines
// on one store concurrently, abandons leases, lets zombies try to write
// with them, and replays at random points. After each run they drain the
// engines and check the invariants: the projection holds the newest
// version, every effect exists exactly once per episode key and only for
// applied versions, replays create nothing new, and every event is settled
// consistently with business order. Last, the store's own offline audit
// (InvariantCheck, what hookledger check runs) must find nothing on the
// drained store. While a run goes, a watch on the store checks that every
// work item applied was the first in business order of the entity's events
// already waiting (an engine that followed arrival order would lose the
// effects of the revisions it settles stale).
//
// # Effects inserted again
//
// In one seed in four a third flow, orders_open, takes whether the order
// is open as its version: an order that closes and opens again re-applies a
// version whose effect is already in the ledger, and the store must keep
// its one row (the checks count them; without ON CONFLICT on the episode
// key the apply fails and the run does not drain).
//
// # Delivery
//
// In one seed in four, one or two delivery workers (deliver.Worker.Step,
// on the run's fake clock) call the effects' destinations, in the schedule
// beside the engines and in parallel with them, and while draining. The
// destinations are one fault-injecting server (delivertest) that answers
// from a seeded mix: success, 500 before or after execution began (a saved
// 500 is replayed for the key), 429 with Retry-After in seconds,
// milliseconds or as a date, a hang (the call takes the destination's
// timeout on the fake clock, which may run leases out, then the connection
// is cut) or a reset of the connection before or after the work, a 200
// reporting a failure (also per record of a batch), and 400. The four
// destinations settle an unknown outcome differently: idempotency key with
// replayed answers marked, lookup, a short idempotency window, nothing (a
// person). Delivery zombies claim an effect and die; after their lease
// they try to settle it, and fencing must refuse them. A tap between each
// worker and the ledger and network records every claim, the calls made
// under it and how it ended. After draining, the checks (checkDelivery)
// require the destination to have done each episode key's work at most
// once (exactly once when done), every effect to end done or superseded,
// or in the exception queue with a class and a reason and a person told,
// at most one call per claim and none for a claim that resumed an unknown
// outcome, and the attempts rows to equal the calls the destination
// received (the equation is spelled out at claimCalls).
//
// # Version order at the destination
//
// checkVersionOrder reads the destination's calls in arrival order: for
// every flow, entity and effect name, once a version's call has arrived,
// no call of an older version may follow (the older state would overwrite
// the newer one there). Applying a version supersedes the older effects
// still waiting for a call, approved or retry_wait; an older effect whose
// call was in flight when the newer version was applied is not superseded,
// and when its call fails or its worker dies it goes out after the newer
// one. Those calls are counted in the summary, not failed, until the
// ledger closes that gap.
//
// # Hostile values
//
// In one seed in three, one or two events carry a hostile value (a NUL,
// bytes that are not UTF-8, a C0 or C1 control, U+2028, a lone surrogate
// escape, 1e400, -0, 2^63, deep nesting, a long string, ids of 255, 256
// and 600 bytes) in a field the flows compute from: the event id, the
// entity, the revision or the state. They go through the real receiver,
// signed, on an order of their own that the source API knows, at random
// points of the schedule (drawn from a stream of their own, so that a
// seed's healthy schedule does not change). checkHostile holds each to
// the engine's rule: refused at the door (400 naming the field, nothing
// stored), or stored and then dead-lettered with a reason naming the field
// (or the number beyond float64), or, for a harmless value, applied in
// every flow; and every check of the healthy events still holds.
//
// # Store faults
//
// In half of the SQLite seeds, one write statement in 25 or in 80 fails
// (sqlite.Options.Faults) while the schedule runs: any statement of an
// inbox commit, a routing, a claim, an apply, a settle, a release or a
// replay. The failing caller's transaction must roll back whole while the
// others sharing its commit go on; the simulation treats the failure as
// its caller would (the sender redelivers, the engine defers the entity,
// the worker's claim runs out and is reconciled) and stops injecting
// before the final drain. Besides the invariants above, checkWhole looks
// for anything half-applied: deliveries counted but not stored, a
// projection that is not its last applied settlement, an effect without
// its audit row, an attempts row without its settle, a state its audit
// trail does not lead to. PostgreSQL runs the same schedules, delivery
// included, without statement faults.
//
// The summary lines of a run count what it exercised (faults answered,
// hangs, abandoned claims, re-inserted keys, store faults by statement),
// so that a green run can be told from one that never got there. A failing
// seed prints the command that reruns it alone. The package has no
// production code; it lives in _test.go files.
package sim
