package admission

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestSlotsHold runs many holders at once: never more than the slots hold
// a slot together, and every one gets one.
func TestSlotsHold(t *testing.T) {
	for _, slots := range []int{1, 3, 8} {
		g := New(slots)
		var now, peak, served atomic.Int64
		var wg sync.WaitGroup
		for i := range 64 {
			wg.Go(func() {
				var release func()
				var err error
				if i%2 == 0 {
					release, err = g.Work(t.Context())
				} else {
					release, err = g.Admit(t.Context(), "acct", time.Minute)
				}
				if err != nil {
					t.Error(err)
					return
				}
				n := now.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(time.Millisecond)
				now.Add(-1)
				served.Add(1)
				release()
				release() // a second release gives nothing back
			})
		}
		wg.Wait()
		if peak.Load() > int64(slots) || served.Load() != 64 {
			t.Errorf("%d slots: peak %d holders, %d served", slots, peak.Load(), served.Load())
		}
		if g.used != 0 || len(g.work) != 0 || len(g.turns) != 0 || len(g.admits) != 0 {
			t.Errorf("%d slots: left used %d, work %d, turns %q", slots, g.used, len(g.work), g.turns)
		}
	}
}

// order queues waiters behind a full gate of one slot and records the
// order in which they are served as the slot is passed on.
func order(t *testing.T, queue []string) []string {
	t.Helper()
	g := New(1)
	hold, err := g.Work(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	for _, q := range queue {
		before := waiting(g)
		wg.Go(func() {
			var release func()
			var err error
			if q == "work" {
				release, err = g.Work(t.Context())
			} else {
				release, err = g.Admit(t.Context(), q, time.Minute)
			}
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			got = append(got, q)
			mu.Unlock()
			release()
		})
		// One at a time, so that the queue's order is queue's.
		for waiting(g) == before {
			time.Sleep(100 * time.Microsecond)
		}
	}
	hold()
	wg.Wait()
	return got
}

func waiting(g *Gate) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.work)
	for _, q := range g.admits {
		n += len(q)
	}
	return n
}

// TestOrder: admitted work first, in the order it came; then new
// sandboxes, the accounts taking turns.
func TestOrder(t *testing.T) {
	for _, tc := range []struct {
		name         string
		queue, order []string
	}{
		{"work before new sandboxes", []string{"a", "work", "b", "work"}, []string{"work", "work", "a", "b"}},
		{"accounts take turns", []string{"a", "a", "a", "b", "c", "b"}, []string{"a", "b", "c", "a", "b", "a"}},
		{"one account in order", []string{"a", "a"}, []string{"a", "a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := order(t, tc.queue)
			if len(got) != len(tc.order) {
				t.Fatalf("served %q, want %q", got, tc.order)
			}
			for i := range got {
				if got[i] != tc.order[i] {
					t.Fatalf("served %q, want %q", got, tc.order)
				}
			}
		})
	}
}

// TestGivingUp: a new sandbox that waited its while is refused with
// ErrBusy, work whose caller gave up with the caller's error; neither
// keeps a place, and the slot goes back to the gate when released.
func TestGivingUp(t *testing.T) {
	g := New(1)
	hold, err := g.Work(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Admit(t.Context(), "a", 20*time.Millisecond); !errors.Is(err, ErrBusy) {
		t.Fatalf("Admit on a full gate: %v, want ErrBusy", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	if _, err := g.Work(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Work past its caller's deadline: %v", err)
	}
	ctx, cancel = context.WithCancel(t.Context())
	cancel()
	if _, err := g.Admit(ctx, "b", time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Admit for a caller gone: %v", err)
	}
	if n := waiting(g); n != 0 || len(g.turns) != 0 {
		t.Fatalf("%d waiters and turns %q left", n, g.turns)
	}
	hold()
	if g.used != 0 {
		t.Fatalf("%d slots used after the last release", g.used)
	}
	release, err := g.Admit(t.Context(), "a", 0)
	if err != nil {
		t.Fatalf("Admit on an empty gate: %v", err)
	}
	release()
}
