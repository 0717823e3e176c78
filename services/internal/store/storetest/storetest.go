// Package storetest is the contract test suite every store.Store
// implementation runs.
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/conch-sh/conch/services/internal/store"
)

// Run runs the contract suite; newStore returns an empty store.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	t.Run("put get stat keep content and metadata", func(t *testing.T) {
		s := newStore(t)
		mtime := time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.UTC)
		data := []byte("hello, workspace\n")
		info, err := s.Put(t.Context(), "a/b.txt", bytes.NewReader(data), store.PutOptions{Size: -1, Mode: 0o751, ModTime: mtime})
		if err != nil {
			t.Fatal(err)
		}
		want := store.Info{Key: "a/b.txt", Size: int64(len(data)), Mode: 0o751, ModTime: mtime, SHA256: sum(data)}
		checkInfo(t, "put", info, want)
		st, err := s.Stat(t.Context(), "a/b.txt")
		if err != nil {
			t.Fatal(err)
		}
		checkInfo(t, "stat", st, want)
		rc, gi, err := s.Get(t.Context(), "a/b.txt")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("get = %q, %v; want %q", got, err, data)
		}
		checkInfo(t, "get", gi, want)
	})

	t.Run("overwrite replaces content and metadata", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "f", "one", 0o600)
		put(t, s, "f", "second", 0o644)
		if got := read(t, s, "f"); got != "second" {
			t.Fatalf("content = %q", got)
		}
		if st, _ := s.Stat(t.Context(), "f"); st.Mode != 0o644 || st.Size != 6 {
			t.Fatalf("stat = %+v", st)
		}
	})

	// A flush decides from a listing whether a file is still the one a
	// sandbox deleted, so listings carry each file's hash as Stat does,
	// after an overwrite and for published staged content too.
	t.Run("listings carry the content hash", func(t *testing.T) {
		s := newStore(t)
		put(t, s, "d/f", "one", 0o644)
		put(t, s, "d/f", "second", 0o644)
		st, err := s.Stage(t.Context(), "d/g", strings.NewReader("staged"), store.PutOptions{Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Publish(t.Context(), st, store.PutOptions{Mode: 0o644, ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"d/f": sum([]byte("second")), "d/g": sum([]byte("staged"))}
		for _, recursive := range []bool{true, false} {
			got := map[string]string{}
			for info, err := range s.List(t.Context(), "d/", recursive) {
				if err != nil {
					t.Fatal(err)
				}
				got[info.Key] = info.SHA256
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("recursive=%v: hashes listed = %v, want %v", recursive, got, want)
			}
		}
	})

	t.Run("large content streams and hashes", func(t *testing.T) {
		s := newStore(t)
		data := bytes.Repeat([]byte("0123456789abcdef"), (10<<20)/16+7)
		info, err := s.Put(t.Context(), "big/file", bytes.NewReader(data), store.PutOptions{Size: -1, Mode: 0o644, ModTime: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if info.SHA256 != sum(data) || info.Size != int64(len(data)) {
			t.Fatalf("put info = %+v", info)
		}
		if st, err := s.Stat(t.Context(), "big/file"); err != nil || st.SHA256 != sum(data) {
			t.Fatalf("stat = %+v, %v", st, err)
		}
		if got := read(t, s, "big/file"); got != string(data) {
			t.Fatalf("content differs (len %d)", len(got))
		}
		if keys := list(t, s, "", true); !slices.Equal(keys, []string{"big/file"}) {
			t.Fatalf("staging visible in listing: %v", keys)
		}
	})

	t.Run("failed puts leave nothing behind", func(t *testing.T) {
		s := newStore(t)
		data := []byte("content")
		tests := []struct {
			name string
			r    io.Reader
			opts store.PutOptions
		}{
			{"size too small", bytes.NewReader(data), store.PutOptions{Size: 3}},
			{"size too large", bytes.NewReader(data), store.PutOptions{Size: 100}},
			{"wrong hash", bytes.NewReader(data), store.PutOptions{Size: -1, SHA256: sum([]byte("other"))}},
			{"reader fails early", &failingReader{n: 10}, store.PutOptions{Size: -1}},
			{"reader fails after the memory buffer", &failingReader{n: 9 << 20}, store.PutOptions{Size: -1}},
			{"large with wrong hash", io.LimitReader(zeros{}, 9<<20), store.PutOptions{Size: -1, SHA256: sum(data)}},
			{"content for a link", bytes.NewReader(data), store.PutOptions{Size: -1, LinkTarget: "x"}},
		}
		for _, tt := range tests {
			key := "failed/" + strings.ReplaceAll(tt.name, " ", "-")
			if _, err := s.Put(t.Context(), key, tt.r, tt.opts); err == nil {
				t.Errorf("%s: put succeeded", tt.name)
			}
			if _, err := s.Stat(t.Context(), key); !errors.Is(err, store.ErrNotFound) {
				t.Errorf("%s: stat after failed put = %v, want ErrNotFound", tt.name, err)
			}
		}
		if _, err := s.Put(t.Context(), "ok", bytes.NewReader(data), store.PutOptions{Size: int64(len(data)), SHA256: strings.ToUpper(sum(data))}); err != nil {
			t.Errorf("put with right size and hash: %v", err)
		}
		if keys := list(t, s, "", true); !slices.Equal(keys, []string{"ok"}) {
			t.Fatalf("listing after failed puts = %v", keys)
		}
	})

	t.Run("directories and links", func(t *testing.T) {
		s := newStore(t)
		for _, k := range []string{"d/", "d/empty/", "d/x/"} {
			put(t, s, k, "", 0o755)
		}
		put(t, s, "d/x/y", "in a directory", 0o644)
		put(t, s, "d/x-y", "sorts before the prefix", 0o644)
		if _, err := s.Put(t.Context(), "d/link", nil, store.PutOptions{Size: -1, LinkTarget: "../../etc/passwd", Mode: 0o777}); err != nil {
			t.Fatal(err)
		}
		st, err := s.Stat(t.Context(), "d/link")
		if err != nil || st.LinkTarget != "../../etc/passwd" || st.Size != 0 {
			t.Fatalf("link stat = %+v, %v", st, err)
		}
		if st, err := s.Stat(t.Context(), "d/empty/"); err != nil || !st.IsDir() || st.Mode != 0o755 {
			t.Fatalf("dir stat = %+v, %v", st, err)
		}
		if got := list(t, s, "d/", false); !slices.Equal(got, []string{"d/empty/", "d/link", "d/x-y", "d/x/"}) {
			t.Fatalf("non-recursive listing = %v", got)
		}
		if got := list(t, s, "d/", true); !slices.Equal(got, []string{"d/empty/", "d/link", "d/x-y", "d/x/", "d/x/y"}) {
			t.Fatalf("recursive listing = %v", got)
		}
		if got := list(t, s, "", false); !slices.Equal(got, []string{"d/"}) {
			t.Fatalf("root listing = %v", got)
		}
		if err := s.Delete(t.Context(), []string{"d/x/"}); err != nil {
			t.Fatal(err)
		}
		if got := list(t, s, "d/", false); !slices.Equal(got, []string{"d/empty/", "d/link", "d/x-y", "d/x/"}) {
			t.Fatalf("listing without the marker = %v", got)
		}
		if _, err := s.Stat(t.Context(), "d/x/"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("stat of an implicit directory = %v, want ErrNotFound", err)
		}
	})

	t.Run("missing keys", func(t *testing.T) {
		s := newStore(t)
		if _, err := s.Stat(t.Context(), "nope"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("stat = %v", err)
		}
		if _, _, err := s.Get(t.Context(), "no/pe"); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("get = %v", err)
		}
		if err := s.Delete(t.Context(), []string{"nope", "no/pe/"}); err != nil {
			t.Errorf("delete = %v", err)
		}
		if got := list(t, s, "nope/", true); len(got) != 0 {
			t.Errorf("list = %v", got)
		}
	})

	t.Run("invalid keys are refused", func(t *testing.T) {
		s := newStore(t)
		for _, k := range []string{"", "/a", "a//b", "a/./b", "a/../b", "../a", "a/..", ".", "a\x00b", strings.Repeat("k", store.MaxKeyLen+1), "\xff"} {
			if _, err := s.Put(t.Context(), k, strings.NewReader("x"), store.PutOptions{Size: -1}); err == nil {
				t.Errorf("put %q succeeded", k)
			}
			if _, err := s.Stat(t.Context(), k); err == nil || errors.Is(err, store.ErrNotFound) {
				t.Errorf("stat %q = %v, want a key error", k, err)
			}
		}
		for _, p := range []string{"a", "/a/", "a//"} {
			for _, err := range s.List(t.Context(), p, true) {
				if err == nil {
					t.Errorf("list %q succeeded", p)
				}
			}
		}
	})

	t.Run("every name Linux and S3 both hold is kept", func(t *testing.T) {
		s := newStore(t)
		// Segments up to Linux's NAME_MAX, in one- and multi-byte
		// characters, names of dots, and names like the stores' own.
		// (A key and keys below it are never stored together, see
		// package store, so the directories have names of their own.)
		long := func(n int) string { return strings.Repeat("n", n) }
		dir := func(n int) string { return strings.Repeat("d", n) }
		wide := strings.Repeat("ü", 126) + "€" // 255 bytes
		wideDir := strings.Repeat("ä", 126) + "€"
		keys := []string{
			long(253), long(254), long(255), wide,
			dir(255) + "/" + dir(255) + "/f", wideDir + "/" + long(254),
			".../....", "+d/+f", "d.x/f.y", "!/x",
			// The longest key every store holds, of 255-byte segments.
			strings.Repeat(dir(254)+"/", store.PortableKeyLen/255) + long(store.PortableKeyLen%255),
		}
		for _, k := range keys {
			if len(k) > store.PortableKeyLen {
				t.Fatalf("test key of %d bytes is longer than PortableKeyLen", len(k))
			}
			put(t, s, k, "content of "+k[:min(len(k), 8)], 0o640)
			if st, err := s.Stat(t.Context(), k); err != nil || st.Key != k || st.Mode != 0o640 {
				t.Fatalf("stat %d-byte key = %+v, %v", len(k), st, err)
			}
			if got := read(t, s, k); got != "content of "+k[:min(len(k), 8)] {
				t.Fatalf("get %d-byte key = %q", len(k), got)
			}
		}
		marker := dir(255) + "/" + wideDir + "/"
		if _, err := s.Put(t.Context(), marker, nil, store.PutOptions{Mode: 0o755, ModTime: time.Now()}); err != nil {
			t.Fatalf("put a marker of 255-byte segments: %v", err)
		}
		want := append(slices.Clone(keys), marker)
		slices.Sort(want)
		if got := list(t, s, "", true); !slices.Equal(got, want) {
			t.Fatalf("recursive list = %q\nwant %q", got, want)
		}
		top := []string{}
		for _, k := range want {
			if i := strings.IndexByte(k, '/'); i >= 0 {
				k = k[:i+1]
			}
			if !slices.Contains(top, k) {
				top = append(top, k)
			}
		}
		slices.Sort(top)
		if got := list(t, s, "", false); !slices.Equal(got, top) {
			t.Fatalf("list = %q\nwant %q", got, top)
		}
		if got := list(t, s, dir(255)+"/", false); !slices.Equal(got, []string{dir(255) + "/" + dir(255) + "/", marker}) {
			t.Fatalf("list below a 255-byte directory = %q", got)
		}
		if err := s.Delete(t.Context(), want); err != nil {
			t.Fatal(err)
		}
		if got := list(t, s, "", true); len(got) != 0 {
			t.Fatalf("list after deleting every key = %q", got)
		}
	})

	t.Run("staged content is invisible until published", func(t *testing.T) {
		s := newStore(t)
		data := bytes.Repeat([]byte("s"), 6<<20)
		put(t, s, "dst/x", "old", 0o600)
		st, err := s.Stage(t.Context(), "dst/x", bytes.NewReader(data), store.PutOptions{Size: int64(len(data))})
		if err != nil {
			t.Fatal(err)
		}
		if st.SHA256 != sum(data) || st.Size != int64(len(data)) {
			t.Fatalf("staged = %+v", st)
		}
		if got := read(t, s, "dst/x"); got != "old" {
			t.Fatalf("content before publish = %q", got)
		}
		if keys := list(t, s, "", true); !slices.Equal(keys, []string{"dst/x"}) {
			t.Fatalf("staged content listed: %v", keys)
		}
		mtime := time.Unix(1700000000, 0)
		info, err := s.Publish(t.Context(), st, store.PutOptions{Mode: 0o640, ModTime: mtime})
		if err != nil {
			t.Fatal(err)
		}
		want := store.Info{Key: "dst/x", Size: int64(len(data)), Mode: 0o640, ModTime: mtime, SHA256: sum(data)}
		checkInfo(t, "publish", info, want)
		st2, err := s.Stat(t.Context(), "dst/x")
		if err != nil {
			t.Fatal(err)
		}
		checkInfo(t, "stat", st2, want)
		var listed store.Info
		for info, err := range s.List(t.Context(), "dst/", true) {
			if err != nil {
				t.Fatal(err)
			}
			listed = info
		}
		checkInfo(t, "list", listed, want)
		if got := read(t, s, "dst/x"); got != string(data) {
			t.Fatalf("content after publish differs (%d bytes)", len(got))
		}
		// A discarded upload never shows; small content replaces large.
		st3, err := s.Stage(t.Context(), "dst/x", strings.NewReader("discarded"), store.PutOptions{Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Discard(t.Context(), st3); err != nil {
			t.Fatal(err)
		}
		put(t, s, "dst/x", "small again", 0o644)
		if got := read(t, s, "dst/x"); got != "small again" {
			t.Fatalf("content = %q", got)
		}
		for _, tt := range []struct {
			name string
			r    io.Reader
			opts store.PutOptions
		}{
			{"longer than announced", io.LimitReader(zeros{}, 6<<20+1), store.PutOptions{Size: 6 << 20}},
			{"shorter than announced", io.LimitReader(zeros{}, 6<<20-1), store.PutOptions{Size: 6 << 20}},
			{"wrong hash", io.LimitReader(zeros{}, 6<<20), store.PutOptions{Size: 6 << 20, SHA256: sum(data)}},
		} {
			if _, err := s.Stage(t.Context(), "dst/y", tt.r, tt.opts); !errors.Is(err, store.ErrContentMismatch) {
				t.Errorf("stage %s = %v, want ErrContentMismatch", tt.name, err)
			}
			if _, err := s.Put(t.Context(), "dst/y", io.LimitReader(zeros{}, 6<<20+1), store.PutOptions{Size: 6 << 20}); err == nil {
				t.Errorf("put %s succeeded", tt.name)
			}
		}
		if keys := list(t, s, "", true); !slices.Equal(keys, []string{"dst/x"}) {
			t.Fatalf("listing = %v", keys)
		}
	})

	// A refused upload must not stay on disk or in the bucket until the
	// next collection: repeated, it would fill either. Collect with no
	// grace period counts what was left.
	t.Run("a failed stage or put leaves nothing staged", func(t *testing.T) {
		const big = 20 << 20 // several parts of a multipart upload
		for _, tt := range []struct {
			name string
			size int64
			r    func(cancel func()) io.Reader
		}{
			{"body fails, size unknown", -1, func(func()) io.Reader { return &failingReader{n: big} }},
			{"body fails, size known", big + 1, func(func()) io.Reader { return &failingReader{n: big} }},
			{"client gone, size unknown", -1, func(cancel func()) io.Reader { return &cancelingReader{n: big, cancel: cancel} }},
			{"client gone, size known", big + 1, func(cancel func()) io.Reader { return &cancelingReader{n: big, cancel: cancel} }},
			{"longer than announced", big, func(func()) io.Reader { return io.LimitReader(zeros{}, big+1) }},
			{"shorter than announced", big, func(func()) io.Reader { return io.LimitReader(zeros{}, big-1) }},
		} {
			t.Run(tt.name, func(t *testing.T) {
				s := newStore(t)
				for _, op := range []string{"stage", "put"} {
					ctx, cancel := context.WithCancel(t.Context())
					var err error
					if op == "stage" {
						_, err = s.Stage(ctx, "up/f", tt.r(cancel), store.PutOptions{Size: tt.size})
					} else {
						_, err = s.Put(ctx, "up/f", tt.r(cancel), store.PutOptions{Size: tt.size})
					}
					cancel()
					if err == nil {
						t.Fatalf("%s succeeded", op)
					}
					if n, err := s.Collect(t.Context(), 0); err != nil || n != 0 {
						t.Fatalf("after a failed %s, Collect = %d, %v; want nothing left to collect", op, n, err)
					}
				}
				if keys := list(t, s, "", true); len(keys) != 0 {
					t.Fatalf("listing = %v", keys)
				}
			})
		}
	})

	t.Run("collect removes what a crash left staged, nothing else", func(t *testing.T) {
		s := newStore(t)
		ctx := t.Context()
		big := bytes.Repeat([]byte("c"), 6<<20) // large enough for a blob anywhere
		orphan, err := s.Stage(ctx, "gc/orphan", bytes.NewReader(big), store.PutOptions{Size: int64(len(big))})
		if err != nil {
			t.Fatal(err)
		}
		kept, err := s.Stage(ctx, "gc/kept", bytes.NewReader(big), store.PutOptions{Size: int64(len(big))})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Publish(ctx, kept, store.PutOptions{Mode: 0o644, ModTime: time.Now()}); err != nil {
			t.Fatal(err)
		}
		// Younger than the grace period: kept.
		if n, err := s.Collect(ctx, time.Hour); err != nil || n != 0 {
			t.Fatalf("Collect(1h) = %d, %v; want nothing removed", n, err)
		}
		young, err := s.Stage(ctx, "gc/young", strings.NewReader("young"), store.PutOptions{Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1100 * time.Millisecond) // object stores keep whole seconds
		if n, err := s.Collect(ctx, time.Second); err != nil || n != 2 {
			t.Fatalf("Collect = %d, %v; want the two unpublished uploads removed", n, err)
		}
		// Publishing what was collected fails rather than point at nothing.
		for _, st := range []store.Staged{orphan, young} {
			if _, err := s.Publish(ctx, st, store.PutOptions{Mode: 0o644, ModTime: time.Now()}); err == nil {
				t.Fatalf("published %s after its upload was collected", st.Key)
			}
			if _, err := s.Stat(ctx, st.Key); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("%s after a refused publish: %v", st.Key, err)
			}
		}
		rc, info, err := s.Get(ctx, "gc/kept")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, big) || info.Size != int64(len(big)) {
			t.Fatalf("published content after collect: %d bytes", len(got))
		}
	})

	t.Run("more than 1000 keys list and delete", func(t *testing.T) {
		s := newStore(t)
		const n = 1100
		keys := make([]string, n)
		g, ctx := errgroup.WithContext(t.Context())
		g.SetLimit(16)
		for i := range keys {
			keys[i] = fmt.Sprintf("many/%02d/f%05d", i%7, i)
			g.Go(func() error {
				_, err := s.Put(ctx, keys[i], strings.NewReader("x"), store.PutOptions{Size: 1})
				return err
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		put(t, s, "other", "kept", 0o644)
		got := list(t, s, "many/", true)
		slices.Sort(keys)
		if !slices.Equal(got, keys) {
			t.Fatalf("listing has %d keys, want %d", len(got), n)
		}
		if err := s.Delete(t.Context(), got); err != nil {
			t.Fatal(err)
		}
		if got := list(t, s, "", true); !slices.Equal(got, []string{"other"}) {
			t.Fatalf("after delete: %v", head(got))
		}
	})
}

func checkInfo(t *testing.T, what string, got, want store.Info) {
	t.Helper()
	if got.Key != want.Key || got.Size != want.Size || got.Mode != want.Mode || !got.ModTime.Equal(want.ModTime) || got.SHA256 != want.SHA256 {
		t.Errorf("%s info = %+v, want %+v", what, got, want)
	}
}

func put(t *testing.T, s store.Store, key, content string, mode uint32) {
	t.Helper()
	if _, err := s.Put(t.Context(), key, strings.NewReader(content), store.PutOptions{Size: int64(len(content)), Mode: mode, ModTime: time.Now()}); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, s store.Store, key string) string {
	t.Helper()
	rc, _, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func list(t *testing.T, s store.Store, prefix string, recursive bool) []string {
	t.Helper()
	var keys []string
	for info, err := range s.List(t.Context(), prefix, recursive) {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, info.Key)
	}
	return keys
}

func head(s []string) []string { return s[:min(len(s), 5)] }

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("connection reset")
	}
	n := min(len(p), f.n)
	clear(p[:n])
	f.n -= n
	return n, nil
}

// cancelingReader is a client that goes away: after n bytes it cancels
// the upload's context and fails as a canceled stream does.
type cancelingReader struct {
	n      int
	cancel func()
}

func (c *cancelingReader) Read(p []byte) (int, error) {
	if c.n <= 0 {
		c.cancel()
		return 0, context.Canceled
	}
	n := min(len(p), c.n)
	clear(p[:n])
	c.n -= n
	return n, nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
