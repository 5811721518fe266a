package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/flow"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

const replayConfig = `sources:
  - name: shop
    kind: hmac
    secrets: [x]
    hmac: {header: X-Sig}
flows:
  - name: orders
    source: shop
    events: ["order.*"]
    entity: event.order_id
    version: {mode: revision, revision: event.rev}
    effects:
      - name: sync
        destination: crm
        request: {path: '"/x"'}
destinations:
  - {name: crm, base_url: "http://127.0.0.1:1", allow_private_networks: true}
`

// replayServer serves the admin API over a real SQLite store with one
// applied event, its flow engine running as in serve.
func replayServer(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	cfg, err := config.Parse("r.yaml", []byte(replayConfig), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "r.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 3, 9, 0, 0, 0, time.UTC)
	if _, err := st.InboxCommit(ctx, &store.InboxCommitParams{Submissions: []*store.Submission{{Deliveries: []*store.DeliveryInput{{
		RequestID: "r1", Source: "shop", EventID: "e1", Type: "order.updated", ReceivedAt: now, Body: []byte(`{"order_id":"o1","rev":1}`),
	}}}}}); err != nil {
		t.Fatal(err)
	}
	engine := flow.New(cfg, st, flow.Options{PollInterval: time.Hour})
	if err := engine.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	engineCtx, stop := context.WithCancel(ctx)
	// The long poll interval leaves the engine idle until it is woken:
	// a replay that settles proves the resource wakes it.
	if err := engine.Start(engineCtx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop()
		if err := engine.Stop(context.Background()); err != nil {
			t.Errorf("stop the engine: %v", err)
		}
	})
	h := api.New(st, "tok", slog.New(slog.DiscardHandler), func() time.Time { return now })
	h.ServeReplays(engine)
	srv := httptest.NewServer(openapitest.Wrap(t, h))
	t.Cleanup(srv.Close)
	return srv.URL
}

func postReplay(t *testing.T, base, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/replays", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestPostReplays(t *testing.T) {
	base := replayServer(t)
	for _, tc := range []struct {
		name, token, body string
		code              int
		want              string
	}{
		{"no token", "", `{}`, 401, "bearer token"},
		{"unknown field", "tok", `{"sourc":"shop"}`, 400, `unknown field \"sourc\"`},
		{"wrong type", "tok", `{"wait_seconds":"ten"}`, 400, "wait_seconds"},
		{"bad time", "tok", `{"from":"yesterday"}`, 400, "from: \\\"yesterday\\\" is not an RFC 3339 time"},
		{"wait too long", "tok", `{"wait_seconds":3600}`, 400, "wait_seconds: expected 0 to 600"},
		{"nothing selected", "tok", `{"entity":"nobody"}`, 422, "matches no stored event"},
		{"event id without source", "tok", `{"event_id":"e1"}`, 400, "source: required with event_id"},
		{"another event", "tok", `{"source":"shop","event_id":"e9"}`, 422, "matches no stored event"},
	} {
		code, body := postReplay(t, base, tc.token, tc.body)
		if code != tc.code || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s; want %d containing %s", tc.name, code, body, tc.code, tc.want)
		}
	}

	// Waiting: the server's engine processes the replay; the event is
	// applied already, so its second pass is a duplicate and creates no
	// effect.
	code, body := postReplay(t, base, "tok", `{"source":"shop","event_id":"e1","actor":"alice","wait_seconds":60}`)
	var out struct {
		Replay map[string]any `json:"replay"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatalf("%d %s: %v", code, body, err)
	}
	r := out.Replay
	if code != 200 || r["done"] != true || r["work_items"] != 1.0 || r["settled"] != 1.0 || r["duplicate"] != 1.0 || r["effects_created"] != 0.0 || r["id"] == 0.0 {
		t.Fatalf("replay with wait: %d %s", code, body)
	}
	// Without waiting the answer comes once the replay is enqueued.
	code, body = postReplay(t, base, "tok", `{"entity":"o1"}`)
	if code != 202 || !strings.Contains(body, `"done":false`) || !strings.Contains(body, `"work_items":1`) {
		t.Fatalf("replay without wait: %d %s", code, body)
	}
}
