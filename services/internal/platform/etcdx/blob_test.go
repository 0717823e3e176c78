package etcdx_test

import (
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

func TestBlob(t *testing.T) {
	t.Parallel()
	cli := etcdxtest.StartForTest(t)
	ctx := t.Context()
	leases := etcdx.NewLeases(cli, time.Minute, time.Minute)
	random := make([]byte, 2*etcdx.BlobChunk) // incompressible: three chunks
	_, _ = rand.Read(random)
	for _, tc := range []struct {
		name, value string
		limit       int
		stored      bool
	}{
		{"small", "hello", 1 << 20, true},
		{"chunked", base64.StdEncoding.EncodeToString(random), 8 << 20, true},
		{"over the limit", base64.StdEncoding.EncodeToString(random), 1 << 20, false},
		// Well under the limit compressed, and larger decoded than
		// blobInflate times that: stored, and so read back whole.
		{"compressible", strings.Repeat("a", 40<<20), 1 << 20, true},
	} {
		prefix := "/test/blob/" + tc.name + "/"
		err := etcdx.PutBlobLeased(ctx, cli, leases, prefix, map[string]string{"v": tc.value}, tc.limit)
		if !tc.stored {
			if errs.KindOf(err) != errs.ResourceExhausted {
				t.Fatalf("%s: put = %v, want resource exhausted", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var got map[string]string
		if found, err := etcdx.GetBlob(ctx, cli, prefix, &got); err != nil || !found || got["v"] != tc.value {
			t.Fatalf("%s: get = %v %v, %d bytes", tc.name, found, err, len(got["v"]))
		}
		// Without its head a blob is not complete: not found.
		if _, err := cli.Delete(ctx, prefix+"head"); err != nil {
			t.Fatal(err)
		}
		if found, err := etcdx.GetBlob(ctx, cli, prefix, &got); err != nil || found {
			t.Fatalf("%s: headless blob found: %v", tc.name, err)
		}
		if found, err := etcdx.DeleteBlob(ctx, cli, prefix); err != nil || !found {
			t.Fatalf("%s: delete = %v %v", tc.name, found, err)
		}
		if resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil || resp.Count != 0 {
			t.Fatalf("%s: keys left after delete: %v", tc.name, err)
		}
	}
	if err := etcdx.PutBlobLeased(ctx, cli, leases, "/test/blob/no-slash", "x", 1<<20); err == nil {
		t.Fatal("a prefix without a trailing slash was taken")
	}
	// A shared lease etcd lost is replaced once, and the blob stored.
	lease, err := leases.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if err := etcdx.PutBlobLeased(ctx, cli, leases, "/test/blob/relet/", "x", 1<<20); err != nil {
		t.Fatalf("put after the lease was revoked: %v", err)
	}
	if again, _ := leases.Get(ctx); again == lease {
		t.Fatal("the revoked lease is still handed out")
	}
}
