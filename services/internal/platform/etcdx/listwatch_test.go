package etcdx_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// waitFor bounds how long a test waits for ListWatch to report something
// that is already on its way.
const waitFor = 30 * time.Second

// recorder is a Handler that describes each call as a line, "reset a=1
// b=2", "put a=1", "delete a" or "stale", with keys relative to prefix.
type recorder struct {
	prefix string
	lines  chan string
	// onReset and onEvent, when set, run inside the handler, before it
	// describes the call, and decide its result.
	onReset func(n int) error
	onEvent func(ev *clientv3.Event) error
	resets  int
}

func newRecorder(prefix string) *recorder {
	return &recorder{prefix: prefix, lines: make(chan string, 100)}
}

func (r *recorder) handler() etcdx.Handler {
	return etcdx.Handler{
		Reset: func(kvs []*mvccpb.KeyValue, _ int64) error {
			r.resets++
			if r.onReset != nil {
				if err := r.onReset(r.resets); err != nil {
					r.lines <- "reset failed"
					return err
				}
			}
			var b strings.Builder
			b.WriteString("reset")
			for _, kv := range kvs {
				fmt.Fprintf(&b, " %s=%s", strings.TrimPrefix(string(kv.Key), r.prefix), kv.Value)
			}
			r.lines <- b.String()
			return nil
		},
		Events: func(evs []*clientv3.Event) error {
			for _, ev := range evs {
				if r.onEvent != nil {
					if err := r.onEvent(ev); err != nil {
						return err
					}
				}
				k := strings.TrimPrefix(string(ev.Kv.Key), r.prefix)
				if ev.Type == clientv3.EventTypeDelete {
					r.lines <- "delete " + k
				} else {
					r.lines <- fmt.Sprintf("put %s=%s", k, ev.Kv.Value)
				}
			}
			return nil
		},
		Stale: func() { r.lines <- "stale" },
	}
}

// next returns the next n lines.
func (r *recorder) next(t *testing.T, n int) []string {
	t.Helper()
	var got []string
	for range n {
		select {
		case l := <-r.lines:
			got = append(got, l)
		case <-time.After(waitFor):
			t.Fatalf("after %q, nothing more within %v", got, waitFor)
		}
	}
	return got
}

// run starts ListWatch with pauses recorded, not slept, and jitter at
// its highest, so each pause is the full backoff. ListWatch is stopped,
// and waited for, when the test ends.
func run(t *testing.T, cli *clientv3.Client, prefix string, h etcdx.Handler, opts ...etcdx.ListWatchOption) <-chan time.Duration {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pauses := make(chan time.Duration, 100)
	sleep := func(ctx context.Context, d time.Duration) bool {
		pauses <- d
		return ctx.Err() == nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		etcdx.ListWatchPaced(ctx, cli, prefix, h, sleep, func(n int64) int64 { return n - 1 }, opts...)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitFor):
			t.Errorf("ListWatch still running %v after its context ended", waitFor)
		}
	})
	return pauses
}

// put and del report a failure with t.Errorf, so that handlers running
// on ListWatch's goroutine may call them; they return the revision of the
// change.
func put(t *testing.T, cli *clientv3.Client, key, value string) int64 {
	t.Helper()
	resp, err := cli.Put(t.Context(), key, value)
	if err != nil {
		t.Errorf("put %s: %v", key, err)
		return 0
	}
	return resp.Header.Revision
}

func del(t *testing.T, cli *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := cli.Delete(t.Context(), key)
	if err != nil {
		t.Errorf("delete %s: %v", key, err)
		return 0
	}
	return resp.Header.Revision
}

func compact(t *testing.T, cli *clientv3.Client, rev int64) {
	t.Helper()
	if _, err := cli.Compact(t.Context(), rev); err != nil {
		t.Errorf("compact at %d: %v", rev, err)
	}
}

