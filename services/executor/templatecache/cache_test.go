package templatecache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/conch-sh/conch/services/internal/image"
	"github.com/conch-sh/conch/services/internal/image/imagetest"
)

// roots serves flattened roots by digest, counting the opens: the
// workspace service's side of the cache, in memory.
type roots struct {
	byDigest map[string][]byte
	opens    atomic.Int32
	gate     chan struct{} // when set, an open waits for it
}

func (r *roots) OpenRoot(_ context.Context, _, _, digest string) (io.ReadCloser, error) {
	r.opens.Add(1)
	if r.gate != nil {
		<-r.gate
	}
	b, ok := r.byDigest[digest]
	if !ok {
		return nil, errors.New("no such root")
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

var lim = image.Limits{MaxBytes: 1 << 30, MaxFiles: 100000}

// root is a flattened root of an image with one file, and its digest.
func root(t *testing.T, body string) (string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	img := imagetest.Minimal(t, imagetest.Options{Files: []imagetest.File{{Path: "marker", Body: body}}})
	r, err := image.Flatten(t.Context(), img, &buf, lim)
	if err != nil {
		t.Fatal(err)
	}
	return r.Digest, buf.Bytes()
}

func TestRootIsFetchedOnceAndChecked(t *testing.T) {
	d1, b1 := root(t, "one")
	src := &roots{byDigest: map[string][]byte{d1: b1}, gate: make(chan struct{})}
	c, err := New(t.TempDir(), "i1", 1<<30, lim, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	dirs := make([]string, 4)
	for i := range dirs {
		wg.Go(func() {
			dir, release, err := c.Root(t.Context(), "acme", "t", d1)
			if err != nil {
				t.Error(err)
				return
			}
			defer release()
			dirs[i] = dir
		})
	}
	close(src.gate)
	wg.Wait()
	if n := src.opens.Load(); n != 1 {
		t.Errorf("four creates opened the root %d times", n)
	}
	if b, err := os.ReadFile(filepath.Join(dirs[0], "marker")); err != nil || string(b) != "one" {
		t.Errorf("marker: %q %v", b, err)
	}

	// A root whose bytes are not its digest's is refused, and leaves
	// nothing behind; the next create tries again.
	bad := "sha256:" + hex.EncodeToString(make([]byte, 32))
	src.byDigest[bad] = b1
	if _, _, err := c.Root(t.Context(), "acme", "t", bad); err == nil || !strings.Contains(err.Error(), "not the") {
		t.Errorf("a root of another digest: %v", err)
	}
	if _, err := os.Stat(c.path(bad)); !os.IsNotExist(err) {
		t.Errorf("the refused root is left: %v", err)
	}
	opens := src.opens.Load()
	_, _, _ = c.Root(t.Context(), "acme", "t", bad)
	if src.opens.Load() != opens+1 {
		t.Error("a failed fetch is not tried again")
	}
	if _, _, err := c.Root(t.Context(), "acme", "t", "sha256:nothex"); err == nil {
		t.Error("a digest of no shape was taken")
	}
}

func TestEviction(t *testing.T) {
	d1, b1 := root(t, "one")
	d2, b2 := root(t, "two")
	sum := sha256.Sum256(b2)
	if d2 != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatal("the digest is not the root's SHA-256")
	}
	src := &roots{byDigest: map[string][]byte{d1: b1, d2: b2}}
	// Room for one root at most: the unused one goes when another comes.
	c, err := New(t.TempDir(), "i1", 1, lim, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir1, release1, err := c.Root(t.Context(), "acme", "a", d1)
	if err != nil {
		t.Fatal(err)
	}
	_, release2, err := c.Root(t.Context(), "acme", "b", d2)
	if err != nil {
		t.Fatal(err)
	}
	// Both are in use: neither goes, whatever the bound.
	if _, err := os.Stat(dir1); err != nil {
		t.Fatalf("a root in use was removed: %v", err)
	}
	release1()
	release2()
	if _, err := os.Stat(dir1); !os.IsNotExist(err) {
		t.Errorf("an unused root beyond the bound is kept: %v", err)
	}
}

// An executor's roots outlive it only until another starts on the host.
func TestSweepRemovesDeadInstances(t *testing.T) {
	dir := t.TempDir()
	d1, b1 := root(t, "one")
	src := &roots{byDigest: map[string][]byte{d1: b1}}
	live, err := New(dir, "live", 1<<30, lim, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	dead, err := New(dir, "dead", 1<<30, lim, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dead.Root(t.Context(), "acme", "t", d1); err != nil {
		t.Fatal(err)
	}
	if _, err := New(dir, "live", 1<<30, lim, src, nil); err == nil {
		t.Error("a second cache of a live instance")
	}
	dead.Close()
	next, err := New(dir, "next", 1<<30, lim, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := os.Stat(filepath.Join(dir, "dead")); !os.IsNotExist(err) {
		t.Errorf("a dead instance's roots are kept: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "live")); err != nil {
		t.Errorf("a live instance's roots were removed: %v", err)
	}
}
