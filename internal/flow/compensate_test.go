package flow

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hookledger/hookledger/internal/store"
)

// Compensate, shared by the admin API and the console, records the
// rendered compensation once; HasCompensation tells which effects have a
// compensation to offer.
func TestCompensateShared(t *testing.T) {
	f := newFixture(t, compensationFlow)
	f.send("shop", "e1", `{"order_id":"o1","rev":1,"status":"placed"}`)
	f.drain()
	f.deliverAll()
	orig := f.effectRows()[0]
	if !f.eng.HasCompensation(orig) {
		t.Fatalf("effect %s has a compensation in its definition", orig.Effect)
	}
	other := *orig
	other.Effect = "gone"
	if f.eng.HasCompensation(&other) {
		t.Errorf("an effect the flow does not define has a compensation")
	}
	ctx := context.Background()
	now := f.clk.Now()
	comp, err := Compensate(ctx, f.st, f.eng.CompensationRequest, orig, "operator:ann", "customer asked", now)
	if err != nil {
		t.Fatal(err)
	}
	if comp.Compensates != orig.ID || comp.Effect != orig.Effect+CompensateSuffix || !strings.Contains(string(comp.Request), "/retract") {
		t.Fatalf("compensation %+v", comp)
	}
	if f.eng.HasCompensation(comp) {
		t.Errorf("a compensation offers a compensation of its own")
	}
	if _, err := Compensate(ctx, f.st, f.eng.CompensationRequest, orig, "operator:ann", "again", now); !errors.Is(err, store.ErrConflict) {
		t.Errorf("second compensation: %v, want ErrConflict", err)
	}
	if _, err := Compensate(ctx, f.st, f.eng.CompensationRequest, comp, "operator:ann", "undo the undo", now); !errors.Is(err, ErrNoCompensation) {
		t.Errorf("compensation of a compensation: %v, want ErrNoCompensation", err)
	}
	if _, err := Compensate(ctx, f.st, f.eng.CompensationRequest, &other, "operator:ann", "gone", now); !errors.Is(err, ErrNoCompensation) {
		t.Errorf("effect without a definition: %v, want ErrNoCompensation", err)
	}
}
