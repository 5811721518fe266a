package main

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"
)

// The closed loop issues exactly the count asked for, whatever the number
// of clients, and counts failures apart from successes.
func TestDriveClosedLoopCount(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	res := driveClosedLoop(context.Background(), 7, 100, 0, func(_ *http.Client, seq int) (time.Duration, error) {
		mu.Lock()
		seen[seq]++
		mu.Unlock()
		if seq%10 == 3 {
			return 0, errors.New("refused")
		}
		return time.Millisecond, nil
	})
	if res.ok != 90 || res.failed != 10 || res.firstErr != "refused" || len(res.lat) != 90 {
		t.Fatalf("ok %d failed %d first %q samples %d, want 90, 10, refused, 90", res.ok, res.failed, res.firstErr, len(res.lat))
	}
	for seq := range 100 {
		if seen[seq] != 1 {
			t.Fatalf("request %d sent %d times, want once", seq, seen[seq])
		}
	}
}

// The open loop issues exactly the count asked for, each request once,
// and counts failures apart from successes.
func TestDrivePacedCount(t *testing.T) {
	var mu sync.Mutex
	seen := map[int]int{}
	res := drivePaced(context.Background(), 100000, 50, func(_ *http.Client, seq int) (time.Duration, error) {
		mu.Lock()
		seen[seq]++
		mu.Unlock()
		if seq%10 == 3 {
			return 0, errors.New("refused")
		}
		return time.Millisecond, nil
	})
	if res.ok != 45 || res.failed != 5 || len(res.lat) != 45 {
		t.Fatalf("ok %d failed %d samples %d, want 45, 5, 45", res.ok, res.failed, len(res.lat))
	}
	for seq := range 50 {
		if seen[seq] != 1 {
			t.Fatalf("request %d sent %d times, want once", seq, seen[seq])
		}
	}
}
