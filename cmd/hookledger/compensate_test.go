package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// compensateConfig has the effect seedEffect makes (orders/notify) with a
// compensation request, and one without (orders/plain).
const compensateConfig = `store: sqlite:%s
admin:
  token: ${TEST_ADMIN_TOKEN}
sources:
  - name: shop
    kind: hmac
    secrets: [${TEST_SHOP_SECRET}]
    hmac: {header: X-Sig}
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    effects:
      - name: notify
        destination: crm
        request: {path: '"/x"'}
        compensation:
          method: DELETE
          path: '"/x/" + pathEscape(entity)'
      - name: plain
        destination: crm
        request: {path: '"/y"'}
destinations:
  - name: crm
    base_url: "http://127.0.0.1:1"
    allow_private_networks: true
`

func writeCompensateConfig(t *testing.T) (cfgPath, db string) {
	t.Helper()
	dir := t.TempDir()
	db = filepath.Join(dir, "c.db")
	cfgPath = filepath.Join(dir, "hookledger.yaml")
	if err := os.WriteFile(cfgPath, []byte(fmt.Sprintf(compensateConfig, db)), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, db
}

// compensationOf reads the compensation of effect id from the store.
func compensationOf(t *testing.T, db string, id int64) []*store.Effect {
	t.Helper()
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	es, err := st.EffectList(context.Background(), &store.EffectListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var out []*store.Effect
	for _, e := range es {
		if e.Compensates == id {
			out = append(out, e)
		}
	}
	return out
}

// effects compensate on the local store renders the request from the
// config; a second one is refused; the note is required.
func TestEffectsCompensateLocal(t *testing.T) {
	cfg, db := writeCompensateConfig(t)
	id := seedEffect(t, db, "e1", "o1", store.EffectDone)
	ids := fmt.Sprint(id)
	env := map[string]string{"USER": "alice"}

	if code, _, errOut := run(t, "", env, "effects", "compensate", "--config", cfg, ids); code != 2 || !strings.Contains(errOut, "--note is required") {
		t.Fatalf("without --note: %d %q", code, errOut)
	}
	code, out, errOut := run(t, "", env, "effects", "compensate", "--config", cfg, "--note", "order refunded by hand", ids)
	if code != 0 || !strings.Contains(out, "orders:o1:r1:notify:compensate") || !strings.Contains(out, fmt.Sprintf("compensates effect %d", id)) {
		t.Fatalf("compensate: %d %q %q", code, out, errOut)
	}
	comps := compensationOf(t, db, id)
	if len(comps) != 1 || string(comps[0].Request) != `{"method":"DELETE","path":"/x/o1"}` || comps[0].State != store.EffectApproved {
		t.Fatalf("compensations %+v", comps)
	}
	code, _, errOut = run(t, "", env, "effects", "compensate", "--config", cfg, "--note", "again", ids)
	if code != 1 || !strings.Contains(errOut, "already compensated") {
		t.Fatalf("second compensate: %d %q", code, errOut)
	}
	if len(compensationOf(t, db, id)) != 1 {
		t.Fatal("a second compensation was made")
	}
}

// effects compensate --server asks the running server, which renders the
// request from its config and answers with the new effect.
func TestEffectsCompensateServer(t *testing.T) {
	cfg, db := writeCompensateConfig(t)
	id := seedEffect(t, db, "e1", "o1", store.EffectDone)
	base := startServer(t, cfg, serverSecrets)
	env := map[string]string{adminTokenVar: "admin-tok", "USER": "alice"}

	code, out, errOut := run(t, "", env, "effects", "compensate", "--server", base, "--note", "refunded", "--format", "json", fmt.Sprint(id))
	var got struct {
		Effect struct {
			ID          int64
			EpisodeKey  string `json:"episode_key"`
			Compensates int64
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.Effect.Compensates != id || got.Effect.EpisodeKey != "orders:o1:r1:notify:compensate" {
		t.Fatalf("compensate --server: %d %q %q", code, out, errOut)
	}
	code, _, errOut = run(t, "", env, "effects", "compensate", "--server", base, "--note", "again", fmt.Sprint(id))
	if code != 1 || !strings.Contains(errOut, "409") || !strings.Contains(errOut, "already compensated") {
		t.Fatalf("second compensate --server: %d %q", code, errOut)
	}
	code, _, errOut = run(t, "", env, "effects", "compensate", "--server", base, "--note", "x", "999")
	if code != 1 || !strings.Contains(errOut, "404") {
		t.Fatalf("unknown effect --server: %d %q", code, errOut)
	}
}
