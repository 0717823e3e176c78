package etcdx_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// BenchmarkPutBlobDurable writes a stored response of a few kilobytes to
// an embedded etcd that fsyncs, as conch dev's does, and reports the p50
// of that write (blob-p50-ms) beside the p50 of putting one small key on
// the same etcd (put-p50-ms), the floor of any write that must be on disk
// before it is acknowledged.
func BenchmarkPutBlobDurable(b *testing.B) {
	cli := etcdxtest.StartDurableForTest(b)
	leases := etcdx.NewLeases(cli, time.Hour, time.Minute)
	items := make([]map[string]any, 20)
	for i := range items {
		items[i] = map[string]any{"type": "message", "role": "assistant", "content": strings.Repeat("the quick brown fox jumps over the lazy dog ", 4)}
	}
	v := map[string]any{"id": "resp_1", "output": items}
	var blob, put []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := etcdx.PutBlobLeased(b.Context(), cli, leases, "bench/blob/", v, 1<<20); err != nil {
			b.Fatal(err)
		}
		blob = append(blob, time.Since(start))
		start = time.Now()
		if _, err := cli.Put(b.Context(), "bench/key", "v"); err != nil {
			b.Fatal(err)
		}
		put = append(put, time.Since(start))
	}
	for _, m := range []struct {
		ds   []time.Duration
		unit string
	}{{blob, "blob-p50-ms"}, {put, "put-p50-ms"}} {
		slices.Sort(m.ds)
		b.ReportMetric(float64(m.ds[len(m.ds)/2].Microseconds())/1000, m.unit)
	}
}
