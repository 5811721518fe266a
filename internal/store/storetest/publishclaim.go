package storetest

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookledger/hookledger/internal/store"
)

// handoff is a delivery worker's side of a publish's handoff
// (store.PublishHandoff) as deliver.Worker keeps it: each destination has
// room for so many calls, Reserve promises at most one more than the
// effects, and Take gives back what a claim did not fill. It records
// every call so a test can check the slots balance.
type handoff struct {
	mu       sync.Mutex
	room     map[string]int
	now      time.Time
	reserved int // slots promised and not given back
	running  int // calls started
	takes    [][][]*store.ClaimedEffect
	wakes    int
}

func (h *handoff) ReserveFresh(effects map[string]int) []*store.EffectClaimParams {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*store.EffectClaimParams
	for _, d := range slices.Sorted(maps.Keys(effects)) {
		if n := min(h.room[d], effects[d]+1); n > 0 {
			h.reserved += n
			out = append(out, &store.EffectClaimParams{Owner: "worker-1", Now: h.now, LeaseFor: 30 * time.Second,
				Limit: n, Destinations: []string{d}, MaxRedrives: 3})
		}
	}
	return out
}

func (h *handoff) Take(claims []*store.EffectClaimParams, claimed [][]*store.ClaimedEffect, _ map[string]int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.takes = append(h.takes, claimed)
	for i, c := range claims {
		var got int
		if i < len(claimed) {
			got = len(claimed[i])
		}
		h.reserved -= c.Limit - got
		h.running += got
	}
}

func (h *handoff) Wake() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.wakes++
}

// balanced fails unless every slot promised is a call started.
func (h *handoff) balanced(t *testing.T) {
	t.Helper()
	if h.reserved != h.running {
		t.Fatalf("%d slots promised and not given back, %d calls started", h.reserved, h.running)
	}
}

// testMessagePublishHandsOff: a publish with a handoff inserts, where the
// worker has room and nothing else is due, its deliveries already claimed,
// exactly as a claim right after the publish would have left and answered
// them; elsewhere it inserts them approved and wakes the worker.
func testMessagePublishHandsOff(t *testing.T, o Opener) {
	withHand, plain := newPub(t, o), newPub(t, o)
	for _, f := range []*pub{withHand, plain} {
		f.put(&store.EndpointPutParams{ID: "ep_a", Spec: spec("https://a.example/hooks"), Enabled: true})
		f.put(&store.EndpointPutParams{ID: "ep_b", Spec: spec("https://b.example/hooks"), Enabled: true})
		f.put(&store.EndpointPutParams{ID: "ep_c", Spec: spec("https://c.example/hooks", "order.*"), Enabled: true})
	}
	a, b := store.EndpointDestination("ep_a"), store.EndpointDestination("ep_b")
	claimAt := t0.Add(time.Second + 7*time.Microsecond)
	h := &handoff{room: map[string]int{a: 5, b: 1}, now: claimAt}
	group := func(hand store.PublishHandoff, ids ...string) []*store.MessagePublishParams {
		var ps []*store.MessagePublishParams
		for _, id := range ids {
			m := msg(id, "k_"+id, "invoice.paid", t0)
			m.TraceContext = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
			m.Handoff = hand
			ps = append(ps, m)
		}
		return ps
	}

	// Two messages in one transaction: ep_a has room for both, ep_b for
	// one; ep_c takes no invoices.
	for i, a := range withHand.s.MessagePublishGroup(withHand.ctx, group(h, "msg_1", "msg_2")) {
		if a.Err != nil {
			t.Fatalf("publish %d with a handoff: %v", i, a.Err)
		}
	}
	for i, a := range plain.s.MessagePublishGroup(plain.ctx, group(nil, "msg_1", "msg_2")) {
		if a.Err != nil {
			t.Fatalf("publish %d: %v", i, a.Err)
		}
	}
	if len(h.takes) != 1 || h.wakes != 0 {
		t.Fatalf("%d takes and %d wakes, want 1 and 0", len(h.takes), h.wakes)
	}
	got := h.takes[0]
	// The oracle: the same claims, run right after the same publish.
	want, err := plain.s.EffectClaimGroup(plain.ctx, []*store.EffectClaimParams{
		{Owner: "worker-1", Now: claimAt, LeaseFor: 30 * time.Second, Limit: 3, Destinations: []string{a}, MaxRedrives: 3},
		{Owner: "worker-1", Now: claimAt, LeaseFor: 30 * time.Second, Limit: 1, Destinations: []string{b}, MaxRedrives: 3}})
	if err != nil {
		t.Fatalf("claim after the publish: %v", err)
	}
	if len(got) != 2 || len(got[0]) != 2 || len(got[1]) != 1 {
		t.Fatalf("claimed %v, want two at ep_a and one at ep_b", keysOf(got))
	}
	sameClaims(t, "handed off", got, want)
	// The stored effects are the same too.
	if g, w := byKey(withHand.effects()), byKey(plain.effects()); !reflect.DeepEqual(g, w) {
		t.Fatalf("stored after the handoff:\n%+v\nafter publish and claim:\n%+v", g, w)
	}
	// Each lease holds: the worker settles the call it was handed.
	for _, c := range got[0] {
		if err := withHand.s.EffectSettle(withHand.ctx, &store.EffectSettleParams{EffectID: c.ID, Token: c.Token, Now: claimAt.Add(time.Second),
			Actor: "worker-1", State: store.EffectDone, AddAttempt: true,
			Attempt: &store.Attempt{EffectID: c.ID, Number: c.Calls + 1, StartedAt: claimAt, Duration: time.Millisecond, Status: 200}}); err != nil {
			t.Fatalf("settle a handed-off effect: %v", err)
		}
	}
	h.balanced(t)

	// msg_2's delivery to ep_b is due and unclaimed: a publish finds ep_b
	// held, leaves its delivery there approved and wakes the worker; ep_a
	// is free again.
	h.now = claimAt.Add(2 * time.Second)
	withHand.publish(group(h, "msg_3")[0])
	if len(h.takes) != 2 || h.wakes != 1 {
		t.Fatalf("%d takes and %d wakes, want 2 and 1", len(h.takes), h.wakes)
	}
	if k := keysOf(h.takes[1]); !reflect.DeepEqual(k, []string{store.PublishEpisodeKey("msg_3", "ep_a")}) {
		t.Fatalf("claimed %v, want msg_3's delivery to ep_a alone", k)
	}
	states := map[string]store.EffectState{}
	for _, e := range withHand.effects() {
		states[e.EpisodeKey] = e.State
	}
	for key, want := range map[string]store.EffectState{
		store.PublishEpisodeKey("msg_1", "ep_a"): store.EffectDone, store.PublishEpisodeKey("msg_1", "ep_b"): store.EffectSubmitting,
		store.PublishEpisodeKey("msg_2", "ep_b"): store.EffectApproved, store.PublishEpisodeKey("msg_3", "ep_a"): store.EffectSubmitting,
		store.PublishEpisodeKey("msg_3", "ep_b"): store.EffectApproved,
	} {
		if states[key] != want {
			t.Fatalf("%s is %q, want %q (all: %v)", key, states[key], want, states)
		}
	}
	h.balanced(t)

	// A group that fails as a whole (a message id taken) publishes each
	// message alone, each handing off its own.
	taken := group(h, "msg_1")[0]
	taken.Key = "k_other"
	as := withHand.s.MessagePublishGroup(withHand.ctx, append(group(h, "msg_4"), taken))
	if as[0].Err != nil || as[1].Err == nil {
		t.Fatalf("group with a taken id: %v, %v", as[0].Err, as[1].Err)
	}
	h.balanced(t)
	var after []string
	for _, take := range h.takes[2:] {
		after = append(after, keysOf(take)...)
	}
	if !reflect.DeepEqual(after, []string{store.PublishEpisodeKey("msg_4", "ep_a")}) {
		t.Fatalf("claimed %v after the failed group, want msg_4's delivery to ep_a", after)
	}
}

