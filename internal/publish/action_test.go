package publish

import (
	"context"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/clock"
	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/outbound"
	"github.com/hookledger/hookledger/internal/store"
	"github.com/hookledger/hookledger/internal/store/sqlite"
)

// A flow's effect that publishes carries its causation on to the message's
// deliveries as stored, whatever characters it holds: its header on the
// call is percent-encoded for the wire, and is not what gets stored.
func TestPublishFromFlowKeepsTheCausationAsStored(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "p.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse("p.yaml", []byte("{}"), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	s := New(cfg, st, Options{Clock: clock.NewFake(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))})
	id, u := "partner", "https://partner.example/hooks"
	if _, err := s.Create(ctx, &EndpointInput{ID: &id, URL: &u}, "test"); err != nil {
		t.Fatal(err)
	}
	const causation = "app/café\x1b[0m"
	h := http.Header{}
	h.Set(cfg.Causation.Header, outbound.EncodeHeaderValue(causation))
	resp, err := (&publishAction{s: s}).Do(ctx, &deliver.Call{EpisodeKey: "orders:o1:r1:tell", Header: h, CausationID: causation,
		Body: []byte(`{"type":"order.updated","data":{"id":"o1"}}`)})
	if err != nil || resp.Status != http.StatusAccepted {
		t.Fatalf("publish: %v %+v", err, resp)
	}
	effs, err := st.EffectList(ctx, &store.EffectListParams{Destination: store.EndpointDestination(id), Limit: 10})
	if err != nil || len(effs) != 1 {
		t.Fatalf("deliveries %v, %v", effs, err)
	}
	if effs[0].CausationID != causation {
		t.Fatalf("delivery causation %q, want %q", effs[0].CausationID, causation)
	}
}
