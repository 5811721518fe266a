package sim

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
)

// The business states an order goes through. Revisions may repeat a state
// or jump between them: the processor must not assume a state machine.
var states = []string{"CREATED", "CONFIRMED", "SHIPPED", "CANCELLED"}

// entity is one order of the world: the states of its revisions 1..n.
type entity struct {
	id     string
	states []string // states[r-1] is the state of revision r
	// fail503 is how many refetches of it the source API answers with 503
	// before it recovers (a transient failure defers the entity).
	fail503 int
}

// world is everything a seed decides before the schedule starts.
type world struct {
	seed     uint64
	entities []*entity
	engines  int // how many engines share the store
	workers  []int
	// dworkers is each delivery worker's number of slots; none in the
	// seeds that leave the effects undelivered (three in four: delivering
	// doubles a seed's cost, and the processor's schedules need no calls).
	dworkers []int
	// faultEvery makes one write statement in about that many fail while
	// the schedule runs (0: none).
	faultEvery int
	// open adds the flow orders_open (whose versions come back), in one
	// seed in four.
	open bool
}

func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func genWorld(seed uint64, r *rand.Rand) *world {
	w := &world{seed: seed, engines: 2 + r.IntN(2)}
	for range w.engines {
		w.workers = append(w.workers, 1+r.IntN(3))
	}
	n := 2 + r.IntN(4) // 2..5 entities
	for i := range n {
		e := &entity{id: fmt.Sprintf("ord-%d", i+1)}
		revs := 1 + r.IntN(4) // 1..4 revisions
		for k := range revs {
			s := states[r.IntN(len(states))]
			if k == 0 && r.IntN(3) > 0 {
				s = "CREATED" // most orders start created, not all are seen so
			}
			e.states = append(e.states, s)
		}
		if r.IntN(4) == 0 {
			e.fail503 = 1 + r.IntN(2)
		}
		w.entities = append(w.entities, e)
	}
	if r.IntN(4) == 0 {
		for range 1 + r.IntN(2) {
			w.dworkers = append(w.dworkers, 1+r.IntN(4))
		}
	}
	w.open = r.IntN(4) == 0
	// Half the seeds run without store faults, so that faults never
	// hide what a clean run would show.
	if r.IntN(2) == 0 {
		w.faultEvery = []int{25, 80}[r.IntN(2)]
	}
	return w
}

// eventBody is the webhook payload of one revision. A semantic duplicate
// (a second event id for the same revision) carries the same business
// content under another event id.
func eventBody(eventID string, e *entity, rev int) []byte {
	st := e.states[rev-1]
	b, _ := json.Marshal(map[string]any{
		"eventId":  eventID,
		"type":     "order." + strings.ToLower(st),
		"order_id": e.id,
		"revision": rev,
		"intent":   st,
	})
	return b
}

// truth is the source's current state of every entity, as its API answers
// it to refetches. It changes while engines run.
type truth struct {
	mu    sync.Mutex
	rev   map[string]int    // published revision per entity (0: none)
	state map[string]string // state of that revision
	fails map[string]int    // 503s still to answer per entity
	calls int
}

func newTruth(w *world) *truth {
	t := &truth{rev: map[string]int{}, state: map[string]string{}, fails: map[string]int{}}
	for _, e := range w.entities {
		t.fails[e.id] = e.fail503
	}
	return t
}

func (t *truth) publish(e *entity, rev int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rev[e.id], t.state[e.id] = rev, e.states[rev-1]
}

// apiServer routes the source API of whichever run is current to its
// truth, so one loopback server serves every seed of a goroutine.
type apiServer struct {
	mu  sync.Mutex
	cur *truth
}

func (a *apiServer) set(t *truth) {
	a.mu.Lock()
	a.cur = t
	a.mu.Unlock()
}

func (a *apiServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	t := a.cur
	a.mu.Unlock()
	id, ok := strings.CutPrefix(r.URL.Path, "/orders/")
	if t == nil || !ok {
		http.NotFound(w, r)
		return
	}
	t.mu.Lock()
	t.calls++
	if t.fails[id] > 0 {
		t.fails[id]--
		t.mu.Unlock()
		http.Error(w, "try again later", http.StatusServiceUnavailable)
		return
	}
	rev, st := t.rev[id], t.state[id]
	t.mu.Unlock()
	if rev == 0 {
		// Never published: no webhook for it can exist yet, so a refetch
		// asking for it is a bug the 404 (a dead letter) makes visible.
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "status": st, "seq": rev})
}

// simSecret is the source's signing secret.
const simSecret = "sim-secret"