// sameClaims fails unless got, what claims of the owner worker-1 took as
// their effects were inserted (what), is what want, the same claims run
// right after, took: the same effects, field for field, ids and tokens
// aside, each token the owner's own.
func sameClaims(t *testing.T, what string, got, want [][]*store.ClaimedEffect) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d claims answered, want %d", what, len(got), len(want))
	}
	for i := range want {
		if g, w := keysOf(got[i:i+1]), keysOf(want[i:i+1]); !reflect.DeepEqual(g, w) {
			t.Fatalf("%s: claim %d took %v, the same claim run after %v", what, i, g, w)
		}
		for j, c := range got[i] {
			w := *want[i][j]
			if !strings.HasPrefix(c.Token, "worker-1:") || c.Token == w.Token {
				t.Fatalf("%s: token %q, want the owner's own", what, c.Token)
			}
			gc := *c
			gc.Token, w.Token, gc.ID, w.ID = "", "", 0, 0
			if !reflect.DeepEqual(gc, w) {
				t.Fatalf("%s:\n%+v\nclaimed after:\n%+v", what, gc, w)
			}
		}
	}
}

// byKey is es, ids aside, in episode key order: what two stores that
// numbered the same effects differently both hold.
func byKey(es []*store.Effect) []store.Effect {
	out := make([]store.Effect, 0, len(es))
	for _, e := range es {
		c := *e
		c.ID = 0
		out = append(out, c)
	}
	slices.SortFunc(out, func(x, y store.Effect) int { return strings.Compare(x.EpisodeKey, y.EpisodeKey) })
	return out
}

// keysOf is the episode keys of claimed, claim after claim.
func keysOf(claimed [][]*store.ClaimedEffect) []string {
	var out []string
	for _, cs := range claimed {
		for _, c := range cs {
			out = append(out, c.EpisodeKey)
		}
	}
	return out
}
