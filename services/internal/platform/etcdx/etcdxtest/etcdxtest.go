// Package etcdxtest starts a real embedded etcd for integration tests.
package etcdxtest

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
)

// StartForTest starts an embedded etcd with its data in t.TempDir() and
// fsync disabled, and returns a client connected to it. Both are closed
// when the test ends. Use cli.Endpoints() to connect further clients.
func StartForTest(t testing.TB) *clientv3.Client {
	t.Helper()
	return start(t, true, 0)
}

// StartWithQuotaForTest is StartForTest with etcd's backend quota at
// quota bytes, so that a test can fill it and meet NOSPACE.
func StartWithQuotaForTest(t testing.TB, quota int64) *clientv3.Client {
	t.Helper()
	return start(t, true, quota)
}

// StartDurableForTest is StartForTest with fsync on, as conch dev's etcd
// runs: for benchmarks of writes that must be on disk.
func StartDurableForTest(t testing.TB) *clientv3.Client {
	t.Helper()
	return start(t, false, 0)
}

func start(t testing.TB, noFsync bool, quota int64) *clientv3.Client {
	t.Helper()
	ctx := t.Context()
	e, err := etcdx.StartEmbedded(ctx, etcdx.EmbeddedOptions{Dir: t.TempDir(), UnsafeNoFsync: noFsync, QuotaBytes: quota})
	if err != nil {
		t.Fatalf("start embedded etcd: %v", err)
	}
	t.Cleanup(e.Close)

	cli, err := etcdx.NewClient(ctx, etcdx.ClientOptions{Endpoints: e.Endpoints()})
	if err != nil {
		t.Fatalf("connect to embedded etcd: %v", err)
	}
	t.Cleanup(func() {
		if err := cli.Close(); err != nil {
			t.Errorf("close etcd client: %v", err)
		}
	})
	return cli
}
