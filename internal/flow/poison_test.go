package flow

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/pgtest"
	"github.com/hookledger/hookledger/internal/store/postgres"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// poisonFlows computes an entity, a tie-break, a state, a request body and
// a request header from payload fields, so that a hostile value can reach
// each of them.
const poisonFlows = `sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
destinations:
  - name: crm
    base_url: https://crm.example
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.revision}
    state: '{"note": event.note, "status": event.status}'
    effects:
      - name: sync
        destination: crm
        request:
          path: '"/orders/" + pathEscape(entity)'
          body: state
          headers: {X-Tag: 'event.tag'}
  - name: tickets
    source: shop
    events: ["order.*"]
    entity: event.ticket
    version: {mode: occurred_at, tie_break: event.seq}
    state: event.status
`

// stores opens an empty store of each driver.
func stores() map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"sqlite": func(t *testing.T) store.Store {
			s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "flow.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
		"postgres": func(t *testing.T) store.Store {
			s, err := postgres.Open(context.Background(), pgtest.NewDatabase(t), 4)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		},
	}
}

// A value that no driver can store, or no destination can be sent, is
// refused at the step that computes it: the event is dead-lettered with a
// reason naming the field, the same way on both drivers, and every other
// event goes on. On PostgreSQL an entity holding U+0000 used to fail
// routing for every event at every poll, and a NUL copied into a state
// retried its entity forever.
func TestPoisonValuesDeadLetterTheirEventOnly(t *testing.T) {
	for name, open := range stores() {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse("flow.yaml", []byte(poisonFlows), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			st := open(t)
			if _, err := st.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			clk := clock.NewFake(t0)
			f := &fixture{t: t, st: st, clk: clk, cfg: cfg, eng: New(cfg, st, Options{Clock: clk})}

			healthy := `{"order_id":"o-%s","ticket":"t-%s","seq":"1","revision":1,"note":"ok","status":"paid","tag":"a"}`
			cases := []struct {
				id, body string
				// reasons, per flow, that the dead letter must give
				want map[string]string
			}{
				{"nul-entity", `{"order_id":"pg\u0000ord","ticket":"t1","seq":"1","revision":1,"note":"n","status":"x","tag":"a"}`,
					map[string]string{"orders": "entity: holds a NUL character"}},
				{"ctl-entity", `{"order_id":"o\u0085x","ticket":"t2","seq":"1","revision":1,"note":"n","status":"x","tag":"a"}`,
					map[string]string{"orders": "entity: holds the control character U+0085"}},
				{"nul-tiebreak", `{"order_id":"o3","ticket":"t3","seq":"s\u0000","revision":1,"note":"n","status":"x","tag":"a"}`,
					map[string]string{"tickets": "version.tie_break: holds a NUL character"}},
				{"nul-state", `{"order_id":"o4","ticket":"t4","seq":"1","revision":1,"note":"a\u0000b","status":"x","tag":"a"}`,
					map[string]string{"orders": "state: holds a string with U+0000"}},
				{"nul-ticket-state", `{"order_id":"o5","ticket":"t5","seq":"1","revision":1,"note":"n","status":"x\u0000","tag":"a"}`,
					map[string]string{"orders": "state: holds a string with U+0000", "tickets": "state: holds a string with U+0000"}},
				{"crlf-header", `{"order_id":"o6","ticket":"t6","seq":"1","revision":1,"note":"n","status":"x","tag":"a\r\nX-Evil: 1"}`,
					map[string]string{"orders": "effect sync: request.headers.X-Tag: value contains a control character"}},
				{"huge-number", `{"order_id":"o7","ticket":"t7","seq":"1","revision":1,"note":"n","status":1e400,"tag":"a"}`,
					map[string]string{"orders": "payload: decode JSON: number 1e400 is beyond the range of a 64-bit float", "tickets": "payload: decode JSON: number 1e400"}},
			}
			for _, c := range cases {
				f.send("shop", c.id, c.body)
			}
			f.send("shop", "healthy", strings.ReplaceAll(healthy, "%s", "h"))
			f.drain()

			for _, c := range cases {
				ev := f.event("shop", c.id)
				if ev.Disposition != store.DispositionDeadLettered {
					t.Errorf("%s: disposition %s, want dead_lettered", c.id, ev.Disposition)
				}
				for flow, want := range c.want {
					got := ""
					for _, r := range ev.Routes {
						if r.Flow == flow {
							got = r.Reason
						}
					}
					if !strings.Contains(got, want) {
						t.Errorf("%s: flow %s's reason %q, want it to say %q", c.id, flow, got, want)
					}
				}
			}
			if d := f.disposition("shop", "healthy"); d != "applied" {
				t.Fatalf("the healthy event after the poison: %s, want applied", d)
			}
			// The tie-break concerns tickets alone: orders applied that event.
			if got := sortedWords(strings.Join(f.effects("orders"), " ")); got != "orders:o-h:r1:sync=approved orders:o3:r1:sync=approved" {
				t.Fatalf("effects of orders: %s, want only the healthy events'", got)
			}
		})
	}
}

// event returns the stored event with its routes.
func (f *fixture) event(source, eventID string) *store.Event {
	f.t.Helper()
	r, err := f.st.EventList(context.Background(), &store.EventListParams{Source: source, EventID: eventID, WithRoutes: true})
	if err != nil || len(r.Events) != 1 {
		f.t.Fatalf("event %s: %v %v", eventID, r, err)
	}
	return r.Events[0]
}
