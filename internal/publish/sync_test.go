package publish

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/store"
)

// The config file's endpoints are written to the store at every start:
// their spec from the file, their state kept unless the file says
// enabled: false; a generated key survives restarts; an endpoint removed
// from the file is deleted, or only disabled while it has messages to
// deliver, which then park at once.
func TestSyncConfigEndpoints(t *testing.T) { eachStore(t, testSyncConfigEndpoints) }

func testSyncConfigEndpoints(t *testing.T, storeURL string) {
	rcv := newReceiver(t)
	file := func(extra string) string {
		return `endpoints:
  - id: kept
    url: ` + rcv.srv.URL + `
    allow_private_networks: true
    types: ["a.*"]
  - id: quiet
    url: https://quiet.example/hooks
    types: ["q.*"]
` + extra
	}
	e := newEnv(t, storeURL, file(`  - id: busy
    url: `+rcv.srv.URL+`
    allow_private_networks: true
    types: ["z.*"]
  - id: idle
    url: https://idle.example/hooks
    types: ["i.*"]
`))
	generated := e.stored("kept").Secrets
	if len(generated) != 1 || !strings.HasPrefix(generated[0].Key, "whsec_") || e.stored("kept").Origin != store.OriginConfig {
		t.Fatalf("kept: secrets %+v, want one generated key, origin config", generated)
	}
	// A 410 disables kept; busy has a message waiting for a retry.
	rcv.setStatus(http.StatusGone)
	e.publish("k1", "a.b", `{}`)
	e.drain()
	if e.stored("kept").Enabled {
		t.Fatal("setup: kept is still enabled after a 410")
	}
	rcv.setStatus(http.StatusInternalServerError)
	e.publish("k2", "z.z", `{}`) // busy only
	e.drain()
	if w := e.effects("busy", store.EffectRetryWait); len(w) != 1 {
		t.Fatalf("setup: busy has %d waiting", len(w))
	}

	// A restart without busy and idle, with quiet disabled in the file.
	e.clk.Advance(time.Minute)
	r := newEnvOn(t, e, file("    enabled: false\n"))
	kept := r.stored("kept")
	if kept.Enabled || !strings.Contains(kept.DisabledReason, "410") || len(kept.Secrets) != 1 || kept.Secrets[0].Key != generated[0].Key {
		t.Fatalf("kept after a restart: enabled %v (%q), key kept %v; want still disabled by the 410, same key",
			kept.Enabled, kept.DisabledReason, kept.Secrets[0].Key == generated[0].Key)
	}
	if q := r.stored("quiet"); q.Enabled {
		t.Fatal("quiet is enabled though the file says enabled: false")
	}
	if idle := r.stored("idle"); !idle.Deleted {
		t.Fatal("idle, removed from the file with nothing to deliver, is not deleted")
	}
	busy := r.stored("busy")
	if busy.Deleted || busy.Enabled || !strings.Contains(busy.DisabledReason, "removed from the config file") {
		t.Fatalf("busy, removed with a message to deliver: deleted %v enabled %v (%q); want disabled, kept", busy.Deleted, busy.Enabled, busy.DisabledReason)
	}
	sent := len(rcv.deliveries())
	r.drain() // due now, though its retry was minutes away
	if dead := r.effects("busy", store.EffectDead); len(dead) != 1 || !strings.HasPrefix(dead[0].Reason, "parked:") || len(rcv.deliveries()) != sent {
		t.Fatalf("busy's message after the restart: %+v, want parked unsent", dead)
	}
	list, err := r.s.List(r.ctx)
	if err != nil || len(list) != 3 {
		t.Fatalf("endpoints %d (%v), want kept, quiet and busy", len(list), err)
	}

	// An operator's enable of quiet lasts until the next start, which
	// disables it again; kept's state, once enabled, stays enabled.
	if _, err := r.s.SetEnabled(r.ctx, "quiet", true, "by test", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.s.SetEnabled(r.ctx, "kept", true, "by test", "test"); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Sync(r.ctx); err != nil {
		t.Fatal(err)
	}
	if r.stored("quiet").Enabled || !r.stored("kept").Enabled {
		t.Fatalf("after another start quiet enabled %v, kept enabled %v; want false, true", r.stored("quiet").Enabled, r.stored("kept").Enabled)
	}
	// Once its message is resolved, busy goes at the next start.
	dead := r.effects("busy", store.EffectDead)
	if _, err := r.st.EffectOperate(r.ctx, &store.EffectOperateParams{EffectID: dead[0].ID, Action: store.OperateResolve, Actor: "test", Note: "done by hand", Now: r.clk.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := r.s.Sync(r.ctx); err != nil {
		t.Fatal(err)
	}
	if !r.stored("busy").Deleted {
		t.Fatal("busy is not deleted once its messages are resolved")
	}
}

// Start writes and reads the endpoints before the worker needs them, and
// Stop ends the refresh loop.
func TestStartStop(t *testing.T) {
	e := newEnv(t, sqliteURLOf(t), "{}")
	cfg, err := config.Parse("p.yaml", []byte("endpoints:\n  - id: file\n    url: https://file.example/h\n"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	s := New(cfg, e.st, Options{Clock: e.clk})
	if v, ds := s.RuntimeDestinations(); v != 0 || len(ds) != 0 {
		t.Fatalf("before Start: version %d, %d destinations", v, len(ds))
	}
	if err := s.Start(e.ctx); err != nil {
		t.Fatal(err)
	}
	v, ds := s.RuntimeDestinations()
	if v == 0 || len(ds) != 1 || ds[0].Name != "endpoint:file" || ds[0].Kind != config.KindEndpoint || ds[0].Paused != "" {
		t.Fatalf("after Start: version %d, destinations %+v", v, ds)
	}
	if err := s.Start(e.ctx); err == nil {
		t.Fatal("a second Start started another loop")
	}
	if err := s.Stop(e.ctx); err != nil {
		t.Fatal(err)
	}
}
