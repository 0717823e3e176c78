package files_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/workspace/files"
)

func wantQuota(t *testing.T, what string, err error) {
	t.Helper()
	if errs.KindOf(err) != errs.ResourceExhausted || !strings.Contains(err.Error(), "workspace quota exceeded: ") {
		t.Fatalf("%s: err = %v, want a workspace quota refusal", what, err)
	}
}

// unread fails the test if the write reads its content: a write known
// not to fit is refused before its bytes are sent.
type unread struct{ t *testing.T }

func (u unread) Read([]byte) (int, error) {
	u.t.Error("the content of a write that cannot fit was read")
	return 0, errors.New("read")
}

// TestQuotaStoredBytes checks the quota by what the store holds after a
// change (used + new - replaced - removed), refused whole.
func TestQuotaStoredBytes(t *testing.T) {
	forEachStore(t, files.Config{QuotaBytes: 1000, QuotaFiles: 5}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "sparse")
		write(t, s, w, "/keep", strings.Repeat("k", 100))
		// What a sandbox's sparse files send is all zeros, stored whole.
		zeros := strings.Repeat("\x00", 600)
		_, err := flush(t, s, w, file("/s1", zeros), file("/s2", zeros))
		wantQuota(t, "flush of two files over the quota", err)
		if got := names(t, s, w, "/"); !slices.Equal(got, []string{"keep"}) {
			t.Fatalf("a refused flush stored something: %v", got)
		}
		// Replacing and removing count: 100 out, 900 in.
		if _, err := flush(t, s, w, flushOp{remove: "/keep"}, file("/big", strings.Repeat("b", 900))); err != nil {
			t.Fatalf("flush within the quota after the removal: %v", err)
		}
		_, err = s.Write(t.Context(), w, "/more", unread{t}, files.WriteOptions{Size: 200})
		wantQuota(t, "write of a known size over the quota", err)
		_, err = s.Mkdir(t.Context(), w, "/a/b/c/d/e")
		wantQuota(t, "mkdir -p over the file quota", err)
		if _, err := s.Stat(t.Context(), w, "/a"); errs.KindOf(err) != errs.NotFound {
			t.Fatalf("a refused mkdir created its parents: %v", err)
		}
		u, err := s.Usage(t.Context(), w)
		if err != nil || u.Bytes != 900 || u.Files != 1 {
			t.Fatalf("usage = %+v, %v", u, err)
		}
	})
}

// TestOverQuotaWorkspace: a workspace stored under a larger quota than
// the one now applied can still be read, shrunk and emptied, but not grown.
func TestOverQuotaWorkspace(t *testing.T) {
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			cli := etcdxtest.StartForTest(t)
			before, err := files.New(st, cli, files.Config{QuotaBytes: 3000})
			if err != nil {
				t.Fatal(err)
			}
			w := ws(t, "acme", "over")
			write(t, before, w, "/a", strings.Repeat("a", 1200))
			write(t, before, w, "/b", strings.Repeat("b", 1200))
			before.Close()
			s, err := files.New(st, cli, files.Config{QuotaBytes: 1000})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(s.Close)
			if h := hydrate(t, s, w, nil); len(h.content) != 2 {
				t.Fatalf("hydrate of an over-quota workspace sent %d files", len(h.content))
			}
			_, err = flush(t, s, w, file("/c", "c"))
			wantQuota(t, "growing an over-quota workspace", err)
			// A flush that shrinks is taken, even with a file bigger than
			// the quota in it.
			if _, err := flush(t, s, w, flushOp{remove: "/a"}, file("/b", strings.Repeat("B", 1100))); err != nil {
				t.Fatalf("shrinking flush: %v", err)
			}
			if _, err := s.Delete(t.Context(), w, "/b", false); err != nil {
				t.Fatalf("delete in an over-quota workspace: %v", err)
			}
			write(t, s, w, "/c", strings.Repeat("c", 1000))
			if got := read(t, s, w, "/c"); len(got) != 1000 {
				t.Fatalf("read back %d bytes", len(got))
			}
			_, err = s.Write(t.Context(), w, "/d", strings.NewReader("d"), files.WriteOptions{Size: -1})
			wantQuota(t, "a write of unknown size past the quota", err)
			if _, err := s.Stat(t.Context(), w, "/d"); errs.KindOf(err) != errs.NotFound {
				t.Fatalf("a refused write stored its file: %v", err)
			}
		})
	}
}

// TestExactRemovals: a sandbox's `rm -rf d` removes what it saw of d, not
// a file uploaded into d after it hydrated.
func TestExactRemovals(t *testing.T) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "base")
		write(t, s, w, "/d/seen", "seen")
		write(t, s, w, "/d/sub/seen", "seen")
		hydrate(t, s, w, nil)
		write(t, s, w, "/d/sub/uploaded", "uploaded after the hydrate")
		removeExact := func(paths ...string) {
			t.Helper()
			f := s.BeginFlush(w)
			defer f.Abort(t.Context())
			f.ExactRemovals()
			for _, p := range paths {
				if err := f.Remove(p); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := f.Commit(t.Context()); err != nil {
				t.Fatalf("flush: %v", err)
			}
		}
		// What the sandbox saw, children first.
		removeExact("/d/sub/seen", "/d/sub", "/d/seen", "/d")
		if got := read(t, s, w, "/d/sub/uploaded"); got != "uploaded after the hydrate" {
			t.Fatalf("the uploaded file holds %q", got)
		}
		if got := names(t, s, w, "/d"); !slices.Equal(got, []string{"sub/"}) {
			t.Fatalf("/d holds %v", got)
		}
		removeExact("/d/sub/uploaded", "/d/sub", "/d")
		if got := names(t, s, w, "/"); len(got) != 0 {
			t.Fatalf("after removing everything: %v", got)
		}
		u, err := s.Usage(t.Context(), w)
		if err != nil || u.Bytes != 0 || u.Files != 0 {
			t.Fatalf("usage = %+v, %v", u, err)
		}
	})
}
