package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// Sleep ends with nil once d has passed, and with the context's error
// when the context ends first.
func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("a sleep that ran its time: %v, want nil", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("a sleep whose context ended: %v, want context.Canceled", err)
	}
}
