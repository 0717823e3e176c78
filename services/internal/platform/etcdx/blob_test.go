package etcdx_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// TestBlobRoundTrip: what EncodeBlob takes, DecodeBlobFrom gives back
// whole, compressible or not; a blob over its compressed bound is refused
// as resource exhausted.
func TestBlobRoundTrip(t *testing.T) {
	t.Parallel()
	random := make([]byte, 1<<20)
	_, _ = rand.Read(random)
	for _, value := range []string{"small", strings.Repeat("a", 20<<20), base64.StdEncoding.EncodeToString(random)} {
		data, err := etcdx.EncodeBlob(map[string]string{"v": value}, 4<<20)
		if err != nil {
			t.Fatalf("%d bytes: %v", len(value), err)
		}
		var got map[string]string
		if err := etcdx.DecodeBlobFrom(bytes.NewReader(data), int64(len(data)), &got); err != nil || got["v"] != value {
			t.Fatalf("%d bytes read back: %v", len(value), err)
		}
	}
	if _, err := etcdx.EncodeBlob(map[string]string{"v": base64.StdEncoding.EncodeToString(random)}, 64<<10); errs.KindOf(err) != errs.ResourceExhausted {
		t.Fatalf("over the compressed bound: %v", err)
	}
}

// TestLeasesForget: a shared lease etcd lost is replaced once forgotten,
// and With replaces it by itself.
func TestLeasesForget(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	leases := etcdx.NewLeases(cli, time.Hour, time.Minute)
	lease, err := leases.Get(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := leases.Get(t.Context()); again != lease {
		t.Fatal("one period, two leases")
	}
	if _, err := cli.Revoke(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	// With puts on a new lease once etcd says the shared one is gone.
	var used []clientv3.LeaseID
	err = leases.With(t.Context(), func(l clientv3.LeaseID) error {
		used = append(used, l)
		_, err := cli.Put(t.Context(), "test/leased", "v", clientv3.WithLease(l))
		return err
	})
	if err != nil || len(used) != 2 || used[0] != lease || used[1] == lease {
		t.Fatalf("With after the lease was revoked: %v, leases %v (revoked %v)", err, used, lease)
	}
	leases.Forget(used[1])
	if again, err := leases.Get(t.Context()); err != nil || again == used[1] {
		t.Fatalf("after Forget: %v %v", again, err)
	}
}
