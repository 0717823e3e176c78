package etcdx

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ListWatchPaced is ListWatch with sleep called in place of each pause
// and rand drawing the jitter, so tests see the pauses without waiting.
func ListWatchPaced(ctx context.Context, cli *clientv3.Client, prefix string, h Handler, sleep func(context.Context, time.Duration) bool, rand func(int64) int64, opts ...ListWatchOption) {
	w := newListWatch(cli, prefix, h, opts)
	w.sleep, w.backoff.rand = sleep, rand
	w.run(ctx)
}
