package files_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/workspace/files"
)

func ws(t testing.TB, account, user string) files.Workspace {
	t.Helper()
	w, err := files.NewWorkspace(account, user)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func write(t *testing.T, s *files.Service, w files.Workspace, p, content string) files.Entry {
	t.Helper()
	e, err := s.Write(t.Context(), w, p, strings.NewReader(content), files.WriteOptions{Size: -1})
	if err != nil {
		t.Fatalf("write %s: %v", p, err)
	}
	return e
}

func read(t *testing.T, s *files.Service, w files.Workspace, p string) string {
	t.Helper()
	rc, _, err := s.Open(t.Context(), w, p)
	if err != nil {
		t.Fatalf("open %s: %v", p, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func names(t *testing.T, s *files.Service, w files.Workspace, p string) []string {
	t.Helper()
	entries, err := s.List(t.Context(), w, p)
	if err != nil {
		t.Fatalf("list %s: %v", p, err)
	}
	var out []string
	for _, e := range entries {
		suffix := ""
		if e.Type == files.Dir {
			suffix = "/"
		}
		out = append(out, e.Name+suffix)
	}
	return out
}

func wantKind(t *testing.T, what string, err error, k errs.Kind) {
	t.Helper()
	if errs.KindOf(err) != k {
		t.Errorf("%s: err = %v, want %v", what, err, k)
	}
}

func TestFileOperations(t *testing.T) {
	forEachStore(t, files.Config{MaxFileSize: 10 << 20}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "alice")
		mtime := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
		e, err := s.Write(t.Context(), w, "/notes/deep/a.txt", strings.NewReader("hello"), files.WriteOptions{Mode: 0o600, ModTime: mtime, Size: 5})
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte("hello"))
		if e.Path != "/notes/deep/a.txt" || e.Name != "a.txt" || e.Size != 5 || e.Mode != 0o600 || !e.ModTime.Equal(mtime) || e.ETag != hex.EncodeToString(sum[:]) || e.Type != files.File {
			t.Fatalf("entry = %+v", e)
		}
		if got := read(t, s, w, "/notes/deep/a.txt"); got != "hello" {
			t.Fatalf("content = %q", got)
		}
		if got := names(t, s, w, "/"); !slices.Equal(got, []string{"notes/"}) {
			t.Fatalf("list / = %v", got)
		}
		if _, err := s.Mkdir(t.Context(), w, "/empty/inner"); err != nil {
			t.Fatal(err)
		}
		if got := names(t, s, w, "/empty"); !slices.Equal(got, []string{"inner/"}) {
			t.Fatalf("list /empty = %v", got)
		}
		// Parents created by a write persist once the file is gone.
		if _, err := s.Delete(t.Context(), w, "/notes/deep/a.txt", false); err != nil {
			t.Fatal(err)
		}
		if got := names(t, s, w, "/notes"); !slices.Equal(got, []string{"deep/"}) {
			t.Fatalf("list /notes after delete = %v", got)
		}
		if st, err := s.Stat(t.Context(), w, "/empty/inner"); err != nil || st.Type != files.Dir {
			t.Fatalf("stat empty dir = %+v, %v", st, err)
		}

		write(t, s, w, "/f", "file")
		write(t, s, w, "/d/x", "in d")
		tests := []struct {
			name string
			err  error
			kind errs.Kind
		}{
			{"stat missing", errOf(s.Stat(t.Context(), w, "/missing")), errs.NotFound},
			{"list missing", errOf(s.List(t.Context(), w, "/missing")), errs.NotFound},
			{"list a file", errOf(s.List(t.Context(), w, "/f")), errs.FailedPrecondition},
			{"open missing", errOf3(s.Open(t.Context(), w, "/missing")), errs.NotFound},
			{"open a dir", errOf3(s.Open(t.Context(), w, "/d")), errs.FailedPrecondition},
			{"write under a file", errOf(s.Write(t.Context(), w, "/f/child", strings.NewReader("x"), files.WriteOptions{Size: -1})), errs.FailedPrecondition},
			{"write over a dir", errOf(s.Write(t.Context(), w, "/d", strings.NewReader("x"), files.WriteOptions{Size: -1})), errs.FailedPrecondition},
			{"write the root", errOf(s.Write(t.Context(), w, "/", strings.NewReader("x"), files.WriteOptions{Size: -1})), errs.InvalidArgument},
			{"mkdir over a file", errOf(s.Mkdir(t.Context(), w, "/f")), errs.FailedPrecondition},
			{"mkdir under a file", errOf(s.Mkdir(t.Context(), w, "/f/sub")), errs.FailedPrecondition},
			{"delete a full dir", errOf(s.Delete(t.Context(), w, "/d", false)), errs.FailedPrecondition},
			{"delete root without recursive", errOf(s.Delete(t.Context(), w, "/", false)), errs.FailedPrecondition},
			{"delete missing", errOf(s.Delete(t.Context(), w, "/missing", true)), errs.NotFound},
			{"traversal", errOf(s.Stat(t.Context(), w, "/../bob/x")), errs.InvalidArgument},
			{"size lie", errOf(s.Write(t.Context(), w, "/lie", strings.NewReader("abc"), files.WriteOptions{Size: 4})), errs.InvalidArgument},
			{"too large", errOf(s.Write(t.Context(), w, "/big", io.LimitReader(zeros{}, 10<<20+1), files.WriteOptions{Size: -1})), errs.ResourceExhausted},
			{"bad mode", errOf(s.Write(t.Context(), w, "/m", strings.NewReader("x"), files.WriteOptions{Mode: 0o17777, Size: -1})), errs.InvalidArgument},
		}
		for _, tt := range tests {
			wantKind(t, tt.name, tt.err, tt.kind)
		}
		for _, p := range []string{"/lie", "/big", "/m", "/d"} {
			if e, err := s.Stat(t.Context(), w, p); p != "/d" && errs.KindOf(err) != errs.NotFound {
				t.Errorf("%s after a failed write = %+v, %v", p, e, err)
			}
		}
		// Exactly the limit is fine, and large content streams.
		big := io.LimitReader(zeros{}, 10<<20)
		if e, err := s.Write(t.Context(), w, "/big", big, files.WriteOptions{Size: -1}); err != nil || e.Size != 10<<20 {
			t.Fatalf("write at the limit = %+v, %v", e, err)
		}
		n, err := s.Delete(t.Context(), w, "/d", true)
		if err != nil || n != 2 {
			t.Fatalf("recursive delete = %d, %v; want 2 (file and marker)", n, err)
		}
	})
}

func TestIsolation(t *testing.T) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		// Ids that are prefixes of each other must not see each other.
		spaces := []files.Workspace{ws(t, "acme", "alice"), ws(t, "acme", "alic"), ws(t, "acme", "alice2"), ws(t, "acme2", "alice"), ws(t, "acm", "alice"), ws(t, "acme", "alice.x")}
		for i, w := range spaces {
			write(t, s, w, "/who", fmt.Sprint(i))
		}
		for i, w := range spaces {
			if got := read(t, s, w, "/who"); got != fmt.Sprint(i) {
				t.Errorf("%+v reads %q, want %d", w, got, i)
			}
			if got := names(t, s, w, "/"); !slices.Equal(got, []string{"who"}) {
				t.Errorf("%+v lists %v", w, got)
			}
		}
		if n, err := s.Delete(t.Context(), spaces[0], "/", true); err != nil || n != 1 {
			t.Fatalf("empty workspace = %d, %v", n, err)
		}
		for _, w := range spaces[1:] {
			if got := read(t, s, w, "/who"); got == "" {
				t.Errorf("%+v lost its file", w)
			}
		}
		for _, bad := range [][2]string{{"acme", ""}, {"acme", ".."}, {"acme", "a/b"}, {"acme", "a%2fb"}, {"", "alice"}, {"a/b", "alice"}, {"acme", strings.Repeat("u", 129)}, {"acme", "al ice"}, {"acme", "alice\x00"}} {
			if _, err := files.NewWorkspace(bad[0], bad[1]); err == nil {
				t.Errorf("NewWorkspace(%q, %q) succeeded", bad[0], bad[1])
			}
		}
	})
}