// simConfig is the flows under test, on one source whose API is the
// simulated truth, and the four destinations the delivery workers call,
// all served by the run's fault-injecting destination at destURL. They
// differ in how an unknown outcome can be settled: notifier dedupes on an
// idempotency key and marks replayed answers (Stripe), crm answers a
// lookup, warehouse dedupes for a short window only, carrier does neither
// (an unknown outcome goes to a person). Each effect sends its episode key
// in X-Episode-Key, which the destination counts work by when no
// idempotency key carries it.
func simConfig(apiURL, destURL string, open bool) string {
	hidden := `
    classify:
      - {status: 200, body_contains: '"success":false', class: hidden_failure, reason: the answer reports a failure}
      - {when: 'status == 200 && body.results.exists(r, r.status == "error")', class: hidden_failure, reason: a record of the batch failed}`
	dest := func(name, unit, extra string) string {
		return `
  - name: ` + name + `
    base_url: ` + destURL + `
    allow_private_networks: true
    timeout: ` + destTimeout.String() + `
    retry: {base: 1s, factor: 2, cap: 8s, attempts: 3, redrive: [1m, 3m]}
    retry_after: {unit: ` + unit + `, max: 2m}
    max_in_flight: 3` + extra + hidden
	}
	return `destinations:` +
		dest("notifier", "seconds", `
    idempotency: {header: Idempotency-Key, window: 10m, replayed_header: Idempotent-Replayed}`) +
		dest("crm", "milliseconds", `
    lookup: {path: '"/effects/" + pathEscape(episode_key)', found: status == 200, ref: body.id}`) +
		dest("warehouse", "seconds", `
    idempotency: {header: Idempotency-Key, window: 2m}`) +
		dest("carrier", "seconds", "") + `
sources:
  - name: shop
    kind: hmac
    secrets: [` + simSecret + `]
    hmac: {header: X-Signature}
    api:
      base_url: ` + apiURL + `
      allow_private_networks: true
      timeout: 10s
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version:
      mode: revision
      revision: event.revision
    state: event.intent
    effects:
      - name: notify_created
        when: state == "CREATED"
        destination: notifier
        request:
          path: '"/notify/created"'
          ` + key(flowRev, `"r" + string(version)`, "notify_created") + `
          body: '{"order": entity, "revision": version}'
      - name: notify_cancelled
        when: state == "CANCELLED"
        destination: notifier
        request:
          path: '"/notify/cancelled"'
          ` + key(flowRev, `"r" + string(version)`, "notify_cancelled") + `
          body: '{"order": entity}'
      - name: upsert_order
        destination: crm
        request:
          path: '"/orders/" + pathEscape(entity)'
          ` + key(flowRev, `"r" + string(version)`, "upsert_order") + `
          body: '{"order": entity, "state": state}'
  - name: orders_truth
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version:
      mode: refetch
      path: '"/orders/" + entity'
      hash: [object.status, object.seq]
    state: object
    effects:
      - name: sync_warehouse
        destination: warehouse
        request:
          path: '"/sync/" + pathEscape(entity)'
          ` + key(flowTruth, "version", "sync_warehouse") + `
          body: state
      - name: ship
        when: state.status == "SHIPPED"
        destination: carrier
        request:
          path: '"/shipments"'
          ` + key(flowTruth, "version", "ship") + `
          body: '{"order": entity}'
` + openFlow(open)
}

// key is an effect request's header that names its episode key (the
// version is an expression).
func key(flow, version, effect string) string {
	return `headers: {X-Episode-Key: '"` + flow + `:" + entity + ":" + ` + version + ` + ":` + effect + `"'}`
}

// openExpr is whether a refetched order is open, for orders_open.
const openExpr = `object.status in ["CREATED", "CONFIRMED"]`

// isOpen mirrors openExpr.
func isOpen(status string) bool { return status == "CREATED" || status == "CONFIRMED" }

// revisionEffects mirrors the `when` of each effect of the revision flow,
// for the invariants.
func revisionEffects(state string) []string {
	out := []string{"upsert_order"}
	switch state {
	case "CREATED":
		out = append(out, "notify_created")
	case "CANCELLED":
		out = append(out, "notify_cancelled")
	}
	return out
}

func truthEffects(status string) []string {
	out := []string{"sync_warehouse"}
	if status == "SHIPPED" {
		out = append(out, "ship")
	}
	return out
}

// openFlow is the flow whose version is whether the order is open: an
// order that closes and is open again re-applies a version whose effect is
// already in the ledger (its episode key is inserted again and must stay
// one row). Not every seed has it: it adds a third of the processing.
func openFlow(open bool) string {
	if !open {
		return ""
	}
	return `  - name: orders_open
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version:
      mode: refetch
      path: '"/orders/" + entity'
      hash: ['` + openExpr + `']
    state: '` + openExpr + `'
    effects:
      - name: open_changed
        destination: carrier
        request:
          path: '"/open"'
          ` + key(flowOpen, "version", "open_changed") + `
          body: '{"order": entity, "open": state}'
`
}
