package store

import (
	"testing"
	"time"
)

// takes records what a handoff was given back and handed.
type takes struct {
	room  int
	got   [][][]*ClaimedEffect
	wakes int
}

func (k *takes) ReserveFresh(effects map[string]int) []*EffectClaimParams {
	var out []*EffectClaimParams
	for d, n := range effects {
		out = append(out, &EffectClaimParams{Owner: "w", Now: time.Unix(100, 0), LeaseFor: time.Minute, Limit: min(k.room, n+1), Destinations: []string{d}})
	}
	return out
}

func (k *takes) Take(_ []*EffectClaimParams, claimed [][]*ClaimedEffect, _ map[string]int) {
	k.got = append(k.got, claimed)
}

func (k *takes) Wake() { k.wakes++ }

// A transaction whose body ran twice hands over only what its last run
// inserted, and only once it committed; every other reservation is given
// back (claimed nil), and a destination held back by effects due there
// wakes the worker.
func TestHandingSettlesEachRun(t *testing.T) {
	fan := func(msg string) [][]*MessageEffect {
		return [][]*MessageEffect{{
			{EpisodeKey: PublishEpisodeKey(msg, "a"), Destination: EndpointDestination("a"), Version: msg, Now: time.Unix(99, 0)},
			{EpisodeKey: PublishEpisodeKey(msg, "b"), Destination: EndpointDestination("b"), Version: msg, Now: time.Unix(99, 0)},
		}}
	}
	inserted := func(c *MessageEffectsClaim, keys ...string) {
		for i, k := range keys {
			c.Rows = append(c.Rows, InsertedMessageEffect{ID: int64(i + 1), EpisodeKey: k, Claimed: true})
		}
	}
	for _, committed := range []bool{false, true} {
		k := &takes{room: 4}
		ps := []*MessagePublishParams{{ID: "msg_1", Handoff: k}}
		hd := newHanding(ps)
		for run := range 2 {
			c, err := hd.reserve(fan("msg_1"))
			if err != nil || c == nil || len(c.Tokens) != 2 || c.Until != time.Unix(160, 0) {
				t.Fatalf("run %d: claim %+v, %v", run, c, err)
			}
			inserted(c, PublishEpisodeKey("msg_1", "a")) // b held back
		}
		hd.finish(committed, ps)
		if len(k.got) != 2 || k.got[0] != nil {
			t.Fatalf("committed %v: takes %v, want the first run's given back", committed, k.got)
		}
		if !committed {
			if k.got[1] != nil || k.wakes != 0 {
				t.Fatalf("rolled back: handed %v, %d wakes; want nothing", k.got[1], k.wakes)
			}
			continue
		}
		var n int
		for _, cs := range k.got[1] {
			for _, c := range cs {
				if c.EpisodeKey != PublishEpisodeKey("msg_1", "a") || c.Token == "" {
					t.Fatalf("handed %+v", c)
				}
				n++
			}
		}
		if n != 1 || k.wakes != 1 {
			t.Fatalf("handed %d effects and woke %d times, want 1 and 1", n, k.wakes)
		}
	}
	if hd := newHanding([]*MessagePublishParams{{ID: "msg_1"}}); hd != nil {
		t.Fatal("a publish without a handoff has a handing")
	}
}
