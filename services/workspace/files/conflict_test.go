package files_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/workspace/files"
)

// TestNarrowedQuota: a flush may commit under a quota smaller than the
// service's (its sandbox's gateway allows less), never a larger one.
func TestNarrowedQuota(t *testing.T) {
	forEachStore(t, files.Config{QuotaBytes: 1000, QuotaFiles: 10}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "narrow")
		commit := func(bytes, nfiles int64, paths ...string) error {
			t.Helper()
			f := s.BeginFlush(w)
			defer f.Abort(t.Context())
			f.Narrow(bytes, nfiles)
			for _, p := range paths {
				if err := f.Put(t.Context(), files.Entry{Path: p, Type: files.File}, strings.NewReader(strings.Repeat("x", 300))); err != nil {
					return err
				}
			}
			_, err := f.Commit(t.Context())
			return err
		}
		wantQuota(t, "300 bytes under a quota of 200", commit(200, 0, "/a"))
		wantQuota(t, "two files under a quota of one", commit(0, 1, "/a", "/b"))
		wantQuota(t, "a wider quota than the service's", commit(5000, 100, "/a", "/b", "/c", "/d"))
		if err := commit(600, 2, "/a", "/b"); err != nil {
			t.Fatalf("within the narrowed quota: %v", err)
		}
		if u, err := s.Usage(t.Context(), w); err != nil || u.QuotaBytes != 1000 {
			t.Fatalf("usage = %+v, %v; a flush's quota is its own", u, err)
		}
	})
}

// TestStaleRemovalKept: a sandbox's removal of a file it synced keeps
// what replaced the file since (e.g. an upload under the same name) and
// reports it; a removal of what the sandbox saw still goes. Both the
// one-stat-per-key path and the whole-listing path (more than 16
// operations) are checked.
func TestStaleRemovalKept(t *testing.T) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		for _, extra := range []int{0, 20} {
			t.Run(fmt.Sprintf("%d more ops", extra), func(t *testing.T) {
				w := ws(t, "acme", fmt.Sprintf("stale%d", extra))
				old := write(t, s, w, "/d/replaced", "old")
				seen := write(t, s, w, "/d/seen", "seen")
				gone := write(t, s, w, "/nowdir", "a file")
				// After the sandbox synced: replaced under the same name,
				// and a file turned into a directory.
				write(t, s, w, "/d/replaced", "new")
				if _, err := s.Delete(t.Context(), w, "/nowdir", false); err != nil {
					t.Fatal(err)
				}
				write(t, s, w, "/nowdir/inside", "x")

				f := s.BeginFlush(w)
				defer f.Abort(t.Context())
				f.ExactRemovals()
				for i := range extra {
					if err := f.Put(t.Context(), files.Entry{Path: fmt.Sprintf("/x/%d", i), Type: files.File}, strings.NewReader("x")); err != nil {
						t.Fatal(err)
					}
				}
				for _, r := range []struct{ p, etag string }{{"/d/replaced", old.ETag}, {"/d/seen", seen.ETag}, {"/d", ""}, {"/nowdir", gone.ETag}} {
					if err := f.RemoveSynced(r.p, r.etag); err != nil {
						t.Fatal(err)
					}
				}
				res, err := f.Commit(t.Context())
				if err != nil {
					t.Fatalf("flush: %v", err)
				}
				// /d is kept only for what is reported below it.
				want := []files.Conflict{{Path: "/d/replaced", Reason: files.ChangedSince}, {Path: "/nowdir", Reason: files.ChangedSince}}
				if fmt.Sprint(res.Conflicts) != fmt.Sprint(want) {
					t.Errorf("conflicts = %v, want %v", res.Conflicts, want)
				}
				if got := read(t, s, w, "/d/replaced"); got != "new" {
					t.Errorf("the replaced file holds %q, want the new content", got)
				}
				if got := read(t, s, w, "/nowdir/inside"); got != "x" {
					t.Errorf("the directory that took the file's place holds %q", got)
				}
				if got := names(t, s, w, "/d"); fmt.Sprint(got) != "[replaced]" {
					t.Errorf("/d holds %v, want only the replaced file", got)
				}
			})
		}
	})
}

// TestRemovalOfOwnFile: a removal naming the etag the sandbox sent
// removes the file: it is still the one the sandbox saw.
func TestRemovalOfOwnFile(t *testing.T) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "own")
		e := write(t, s, w, "/f", "mine")
		f := s.BeginFlush(w)
		defer f.Abort(t.Context())
		f.ExactRemovals()
		if err := f.RemoveSynced("/f", e.ETag); err != nil {
			t.Fatal(err)
		}
		res, err := f.Commit(t.Context())
		if err != nil || len(res.Conflicts) != 0 {
			t.Fatalf("flush = %+v, %v", res, err)
		}
		if got := names(t, s, w, "/"); len(got) != 0 {
			t.Fatalf("after the removal: %v", got)
		}
	})
}
