package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/api"
	"github.com/hookledger/hookledger/internal/openapi/openapitest"
	"github.com/hookledger/hookledger/internal/store"
)

// With the destinations' keys known, every effect the API shows carries
// idempotency_key beside episode_key; an effect whose destination sends
// none carries no field at all.
func TestEffectsShowTheIdempotencyKeySent(t *testing.T) {
	f := newFixture(t)
	pk := f.event("shop", "e1", "order.created", "")
	f.route(pk, store.Route{Flow: "orders", Entity: "o1", OrderKey: "1"})
	billed := f.apply("orders", "o1", "billing")[0]
	pk = f.event("shop", "e2", "order.created", "")
	f.route(pk, store.Route{Flow: "orders", Entity: "o2", OrderKey: "1"})
	plain := f.apply("orders", "o2", "crm")[0]
	f.settle(billed, store.EffectDead, store.ClassPermanent)

	h := api.New(f.st, token, slog.New(slog.DiscardHandler), func() time.Time { return t0.Add(time.Hour) })
	h.ServeIdempotencyKeys(func(destination, episodeKey string) (string, string) {
		if destination != "billing" {
			return "", ""
		}
		return "Idempotency-Key", "hl1_" + strings.ToUpper(episodeKey)
	})
	srv := httptest.NewServer(openapitest.Wrap(t, h))
	t.Cleanup(srv.Close)
	call := func(method, path string) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(`{"note":"checked","owner":"bob"}`))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var out map[string]any
		if resp.StatusCode/100 != 2 || json.Unmarshal(b, &out) != nil {
			t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
		}
		return out
	}
	check := func(where string, e any) {
		t.Helper()
		m := e.(map[string]any)
		key, has := m["idempotency_key"]
		switch m["destination"] {
		case "billing":
			if want := "hl1_" + strings.ToUpper(m["episode_key"].(string)); key != want {
				t.Errorf("%s: idempotency_key %v, want %s", where, key, want)
			}
		default:
			if has {
				t.Errorf("%s: idempotency_key %v on an effect whose destination sends none", where, key)
			}
		}
	}
	list := call("GET", "/api/v1/effects")["effects"].([]any)
	if len(list) != 2 {
		t.Fatalf("%d effects", len(list))
	}
	for _, e := range list {
		check("list", e)
	}
	check("get", call("GET", fmt.Sprintf("/api/v1/effects/%d", billed))["effect"])
	check("get", call("GET", fmt.Sprintf("/api/v1/effects/%d", plain))["effect"])
	check("assign", call("POST", fmt.Sprintf("/api/v1/effects/%d/assign", billed))["effect"])
}
