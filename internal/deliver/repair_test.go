package deliver_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/deliver"
	"github.com/hookledger/hookledger/internal/store"
)

// answerAction answers every call with one recorded answer.
type answerAction struct {
	status int
	body   string
}

func (a answerAction) Do(context.Context, *deliver.Call) (*deliver.Response, error) {
	return &deliver.Response{Status: a.status, Body: []byte(a.body), Sent: true}, nil
}

// A preset rule's repair reaches the effect and the notification: the
// generic "fix the data, then retry" would send a person to retry what no
// retry can cure.
func TestPresetRuleRepairReachesTheExceptionQueue(t *testing.T) {
	for _, tc := range []struct {
		name, preset string
		answer       answerAction
		class        store.ErrorClass
		repair       string
	}{
		{"google ads token not allowlisted", "google-ads", answerAction{403,
			`{"error":{"code":403,"status":"PERMISSION_DENIED","details":[{"errors":[{"errorCode":{"notAllowlistedError":"CUSTOMER_NOT_ALLOWLISTED_FOR_THIS_FEATURE"}}]}]}}`},
			store.ClassPermanent, "Data Manager API"},
		{"braze refused objects", "braze", answerAction{201,
			`{"message":"success","events_processed":1,"errors":[{"type":"'quantity' is not valid","input_array":"purchases","index":0}]}`},
			store.ClassHiddenFailure, "does not dedupe events or purchases"},
		{"configured rule", "generic\nclassify: [{status: 422, class: permanent, repair: ask finance to fix the VAT id}]", answerAction{422, `{}`},
			store.ClassPermanent, "ask finance"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newWorld(t, setup{kind: "recorded", actions: map[string]deliver.Action{"recorded": tc.answer}, dest: "preset: " + tc.preset})
			e := x.order("o1", 1)
			x.drain()
			e = x.get(e.ID)
			x.wantState(e, store.EffectDead)
			if e.ErrorClass != tc.class || !strings.Contains(e.SuggestedRepair, tc.repair) {
				t.Fatalf("[%s] repair %q, want %s with %q", e.ErrorClass, e.SuggestedRepair, tc.class, tc.repair)
			}
			if texts := x.hook.all(); len(texts) != 1 || !strings.Contains(texts[0], tc.repair) {
				t.Fatalf("notifications %q", texts)
			}
			// Never retried.
			x.clk.Advance(7 * time.Hour)
			x.drain()
			if as := x.attempts(e.ID); len(as) != 1 {
				t.Fatalf("%d attempts, want 1", len(as))
			}
		})
	}
}
