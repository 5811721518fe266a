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
// consistently with business order. While a run goes, a watch on the store
// checks that every work item applied was the first in business order of
// the entity's events already waiting (an engine that followed arrival
// order would lose the effects of the revisions it settles stale).
//
// A failing seed prints the command that reruns it alone. The package has
// no production code; it lives in _test.go files.
package sim
