package groupcommit_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/hookledger/hookledger/internal/groupcommit"
)

// Requests that arrive while a group runs go together in the next one,
// no more than the limit; each caller gets the answer to its own request.
func TestGroupsWhileRunning(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	var groups [][]int
	b := groupcommit.New(func(_ context.Context, ins []int) []int {
		mu.Lock()
		groups = append(groups, append([]int(nil), ins...))
		first := len(groups) == 1
		mu.Unlock()
		if first {
			started <- struct{}{}
			<-release
		}
		out := make([]int, len(ins))
		for i, v := range ins {
			out[i] = v * 10
		}
		return out
	}, func(int) int { return 1 }, 3)
	ctx := context.Background()
	var wg sync.WaitGroup
	answers := make([]int, 6)
	wg.Go(func() { answers[0] = b.Do(ctx, 0) })
	<-started // the first request runs alone, at once
	for i := 1; i < 6; i++ {
		wg.Go(func() { answers[i] = b.Do(ctx, i) })
	}
	// Wait until the five are queued behind the running group.
	for b.Queued() < 5 {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	for i, a := range answers {
		if a != i*10 {
			t.Fatalf("request %d answered %d", i, a)
		}
	}
	if len(groups) != 3 || len(groups[0]) != 1 || len(groups[1]) != 3 || len(groups[2]) != 2 {
		t.Fatalf("groups %v, want the first alone, then 3 (the limit), then 2", groups)
	}
}
