package flow

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // a second connection that installs the refusing rules

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
			s, _ := openSQLite(t)
			return s
		},
		"postgres": func(t *testing.T) store.Store {
			s, _ := openPostgres(t)
			return s
		},
	}
}

// Each opener also returns a function that runs DDL on the store's
// database behind its back.
func openSQLite(t *testing.T) (store.Store, func(ddl ...string)) {
	path := filepath.Join(t.TempDir(), "flow.db")
	s, err := sqlite.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, func(ddl ...string) {
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, q := range ddl {
			if _, err := db.Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
	}
}

func openPostgres(t *testing.T) (store.Store, func(ddl ...string)) {
	url := pgtest.NewDatabase(t)
	s, err := postgres.Open(context.Background(), url, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, func(ddl ...string) {
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		for _, q := range ddl {
			if _, err := conn.Exec(context.Background(), q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
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

// ruledFixture is the poison flows on a fresh store of driver ("sqlite"
// or "postgres") with rules planted in its database by ddl; its engine is
// the caller's to make.
func ruledFixture(t *testing.T, driver string, ddl ...string) *fixture {
	t.Helper()
	open := map[string]func(t *testing.T) (store.Store, func(ddl ...string)){"sqlite": openSQLite, "postgres": openPostgres}[driver]
	cfg, err := config.Parse("flow.yaml", []byte(poisonFlows), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	st, exec := open(t)
	if _, err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	exec(ddl...)
	return &fixture{t: t, st: st, clk: clock.NewFake(t0), cfg: cfg}
}

// A value the database refuses that no check foresaw (here a rule planted
// in the database: a work row for entity "refused-entity", a state
// holding "refused-state") fails its page's transaction. The engine then
// routes and settles that page one event at a time, dead-letters the
// event refused alone with the database's reason, and goes on: the other
// events of the page, and the earlier events of the same entity, are
// applied.
func TestRefusedValuesIsolateTheirEvent(t *testing.T) {
	rules := map[string][]string{
		"sqlite": {
			`CREATE TRIGGER refuse_entity BEFORE INSERT ON work WHEN NEW.entity = 'refused-entity'
				BEGIN SELECT RAISE(ABORT, 'refused by rule'); END`,
			`CREATE TRIGGER refuse_state BEFORE UPDATE ON entities WHEN NEW.state LIKE '%refused-state%'
				BEGIN SELECT RAISE(ABORT, 'refused by rule'); END`,
		},
		"postgres": {
			`ALTER TABLE work ADD CONSTRAINT refuse_entity CHECK (entity <> 'refused-entity') NOT VALID`,
			`ALTER TABLE entities ADD CONSTRAINT refuse_state CHECK (state::text NOT LIKE '%refused-state%') NOT VALID`,
		},
	}
	for name := range rules {
		t.Run(name, func(t *testing.T) {
			f := ruledFixture(t, name, rules[name]...)
			f.eng = New(f.cfg, f.st, Options{Clock: f.clk})
			ev := func(order string, rev int, note string) string {
				return `{"order_id":"` + order + `","ticket":"t-` + order + `","seq":"1","revision":` + string(rune('0'+rev)) +
					`,"note":"` + note + `","status":"paid","tag":"a"}`
			}
			f.send("shop", "e1", ev("o1", 1, "fine"))
			f.send("shop", "e-entity", ev("refused-entity", 1, "fine"))
			// PostgreSQL writes an entity's state once per page, the last
			// one: the refused state is the page's last.
			f.send("shop", "e2", ev("o1", 2, "fine"))
			f.send("shop", "e3", ev("o1", 3, "refused-state"))
			f.send("shop", "e4", ev("o2", 1, "fine"))
			f.drain()

			for id, want := range map[string]string{
				"e-entity": "routing: the database refused a value of this event",
				"e3":       "processing: the database refused a value of this event",
			} {
				got := f.event("shop", id)
				if got.Disposition != store.DispositionDeadLettered {
					t.Errorf("%s: %s, want dead_lettered", id, got.Disposition)
				}
				found := false
				for _, r := range got.Routes {
					found = found || (r.Flow == "orders" && strings.Contains(r.Reason, want))
				}
				if !found {
					t.Errorf("%s: routes %+v, want the orders route's reason to say %q", id, got.Routes, want)
				}
			}
			for _, id := range []string{"e1", "e2", "e4"} {
				if d := f.disposition("shop", id); d != "applied" {
					t.Errorf("%s: %s, want applied", id, d)
				}
			}
			if got := sortedWords(strings.Join(f.effects("orders"), " ")); got != "orders:o1:r1:sync=superseded orders:o1:r2:sync=approved orders:o2:r1:sync=approved" {
				t.Fatalf("effects: %s", got)
			}
		})
	}
}

// A lone event whose value the database refuses, found by a routing take
// that settles its entity's work itself (PostgreSQL): the settle fails the
// routing transaction, the page is routed again without it, and the
// processor dead-letters the event with the database's reason, as it
// would have without the settle in routing.
func TestRefusedValueSettledInRoutingDeadLetters(t *testing.T) {
	rules := map[string]string{
		"sqlite": `CREATE TRIGGER refuse_state BEFORE UPDATE ON entities WHEN NEW.state LIKE '%refused-state%'
			BEGIN SELECT RAISE(ABORT, 'refused by rule'); END`,
		"postgres": `ALTER TABLE entities ADD CONSTRAINT refuse_state CHECK (state::text NOT LIKE '%refused-state%') NOT VALID`,
	}
	for name := range rules {
		t.Run(name, func(t *testing.T) {
			f := ruledFixture(t, name, rules[name])
			startCounted(t, f, 4)
			f.send("shop", "e-bad", `{"order_id":"o9","ticket":"t-o9","seq":"1","revision":1,"note":"refused-state","status":"paid","tag":"a"}`)
			f.eng.WakeRouting()
			deadline := time.Now().Add(30 * time.Second)
			for f.disposition("shop", "e-bad") != string(store.DispositionDeadLettered) {
				if time.Now().After(deadline) {
					t.Fatalf("e-bad is %s after 30 s, want dead_lettered", f.disposition("shop", "e-bad"))
				}
				time.Sleep(2 * time.Millisecond)
			}
			found := false
			for _, r := range f.event("shop", "e-bad").Routes {
				found = found || (r.Flow == "orders" && strings.Contains(r.Reason, "processing: the database refused a value of this event"))
			}
			if !found {
				t.Errorf("routes %+v, want the orders route's reason to name the database's refusal", f.event("shop", "e-bad").Routes)
			}
		})
	}
}