func TestListWatchFollowsKeys(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	tests := []struct {
		name   string
		key    string // relative to the test's prefix
		opts   []etcdx.ListWatchOption
		before map[string]string
		after  func(t *testing.T, p string)
		want   []string
	}{
		{
			name:   "lists what is there",
			before: map[string]string{"a": "1", "b": "2"},
			want:   []string{"reset a=1 b=2"},
		},
		{
			name:   "passes on puts and deletes in order",
			before: map[string]string{"a": "1"},
			after: func(t *testing.T, p string) {
				put(t, cli, p+"b", "2")
				del(t, cli, p+"a")
				put(t, cli, p+"a", "3")
			},
			want: []string{"reset a=1", "put b=2", "delete a", "put a=3"},
		},
		{
			name:   "follows one key alone",
			key:    "x",
			opts:   []etcdx.ListWatchOption{etcdx.ExactKey()},
			before: map[string]string{"x": "1", "xy": "2"},
			after: func(t *testing.T, p string) {
				// Were xy followed, its change would come first.
				put(t, cli, p+"xy", "3")
				put(t, cli, p+"x", "4")
			},
			want: []string{"reset x=1", "put x=4"},
		},
		{
			name:   "lists keys without values",
			opts:   []etcdx.ListWatchOption{etcdx.KeysOnly()},
			before: map[string]string{"a": "1"},
			after:  func(t *testing.T, p string) { put(t, cli, p+"a", "2") },
			want:   []string{"reset a=", "put a=2"},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fmt.Sprintf("lw/follow/%d/", i)
			for k, v := range tt.before {
				put(t, cli, p+k, v)
			}
			r := newRecorder(p)
			run(t, cli, p+tt.key, r.handler(), tt.opts...)
			got := r.next(t, 1)
			if tt.after != nil {
				tt.after(t, p)
			}
			got = append(got, r.next(t, len(tt.want)-1)...)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}

// A watch that resumes at a revision etcd has compacted cannot learn what
// changed meanwhile; ListWatch lists again, and a key deleted in the gap
// is gone from the new list. Compacting between the list and the start of
// the watch makes that gap without waiting for a disconnect.
func TestListWatchListsAgainAfterCompaction(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	const p = "lw/compact/"
	put(t, cli, p+"a", "1")
	put(t, cli, p+"b", "2")
	r := newRecorder(p)
	r.onReset = func(n int) error {
		if n == 1 {
			del(t, cli, p+"b")
			compact(t, cli, put(t, cli, p+"c", "3"))
		}
		return nil
	}
	pauses := run(t, cli, p, r.handler())
	want := []string{"reset a=1 b=2", "stale", "reset a=1 c=3"}
	if diff := cmp.Diff(want, r.next(t, len(want))); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	if d := <-pauses; d <= 0 {
		t.Errorf("paused %v before listing again, want a pause", d)
	}
}

// The pause grows with each failure in a row, including a watch that
// ends before it delivers anything, and starts over only after a watch
// delivered changes.
func TestListWatchBacksOffUntilAWatchDelivers(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	const p = "lw/backoff/"
	const ms = time.Millisecond
	errBroken := errors.New("broken")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := newRecorder(p)
	r.onReset = func(n int) error {
		switch n {
		case 1, 2, 3, 6:
			return errBroken
		case 4:
			// The watch from the listed revision fails at once.
			put(t, cli, p+"x", "1")
			compact(t, cli, put(t, cli, p+"y", "1"))
		case 5:
			put(t, cli, p+"k1", "1")
		case 7:
			cancel()
		}
		return nil
	}
	r.onEvent = func(ev *clientv3.Event) error {
		if string(ev.Kv.Key) == p+"k1" {
			put(t, cli, p+"k2", "1")
			return nil
		}
		return errBroken
	}
	var pauses []time.Duration
	sleep := func(ctx context.Context, d time.Duration) bool {
		pauses = append(pauses, d)
		return ctx.Err() == nil
	}
	etcdx.ListWatchPaced(ctx, cli, p, r.handler(), sleep, func(n int64) int64 { return n - 1 })
	want := []time.Duration{
		200 * ms, 400 * ms, 800 * ms, // lists 1-3 fail
		1600 * ms, // list 4 succeeds, its watch delivers nothing
		200 * ms,  // list 5's watch delivered k1, then failed on k2
		400 * ms,  // list 6 fails
	}
	if diff := cmp.Diff(want, pauses); diff != "" {
		t.Errorf("pauses (-want +got):\n%s", diff)
	}
}

func TestListWatchReturnsWhenContextEnds(t *testing.T) {
	cli := etcdxtest.StartForTest(t)
	tests := []struct {
		name string
		fail bool // every list fails, so the context ends during a pause
		want []string
	}{
		{name: "while watching", want: []string{"reset", "stale"}},
		{name: "while pausing", fail: true, want: []string{"reset failed", "stale", "stale"}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fmt.Sprintf("lw/done/%d/", i)
			r := newRecorder(p)
			if tt.fail {
				r.onReset = func(int) error { return errors.New("broken") }
			}
			ctx, cancel := context.WithCancel(t.Context())
			paused := make(chan struct{})
			sleep := func(ctx context.Context, _ time.Duration) bool {
				close(paused)
				<-ctx.Done()
				return false
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				etcdx.ListWatchPaced(ctx, cli, p, r.handler(), sleep, func(int64) int64 { return 0 })
			}()
			got := r.next(t, 1)
			if tt.fail {
				<-paused
			}
			cancel()
			select {
			case <-done:
			case <-time.After(waitFor):
				t.Fatalf("ListWatch still running %v after its context ended", waitFor)
			}
			close(r.lines)
			for l := range r.lines {
				got = append(got, l)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("calls = %q, want %q", got, tt.want)
			}
		})
	}
}
