package sweep

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

// TestEvery: the sweep runs again and again, a failure does not stop it,
// and it ends with its context.
func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	var calls atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, 10*time.Millisecond, slog.New(slog.DiscardHandler), "things", func(context.Context) (int, error) {
			if calls.Add(1) == 3 {
				cancel()
			}
			return 1, errors.New("once in a while")
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not end with its context")
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("swept %d times, want 3", n)
	}
}
