package deliver_test

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/config"
	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

// settleRecorder records what each claim left of its effects and what
// each settle carried.
type settleRecorder struct {
	deliver.Store
	mu      sync.Mutex
	claimed map[int64]*store.FencedEffect
	settles []*store.EffectSettleParams
}

func (r *settleRecorder) EffectClaimGroup(ctx context.Context, ps []*store.EffectClaimParams) ([][]*store.ClaimedEffect, error) {
	out, err := r.Store.EffectClaimGroup(ctx, ps)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, cs := range out {
		for _, c := range cs {
			r.claimed[c.ID] = c.Fenced()
		}
	}
	return out, err
}

func (r *settleRecorder) EffectSettleGroup(ctx context.Context, ps []*store.EffectSettleParams) []error {
	r.mu.Lock()
	r.settles = append(r.settles, ps...)
	r.mu.Unlock()
	return r.Store.EffectSettleGroup(ctx, ps)
}

// The worker settles a call with what its claim saw of the effect
// (EffectSettleParams.Claimed), so that a store that can settles it in one
// round trip, guarded by that view (store.SeenSettleDriver).
func TestSettleCarriesTheClaim(t *testing.T) {
	x := newWorld(t, setup{})
	ctx := context.Background()
	publishToEndpoint(t, x, "https://ep.example")
	src := &runtimeDests{}
	src.set(endpointDest("https://ep.example"))
	rec := &settleRecorder{Store: x.st, claimed: map[int64]*store.FencedEffect{}}
	cfg := *x.cfg
	w, err := deliver.New(&cfg, rec, deliver.Options{Workers: 2, LeaseFor: time.Minute, Clock: x.clk,
		Actions: map[string]deliver.Action{config.KindEndpoint: &urlAction{}}, Runtime: src, Owner: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := w.Step(ctx); err != nil || n != 1 {
		t.Fatalf("step: %d claimed, %v; want the message's delivery", n, err)
	}
	if len(rec.settles) != 1 || rec.settles[0].State != store.EffectDone {
		t.Fatalf("settles %+v, want the delivery done", rec.settles)
	}
	p := rec.settles[0]
	if want := rec.claimed[p.EffectID]; p.Claimed == nil || !reflect.DeepEqual(p.Claimed, want) {
		t.Fatalf("the settle carried %+v, want what its claim saw: %+v", p.Claimed, want)
	}
}
