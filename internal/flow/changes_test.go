package flow

import (
	"context"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// changesFlow sends one state to Braze (which sends changes only), to a
// Braze destination that opted out, and to a plain CRM.
const changesFlow = `sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
destinations:
  - name: braze
    preset: braze
    base_url: https://rest.iad-01.braze.com
  - name: braze_all
    preset: braze
    base_url: https://rest.iad-01.braze.com
    send_changes_only: false
  - name: crm
    base_url: https://crm.example
flows:
  - name: plans
    source: shop
    events: ["order.*"]
    entity: event.user
    version: {mode: revision, revision: event.rev}
    state: '{"plan": event.plan, "seats": event.seats}'
    effects:
      - name: track
        destination: braze
        request: {path: '"/users/track"', body: '{"attributes": [{"external_id": entity, "plan": state.plan, "seats": state.seats}]}'}
      - name: track_all
        destination: braze_all
        request: {path: '"/users/track"', body: '{"attributes": [{"external_id": entity, "plan": state.plan}]}'}
      - name: sync
        destination: crm
        request: {path: '"/contacts"', body: state}
`

// Send changes only, through the flow engine and a real store: an event
// whose state equals the applied one creates no effect for a Braze
// destination (and says why in the audit trail), while every other
// destination gets its effect; a changed state is sent again.
func TestSendChangesOnlySkipsUnchangedStates(t *testing.T) {
	// PostgreSQL hands the projection back as jsonb, with its own
	// spacing: equal states must still compare equal.
	for name, open := range stores() {
		t.Run(name, func(t *testing.T) {
			cfg, err := config.Parse("flow.yaml", []byte(changesFlow), func(string) (string, bool) { return "", false })
			if err != nil {
				t.Fatal(err)
			}
			st := open(t)
			if _, err := st.Migrate(context.Background()); err != nil {
				t.Fatal(err)
			}
			clk := clock.NewFake(t0)
			f := &fixture{t: t, st: st, clk: clk, cfg: cfg, eng: New(cfg, st, Options{Clock: clk})}

			f.send("shop", "e1", `{"user":"u1","rev":1,"plan":"pro","seats":3}`)
			f.drain()
			// The same state, its keys in another order: no change.
			f.send("shop", "e2", `{"seats":3,"rev":2,"plan":"pro","user":"u1"}`)
			f.drain()
			// r1's Braze effect still carries the state to send.
			if got := sortedWords(strings.Join(f.effects("plans"), " ")); got != "plans:u1:r1:sync=superseded plans:u1:r1:track=approved plans:u1:r1:track_all=superseded "+
				"plans:u1:r2:sync=approved plans:u1:r2:track_all=approved" {
				t.Fatalf("effects after the unchanged state: %s", got)
			}
			f.send("shop", "e3", `{"user":"u1","rev":3,"plan":"team","seats":3}`)
			f.drain()
			for _, id := range []string{"e1", "e2", "e3"} {
				if d := f.disposition("shop", id); d != "applied" {
					t.Fatalf("%s: %s, want applied", id, d)
				}
			}
			got := strings.Join(f.effects("plans"), " ")
			want := strings.Join([]string{
				"plans:u1:r1:sync=superseded", "plans:u1:r1:track=superseded", "plans:u1:r1:track_all=superseded",
				"plans:u1:r2:sync=superseded", "plans:u1:r2:track_all=superseded",
				"plans:u1:r3:sync=approved", "plans:u1:r3:track=approved", "plans:u1:r3:track_all=approved",
			}, " ")
			if sorted := sortedWords(got); sorted != want {
				t.Fatalf("effects\n %s\nwant\n %s", sorted, want)
			}
			rows, err := st.AuditList(context.Background(), &store.AuditListParams{Action: "effect_skipped", Limit: 10})
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != 1 || rows[0].EventID != "e2" ||
				rows[0].Detail != "plans:u1:r2:track: not created: destination braze sends changes only, and the state equals the one applied at r1" {
				t.Fatalf("effect_skipped audit = %d rows %+v", len(rows), rows)
			}
		})
	}
}

// The first state of an entity is always a change, even a null one that
// equals what an entity without an applied version holds.
func TestSendChangesOnlySendsTheFirstState(t *testing.T) {
	f := newFixture(t, `sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
destinations:
  - name: braze
    preset: braze
    base_url: https://rest.iad-01.braze.com
flows:
  - name: plans
    source: shop
    events: ["order.*"]
    entity: event.user
    version: {mode: revision, revision: event.rev}
    state: 'null'
    effects:
      - name: track
        destination: braze
        request: {path: '"/users/track"', body: '{"events": [{"external_id": entity, "name": "signed_up"}]}'}
`)
	f.send("shop", "e1", `{"user":"u1","rev":1}`)
	f.drain()
	f.send("shop", "e2", `{"user":"u1","rev":2}`)
	f.drain()
	if got := strings.Join(f.effects("plans"), " "); got != "plans:u1:r1:track=approved" {
		t.Fatalf("effects %s, want only the first", got)
	}
}

func sortedWords(s string) string {
	w := strings.Fields(s)
	for i := range w {
		for j := i + 1; j < len(w); j++ {
			if w[j] < w[i] {
				w[i], w[j] = w[j], w[i]
			}
		}
	}
	return strings.Join(w, " ")
}
