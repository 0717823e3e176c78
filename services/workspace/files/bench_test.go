package files_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/store"
	"github.com/conch-sh/conch/services/workspace/files"
	"golang.org/x/sys/unix"
)

// workspaceDir returns a new directory on a tmpfs, as a sandbox's workspace
// is, where hydrations write: /dev/shm when it is one, else the temporary
// directory, which the benchmark says.
func workspaceDir(b *testing.B) string {
	b.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		b.Logf("no tmpfs at /dev/shm: the files go to %s", os.TempDir())
		return b.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "conch-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// forEachStoreB runs a benchmark against each store; newService returns a
// service over the benchmark's store and etcd.
func forEachStoreB(b *testing.B, fn func(b *testing.B, st store.Store, newService func(files.Config) *files.Service)) {
	for name, st := range stores(b) {
		b.Run(name, func(b *testing.B) {
			cli := etcdxtest.StartForTest(b)
			fn(b, st, func(cfg files.Config) *files.Service {
				s, err := files.New(st, cli, cfg)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(s.Close)
				return s
			})
		})
	}
}

// populate flushes n files of size (at least 8) bytes into w.
func populate(b *testing.B, s *files.Service, w files.Workspace, n, size int) {
	b.Helper()
	for start := 0; start < n; start += 1000 {
		f := s.BeginFlush(w)
		for i := start; i < min(start+1000, n); i++ {
			e := files.Entry{Path: fmt.Sprintf("/d%02d/f%05d.txt", i%50, i), Type: files.File}
			// Each file's content is its own, as in a real workspace.
			content := fmt.Sprintf("%08d", i) + strings.Repeat("x", max(size-8, 0))
			if err := f.Put(b.Context(), e, strings.NewReader(content[:size])); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := f.Commit(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// hydrateInto writes a hydration into dir as a sandbox would, and returns
// the manifest (path → etag) of what it holds.
func hydrateInto(b *testing.B, s *files.Service, w files.Workspace, dir string, have map[string]string) map[string]string {
	b.Helper()
	next := map[string]string{}
	var cur *os.File
	closeCur := func() {
		if cur != nil {
			if err := cur.Close(); err != nil {
				b.Fatal(err)
			}
			cur = nil
		}
	}
	err := s.Hydrate(b.Context(), w, have, func(m files.HydrateMsg) error {
		switch {
		case m.Entry != nil:
			closeCur()
			e := m.Entry
			local := filepath.Join(dir, filepath.FromSlash(e.Path))
			switch e.Type {
			case files.Dir:
				return os.MkdirAll(local, 0o755)
			case files.File:
				next[e.Path] = e.ETag
				if have[e.Path] == e.ETag {
					return nil
				}
				if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
					return err
				}
				f, err := os.OpenFile(local, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
				cur = f
				return err
			}
		case m.Data != nil:
			_, err := cur.Write(m.Data)
			return err
		case m.Removed != "":
			return os.RemoveAll(filepath.Join(dir, filepath.FromSlash(m.Removed)))
		}
		return nil
	})
	closeCur()
	if err != nil {
		b.Fatal(err)
	}
	return next
}

// BenchmarkHydrate hydrates a workspace of 1,000 files of 4 KiB into a
// directory on a tmpfs, as a sandbox's workspace is: cold (empty
// directory), and again when nothing changed. Its floors, from the same
// run: sequential-gets fetches the 1,000 files one GET after another, as a
// hydration without packs or parallel requests would; write-local writes
// the same files into such a directory, which every hydration into a
// sandbox has to do.
func BenchmarkHydrate(b *testing.B) {
	forEachStoreB(b, func(b *testing.B, st store.Store, newService func(files.Config) *files.Service) {
		s := newService(files.Config{})
		w := ws(b, "bench", "hydrate")
		populate(b, s, w, 1000, 4096)
		b.Run("sequential-gets", func(b *testing.B) {
			var keys []string
			for info, err := range st.List(b.Context(), "accounts/"+w.Account+"/users/"+w.User+"/files/", true) {
				if err != nil {
					b.Fatal(err)
				}
				if !info.IsDir() {
					keys = append(keys, info.Key)
				}
			}
			for b.Loop() {
				for _, k := range keys {
					rc, _, err := st.Get(b.Context(), k)
					if err != nil {
						b.Fatal(err)
					}
					if _, err := io.Copy(io.Discard, rc); err != nil {
						b.Fatal(err)
					}
					rc.Close()
				}
			}
		})
		b.Run("write-local", func(b *testing.B) {
			content := []byte(strings.Repeat("x", 4096))
			for b.Loop() {
				b.StopTimer()
				dir := workspaceDir(b)
				b.StartTimer()
				for i := range 1000 {
					local := filepath.Join(dir, fmt.Sprintf("d%02d", i%50), fmt.Sprintf("f%05d.txt", i))
					if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
						b.Fatal(err)
					}
					if err := os.WriteFile(local, content, 0o644); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		manifest := "accounts/" + w.Account + "/users/" + w.User + "/manifest"
		packs := "accounts/" + w.Account + "/users/" + w.User + "/packs/"
		// coldService hydrates with a service that has not served the
		// workspace yet, after drop deleted what it should not find.
		coldService := func(b *testing.B, drop func()) {
			for b.Loop() {
				b.StopTimer()
				drop()
				fresh := newService(files.Config{ContentCacheBytes: -1})
				dir := workspaceDir(b)
				b.StartTimer()
				if got := hydrateInto(b, fresh, w, dir, nil); len(got) != 1000 {
					b.Fatalf("hydrated %d files", len(got))
				}
				b.StopTimer()
				fresh.Close() // waits for what it keeps
				b.StartTimer()
			}
		}
		dropPacks := func(b *testing.B) {
			var keys []string
			for info, err := range st.List(b.Context(), packs, true) {
				if err != nil {
					b.Fatal(err)
				}
				keys = append(keys, info.Key)
			}
			if err := st.Delete(b.Context(), keys); err != nil {
				b.Fatal(err)
			}
		}
		dropManifest := func(b *testing.B) {
			if err := st.Delete(b.Context(), []string{manifest}); err != nil {
				b.Fatal(err)
			}
		}
		// The listing another service kept and the pack the flush wrote:
		// one GET for the listing, a few for the content.
		b.Run("cold-service", func(b *testing.B) {
			prime := newService(files.Config{ContentCacheBytes: -1})
			hydrateInto(b, prime, w, workspaceDir(b), nil)
			prime.Close()
			coldService(b, func() {})
		})
		// No kept listing: the workspace's files are listed.
		b.Run("cold-service-listed", func(b *testing.B) {
			coldService(b, func() { dropManifest(b) })
		})
		// Neither listing nor packs (the files were written one by one,
		// or both were lost): a listing and one GET per file,
		// storeParallel at once.
		b.Run("cold-service-unpacked", func(b *testing.B) {
			coldService(b, func() { dropManifest(b); dropPacks(b) })
		})
		// A new sandbox (empty directory) of a workspace the service has
		// served before, as each conversation's sandbox is.
		b.Run("cold", func(b *testing.B) {
			hydrateInto(b, s, w, workspaceDir(b), nil)
			for b.Loop() {
				b.StopTimer()
				dir := workspaceDir(b)
				b.StartTimer()
				hydrateInto(b, s, w, dir, nil)
			}
		})
		b.Run("unchanged", func(b *testing.B) {
			dir := workspaceDir(b)
			have := hydrateInto(b, s, w, dir, nil)
			for b.Loop() {
				hydrateInto(b, s, w, dir, have)
			}
		})
	})
}

// BenchmarkFlushOneChanged flushes one changed file of a workspace of
// 10,000 files.
func BenchmarkFlushOneChanged(b *testing.B) {
	forEachStoreB(b, func(b *testing.B, _ store.Store, newService func(files.Config) *files.Service) {
		s := newService(files.Config{})
		w := ws(b, "bench", "flush")
		populate(b, s, w, 10_000, 64)
		i := 0
		for b.Loop() {
			i++
			f := s.BeginFlush(w)
			e := files.Entry{Path: "/d07/f00007.txt", Type: files.File, ModTime: time.Now()}
			if err := f.Put(b.Context(), e, strings.NewReader(fmt.Sprintf("changed %d", i))); err != nil {
				b.Fatal(err)
			}
			if _, err := f.Commit(b.Context()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
