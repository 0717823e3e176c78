package files_test

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/workspace/files"
)

// TestRefusedWriteLeavesNothing checks that a write refused for its size,
// cut by its client or lying about its length removes what it staged at
// once: repeated, what it left would fill the disk or the bucket long
// before the periodic collection.
func TestRefusedWriteLeavesNothing(t *testing.T) {
	const limit = 12 << 20 // beyond what is kept in memory
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			s, err := files.New(st, etcdxtest.StartForTest(t), files.Config{MaxFileSize: limit})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			w := ws(t, "acct", "alice")
			for _, tt := range []struct {
				name string
				size int64
				r    func(cancel func()) io.Reader
			}{
				{"larger than the limit, size unknown", -1, func(func()) io.Reader { return io.LimitReader(zeros{}, limit+1) }},
				{"client gone", -1, func(cancel func()) io.Reader { return &goneReader{n: limit - 1, cancel: cancel} }},
				{"shorter than announced", limit, func(func()) io.Reader { return io.LimitReader(zeros{}, limit-1) }},
				{"longer than announced", limit - 1, func(func()) io.Reader { return io.LimitReader(zeros{}, limit) }},
			} {
				ctx, cancel := context.WithCancel(t.Context())
				_, err := s.Write(ctx, w, "/up/f", tt.r(cancel), files.WriteOptions{Size: tt.size})
				cancel()
				if err == nil {
					t.Fatalf("%s: write succeeded", tt.name)
				}
				if n, err := st.Collect(t.Context(), 0); err != nil || n != 0 {
					t.Fatalf("%s: Collect = %d, %v; want nothing left staged", tt.name, n, err)
				}
			}
		})
	}
}

// collectSignal tells when Collect is called.
type collectSignal struct {
	store.Store
	called chan struct{}
}

func (c *collectSignal) Collect(ctx context.Context, olderThan time.Duration) (int, error) {
	select {
	case c.called <- struct{}{}:
	default:
	}
	return c.Store.Collect(ctx, olderThan)
}

// TestRunSweepsAtStart checks that Run collects what a crash left at once
// rather than a collection period later.
func TestRunSweepsAtStart(t *testing.T) {
	st := &collectSignal{Store: stores(t)["fs"], called: make(chan struct{}, 1)}
	s, err := files.New(st, etcdxtest.StartForTest(t), files.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	select {
	case <-st.called:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not collect at start")
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}

// goneReader is a client that goes away after n bytes: the stream's
// context ends and its reads fail.
type goneReader struct {
	n      int
	cancel func()
}

func (g *goneReader) Read(p []byte) (int, error) {
	if g.n <= 0 {
		g.cancel()
		return 0, context.Canceled
	}
	n := min(len(p), g.n)
	clear(p[:n])
	g.n -= n
	return n, nil
}
