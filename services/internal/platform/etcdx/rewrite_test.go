package etcdx_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
)

// Rewrite writes only what f asks for, under the prefix alone, and never
// loses a write made between f's read and its own.
func TestRewrite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cli := etcdxtest.StartForTest(t)
	for k, v := range map[string]string{
		"rw/done": "DONE", "rw/plain": "plain", "rw/raced": "raced", "rw/deleted": "deleted",
		"rw/broken": "broken", "rw/busy": "busy", "rwx/outside": "outside",
	} {
		put(t, cli, k, v)
	}
	calls := map[string]int{}
	wantErr := errors.New("cannot")
	read, rewritten, err := etcdx.Rewrite(ctx, cli, "rw/", func(key string, v []byte) ([]byte, bool, error) {
		calls[key]++
		switch {
		case key == "rw/broken":
			return nil, false, wantErr
		case key == "rw/raced" && calls[key] == 1, key == "rw/busy":
			// Another writer gets in between this read and the write.
			put(t, cli, key, string(v)+"+changed")
		case key == "rw/deleted":
			if _, err := cli.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
		}
		up := bytes.ToUpper(v)
		return up, !bytes.Equal(up, v), nil
	})
	if read != 6 || rewritten != 2 {
		t.Errorf("Rewrite read %d and rewrote %d, want 6 and 2", read, rewritten)
	}
	if !errors.Is(err, wantErr) || !strings.Contains(err.Error(), "rw/busy") {
		t.Errorf("Rewrite error = %v, want the failure of rw/broken and rw/busy", err)
	}
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	want := map[string]string{
		"rw/done": "DONE", "rw/plain": "PLAIN", "rw/raced": "RACED+CHANGED",
		"rw/broken": "broken", "rw/busy": "busy" + strings.Repeat("+changed", 5), "rwx/outside": "outside",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("etcd after Rewrite (-want +got):\n%s", diff)
	}
	if calls["rw/raced"] != 2 || calls["rw/deleted"] != 1 {
		t.Errorf("f was called %d times for the raced key and %d for the deleted one, want 2 and 1", calls["rw/raced"], calls["rw/deleted"])
	}
}
