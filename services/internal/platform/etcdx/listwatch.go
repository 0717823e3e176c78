package etcdx

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Pauses between failed attempts of ListWatch: the first is at most
// minRetry and each failure in a row doubles it, up to maxRetry.
const (
	minRetry = 200 * time.Millisecond
	maxRetry = 10 * time.Second
)

// Handler receives what ListWatch reads. ListWatch calls its functions
// from one goroutine, one at a time.
type Handler struct {
	// Reset receives every key ListWatch follows, as of revision rev:
	// on start, and again after each failure. It replaces all the
	// handler knows; a key the handler held that kvs lacks is gone. An
	// error counts as a failure: ListWatch lists again after a pause.
	// Required.
	Reset func(kvs []*mvccpb.KeyValue, rev int64) error
	// Events receives the changes after the last Reset, in order. An
	// error counts as a failure. Required.
	Events func(evs []*clientv3.Event) error
	// Stale, when set, is called each time what the handler holds stops
	// being kept current: after a failure, before the pause, and when
	// ListWatch returns. It may be called twice in a row. Until the next
	// Reset the handler may lag behind etcd.
	Stale func()
}

// ListWatchOption changes what ListWatch follows or how it reports.
type ListWatchOption func(*listWatch)

// ExactKey makes ListWatch follow its key alone rather than the keys
// under it.
func ExactKey() ListWatchOption {
	return func(w *listWatch) { w.prefix = false }
}

// KeysOnly makes ListWatch list keys without their values, for a handler
// that needs only to know it is in step; events still carry values.
func KeysOnly() ListWatchOption {
	return func(w *listWatch) { w.keysOnly = true }
}

// WithLogger sets where ListWatch reports failures; the default is
// slog.Default().
func WithLogger(log *slog.Logger) ListWatchOption {
	return func(w *listWatch) {
		if log != nil {
			w.log = log
		}
	}
}

// ListWatch keeps h in step with the keys under prefix until ctx ends.
// It lists them for h.Reset, then watches from the revision after the
// list, passing changes to h.Events. When the watch ends (etcd compacted
// a revision it still needed, lost its leader, or h failed), it lists
// afresh, so keys deleted meanwhile disappear. Failures in a row are
// spaced by a pause that doubles, with jitter; the pause starts over
// only once a watch delivers something, so a watch that keeps failing
// at once never spins.
func ListWatch(ctx context.Context, cli *clientv3.Client, prefix string, h Handler, opts ...ListWatchOption) {
	newListWatch(cli, prefix, h, opts).run(ctx)
}

type listWatch struct {
	cli      *clientv3.Client
	key      string
	prefix   bool
	keysOnly bool
	h        Handler
	log      *slog.Logger
	backoff  backoff
	// sleep waits d or until ctx ends, and reports whether ctx is still
	// live; tests replace it to record the pauses instead.
	sleep func(ctx context.Context, d time.Duration) bool
}

func newListWatch(cli *clientv3.Client, key string, h Handler, opts []ListWatchOption) *listWatch {
	w := &listWatch{
		cli:     cli,
		key:     key,
		prefix:  true,
		h:       h,
		log:     slog.Default(),
		backoff: backoff{min: minRetry, max: maxRetry, rand: rand.Int64N},
		sleep:   Sleep,
	}
	for _, o := range opts {
		o(w)
	}
	return w
}

func (w *listWatch) run(ctx context.Context) {
	if w.h.Stale != nil {
		defer w.h.Stale()
	}
	for {
		err := w.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		if w.h.Stale != nil {
			w.h.Stale()
		}
		d := w.backoff.next()
		w.log.WarnContext(ctx, "etcd watch ended; listing again", "key", w.key, "error", err, "retry_in", d)
		if !w.sleep(ctx, d) {
			return
		}
	}
}

// follow lists the keys, then watches them until the watch or the
// handler fails, and says why.
func (w *listWatch) follow(ctx context.Context) error {
	var listOpts, watchOpts []clientv3.OpOption
	if w.prefix {
		listOpts = append(listOpts, clientv3.WithPrefix())
		watchOpts = append(watchOpts, clientv3.WithPrefix())
	}
	if w.keysOnly {
		listOpts = append(listOpts, clientv3.WithKeysOnly())
	}
	resp, err := w.cli.Get(ctx, w.key, listOpts...)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	rev := resp.Header.Revision
	if err := w.h.Reset(resp.Kvs, rev); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	// Without a leader a member's revisions stop, so the watch would
	// silently fall behind; requiring one ends it instead. Progress
	// notifications let a quiet watch prove it is alive.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	watchOpts = append(watchOpts, clientv3.WithRev(rev+1), clientv3.WithProgressNotify())
	for wr := range w.cli.Watch(wctx, w.key, watchOpts...) {
		if err := wr.Err(); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		if len(wr.Events) > 0 {
			if err := w.h.Events(wr.Events); err != nil {
				return fmt.Errorf("events: %w", err)
			}
		}
		w.backoff.reset()
	}
	return errors.New("watch: closed")
}

// Sleep waits d, or until ctx ends; it reports whether the whole d
// passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// backoff spaces out retries: each failure in a row doubles the pause,
// from min up to max, and the pause is drawn from the upper half of that
// so that replicas that failed together do not all retry together.
type backoff struct {
	min, max time.Duration
	// rand returns a number in [0, n); rand.Int64N outside tests.
	rand func(n int64) int64
	cur  time.Duration // zero until a failure
}

// next returns the pause before the next attempt and doubles the one
// after it.
func (b *backoff) next() time.Duration {
	d := max(b.cur, b.min)
	b.cur = min(2*d, b.max)
	half := d / 2
	return half + time.Duration(b.rand(int64(d-half)+1))
}

// reset starts the pauses over, after a success.
func (b *backoff) reset() { b.cur = 0 }