func TestManyEntries(t *testing.T) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "many")
		f := s.BeginFlush(w)
		const n = 1200
		for i := range n {
			if err := f.Put(t.Context(), files.Entry{Path: fmt.Sprintf("/big/f%04d", i), Type: files.File}, strings.NewReader("x")); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.Commit(t.Context()); err != nil {
			t.Fatal(err)
		}
		if got := names(t, s, w, "/big"); len(got) != n {
			t.Fatalf("listing has %d entries, want %d", len(got), n)
		}
		deleted, err := s.Delete(t.Context(), w, "/big", true)
		if err != nil || deleted != n {
			t.Fatalf("delete = %d, %v", deleted, err)
		}
		if _, err := s.Stat(t.Context(), w, "/big"); errs.KindOf(err) != errs.NotFound {
			t.Fatalf("stat after delete = %v", err)
		}
		u, err := s.Usage(t.Context(), w)
		if err != nil || u.Files != 0 || u.Bytes != 0 {
			t.Fatalf("usage = %+v, %v", u, err)
		}
	})
}

func TestQuota(t *testing.T) {
	forEachStore(t, files.Config{QuotaBytes: 1000, QuotaFiles: 5}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "q")
		write(t, s, w, "/a", strings.Repeat("a", 600))
		_, err := s.Write(t.Context(), w, "/b", strings.NewReader(strings.Repeat("b", 500)), files.WriteOptions{Size: -1})
		if errs.KindOf(err) != errs.ResourceExhausted || !strings.Contains(err.Error(), "quota") {
			t.Fatalf("write over the byte quota = %v", err)
		}
		_, err = s.Write(t.Context(), w, "/new/deep/b", strings.NewReader(strings.Repeat("b", 500)), files.WriteOptions{Size: -1})
		wantKind(t, "deep write over the quota", err, errs.ResourceExhausted)
		if _, err := s.Stat(t.Context(), w, "/new"); errs.KindOf(err) != errs.NotFound {
			t.Fatalf("a refused write created its parents: %v", err)
		}
		// Replacing a file counts only the difference.
		write(t, s, w, "/a", strings.Repeat("a", 900))
		f := s.BeginFlush(w)
		for i := range 6 {
			if err := f.Put(t.Context(), files.Entry{Path: fmt.Sprintf("/n%d", i), Type: files.Dir}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := f.Commit(t.Context()); errs.KindOf(err) != errs.ResourceExhausted {
			t.Fatalf("flush over the file quota = %v", err)
		}
		if got := names(t, s, w, "/"); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("after refused flush: %v", got)
		}
		u, err := s.Usage(t.Context(), w)
		if err != nil || u.Bytes != 900 || u.Files != 1 || u.QuotaBytes != 1000 {
			t.Fatalf("usage = %+v, %v", u, err)
		}
	})
}

// TestConcurrentChanges runs many writers on one workspace: the lock keeps
// the usage exact (unlocked read-modify-write would lose updates).
func TestConcurrentChanges(t *testing.T) {
	forEachStore(t, files.Config{}, func(t *testing.T, s *files.Service) {
		w := ws(t, "acme", "busy")
		var wg sync.WaitGroup
		errc := make(chan error, 20)
		for i := range 20 {
			wg.Go(func() {
				_, err := s.Write(t.Context(), w, fmt.Sprintf("/f%02d", i), bytes.NewReader(make([]byte, 10)), files.WriteOptions{Size: -1})
				errc <- err
			})
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			if err != nil {
				t.Fatal(err)
			}
		}
		u, err := s.Usage(t.Context(), w)
		if err != nil || u.Files != 20 || u.Bytes != 200 {
			t.Fatalf("usage = %+v, %v; want 20 files, 200 bytes", u, err)
		}
	})
}

func errOf[T any](_ T, err error) error { return err }

func errOf3[A, B any](a A, _ B, err error) error {
	if c, ok := any(a).(io.Closer); ok && err == nil {
		c.Close()
	}
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
