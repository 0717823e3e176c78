package files_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"iter"
	"strings"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/workspace/files"
)

// listCounter is a store that counts the listings of workspaces' files.
type listCounter struct {
	store.Store
	lists atomic.Int64
}

func (c *listCounter) List(ctx context.Context, prefix string, recursive bool) iter.Seq2[store.Info, error] {
	if strings.HasSuffix(prefix, "/files/") {
		c.lists.Add(1)
	}
	return c.Store.List(ctx, prefix, recursive)
}

// manifestKey is where the service keeps w's listing.
func manifestKey(w files.Workspace) string {
	return "accounts/" + w.Account + "/users/" + w.User + "/manifest"
}

// A service that has not listed a workspace hydrates it from the listing
// another kept, and only while the workspace is as it was listed: a kept
// listing that is stale, damaged or names another workspace's files costs
// a listing and nothing else.
func TestKeptListingIsOnlyACache(t *testing.T) {
	w := ws(t, "acme", "kept")
	for name, real := range stores(t) {
		t.Run(name, func(t *testing.T) {
			st := &listCounter{Store: real}
			cli := etcdxtest.StartForTest(t)
			newService := func() *files.Service { return uncachedService(t, st, cli, true) }
			// hydrateNew hydrates with a new service and waits for the
			// listing it keeps.
			hydrateNew := func() hydrated {
				s := uncachedService(t, st, cli, false)
				defer s.Close()
				return hydrate(t, s, w, nil)
			}
			s := newService()
			var ops []flushOp
			for i := range 5 {
				ops = append(ops, file(fmt.Sprintf("/f%d", i), fmt.Sprintf("file %d", i)))
			}
			if _, err := flush(t, s, w, ops...); err != nil {
				t.Fatal(err)
			}
			want := func(h hydrated, extra ...string) {
				t.Helper()
				ws := map[string]string{}
				for i := range 5 {
					ws[fmt.Sprintf("/f%d", i)] = fmt.Sprintf("file %d", i)
				}
				for i := 0; i+1 < len(extra); i += 2 {
					ws[extra[i]] = extra[i+1]
				}
				if len(h.content) != len(ws) {
					t.Fatalf("hydrated %d files, want %d", len(h.content), len(ws))
				}
				for p, c := range ws {
					if got := string(h.content[p]); got != c {
						t.Errorf("%s: %q, want %q", p, got, c)
					}
				}
			}
			want(hydrateNew()) // lists and keeps the listing
			lists := st.lists.Load()
			want(hydrateNew())
			if n := st.lists.Load() - lists; n != 0 {
				t.Errorf("a service new to the workspace listed it %d times", n)
			}

			// Changed by another service: the kept listing is stale.
			if _, err := flush(t, newService(), w, file("/new", "new")); err != nil {
				t.Fatal(err)
			}
			lists = st.lists.Load()
			want(hydrateNew(), "/new", "new")
			if st.lists.Load() == lists {
				t.Error("a stale listing was used")
			}

			// Damaged, of another state, or naming another workspace's
			// files under the right state.
			rc, _, err := real.Get(t.Context(), manifestKey(w))
			if err != nil {
				t.Fatal(err)
			}
			kept, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			foreign := bytes.ReplaceAll(kept, []byte("/users/kept/files/"), []byte("/users/other/files/"))
			if bytes.Equal(foreign, kept) {
				t.Fatalf("kept listing: %s", kept)
			}
			for _, bad := range []string{"{not json", `{"state_rev": 1, "entries": []}`, string(foreign)} {
				if _, err := real.Put(t.Context(), manifestKey(w), strings.NewReader(bad), store.PutOptions{Size: int64(len(bad))}); err != nil {
					t.Fatal(err)
				}
				lists = st.lists.Load()
				want(hydrateNew(), "/new", "new")
				if st.lists.Load() == lists {
					t.Errorf("a bad listing was used: %.60s", bad)
				}
			}
			if _, err := s.Delete(t.Context(), w, "/", true); err != nil {
				t.Fatal(err)
			}
			if rc, _, err := real.Get(t.Context(), manifestKey(w)); err == nil {
				rc.Close()
				t.Error("the kept listing outlived a delete of /")
			}
			if h := hydrateNew(); len(h.content) != 0 {
				t.Errorf("hydrated %d files after deleting /", len(h.content))
			}
		})
	}
}

// uncachedService is a service over st with no content cache, as a service
// that has not served a workspace is; close, if true, closes it with the
// test.
func uncachedService(t *testing.T, st store.Store, cli *clientv3.Client, close bool) *files.Service {
	t.Helper()
	s, err := files.New(st, cli, files.Config{ContentCacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if close {
		t.Cleanup(s.Close)
	}
	return s
}
