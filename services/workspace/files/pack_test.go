package files_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/workspace/files"
)

// packKeys lists the keys below the packs of w.
func packKeys(t *testing.T, st store.Store, w files.Workspace) []string {
	t.Helper()
	var keys []string
	for info, err := range st.List(t.Context(), "accounts/"+w.Account+"/users/"+w.User+"/packs/", true) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, info.Key)
	}
	return keys
}

// waitPacks polls until w has at least one pack.
func waitPacks(t *testing.T, st store.Store, w files.Workspace) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if keys := packKeys(t, st, w); len(keys) > 0 {
			return keys
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no pack written")
	return nil
}

// Packs are a cache: a hydration by a service that never saw the
// workspace gets the right content even from a forged pack, and deleting
// the workspace deletes its packs.
func TestPacksAreOnlyACache(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			cli := etcdxtest.StartForTest(t)
			newService := func() *files.Service { return uncachedService(t, st, cli, true) }
			s := newService()
			w := ws(t, "acme", "packs")
			var ops []flushOp
			for i := range 40 {
				ops = append(ops, flushOp{e: files.Entry{Path: fmt.Sprintf("/f%02d", i), Type: files.File}, content: fmt.Sprintf("file %d", i)})
			}
			if _, err := flush(t, s, w, ops...); err != nil {
				t.Fatal(err)
			}
			keys := waitPacks(t, st, w)
			// A forged pack: every file's name with the wrong bytes.
			var forged bytes.Buffer
			forged.WriteString("conch-pack-1\n")
			for i := range 40 {
				fmt.Fprintf(&forged, "%s %d\n%s", etag(fmt.Appendf(nil, "file %d", i)), len("forged!"), "forged!")
			}
			if _, err := st.Put(t.Context(), keys[0]+"z", &forged, store.PutOptions{Size: int64(forged.Len())}); err != nil {
				t.Fatal(err)
			}
			h := hydrate(t, newService(), w, nil)
			if len(h.content) != 40 {
				t.Fatalf("hydrated %d files, want 40", len(h.content))
			}
			for i := range 40 {
				p := fmt.Sprintf("/f%02d", i)
				if got, want := string(h.content[p]), fmt.Sprintf("file %d", i); got != want {
					t.Errorf("%s: %q, want %q", p, got, want)
				}
			}
			if _, err := s.Delete(t.Context(), w, "/", true); err != nil {
				t.Fatal(err)
			}
			if keys := packKeys(t, st, w); len(keys) != 0 {
				t.Errorf("packs left after deleting /: %s", strings.Join(keys, ", "))
			}
		})
	}
}
