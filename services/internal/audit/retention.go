package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/store"
)

// Sweep removes the segments of hours that ended before cutoff, and their
// anchors, from every account. It returns how many segments it removed.
// Verify accepts a chain that starts after removed segments.
func Sweep(ctx context.Context, st store.Store, cli *clientv3.Client, etcdPrefix string, cutoff time.Time) (int, error) {
	if etcdPrefix == "" {
		etcdPrefix = DefaultEtcdPrefix
	}
	accounts, err := Accounts(ctx, st)
	if err != nil {
		return 0, err
	}
	removed := 0
	for _, acc := range accounts {
		keys, err := segmentKeys(ctx, st, acc, zeroTime, cutoff.Add(-time.Hour))
		if err != nil {
			return removed, err
		}
		var old []string
		prefix := accountPrefix(acc)
		for _, k := range keys {
			if h, ok := segmentHour(prefix, k); ok && !h.Add(time.Hour).After(cutoff) {
				old = append(old, k)
			}
		}
		if len(old) > 0 {
			if err := st.Delete(ctx, old); err != nil {
				return removed, fmt.Errorf("audit: remove segments: %w", err)
			}
			removed += len(old)
		}
		// Anchors go by their segment's hour, so that a pending anchor
		// whose segment was never stored goes with the others.
		resp, err := cli.Get(ctx, etcdPrefix+"anchors/"+strings.TrimSuffix(strings.TrimPrefix(prefix, "audit/"), "/")+"/", clientv3.WithPrefix())
		if err != nil {
			return removed, fmt.Errorf("audit: read anchors: %w", err)
		}
		for _, kv := range resp.Kvs {
			var a Anchor
			if json.Unmarshal(kv.Value, &a) != nil {
				continue
			}
			if h, ok := segmentHour(prefix, a.Key); !ok || h.Add(time.Hour).After(cutoff) {
				continue
			}
			if _, err := cli.Delete(ctx, string(kv.Key)); err != nil {
				return removed, fmt.Errorf("audit: remove anchor: %w", err)
			}
		}
	}
	return removed, nil
}

// segmentHour is the hour of the segment key below an account's prefix.
func segmentHour(prefix, key string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(key, prefix)
	if !ok || len(rest) < 13 {
		return time.Time{}, false
	}
	h, err := time.Parse("2006-01-02/15", rest[:13])
	return h, err == nil
}
