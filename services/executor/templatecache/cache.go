// Package templatecache keeps templates' roots on an executor's local
// disk, by digest: each is fetched and unpacked once, shared read-only by
// every sandbox started from it, and removed, least recently used first,
// when the cache outgrows its bound and no sandbox holds it.
//
// A root is content-addressed: the digest is the SHA-256 of the root's
// archive, checked while it is unpacked, so two accounts whose templates
// have one digest have the same bytes, and sharing the unpacked copy
// shows neither anything of the other's.
package templatecache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/conch-sh/conch/services/internal/image"
	"github.com/conch-sh/conch/services/internal/platform/dirlock"
)

// Source opens the root archive of an account's template.
type Source interface {
	OpenRoot(ctx context.Context, account, name, digest string) (io.ReadCloser, error)
}

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Cache is a directory of unpacked roots.
type Cache struct {
	dir    string
	inst   *dirlock.Instance
	max    int64
	limits image.Limits
	src    Source
	log    *slog.Logger

	mu      sync.Mutex
	entries map[string]*entry
	used    int64
}

type entry struct {
	size     int64
	users    int
	lastUsed time.Time
	ready    chan struct{} // closed once fetched, or failed
	err      error
}

// New returns the cache of the executor instance in dir, which the
// executors of a host share: each keeps its roots in a directory of its
// own, held by a lock for as long as it runs, and removes those of
// instances that no longer run. maxBytes bounds the roots kept that no
// sandbox uses; limits bound each root as the workspace service does.
func New(dir, instance string, maxBytes int64, limits image.Limits, src Source, log *slog.Logger) (*Cache, error) {
	if log == nil {
		log = slog.Default()
	}
	// Sandboxes' uids bind roots from below it: it must be searchable,
	// never listable or writable by them.
	inst, stale, err := dirlock.TakeInstance(dir, instance, os.RemoveAll)
	if err != nil {
		return nil, fmt.Errorf("templatecache: %w", err)
	}
	if stale != nil {
		log.Warn("stale template roots not removed", "error", stale)
	}
	return &Cache{dir: inst.Dir, inst: inst, max: maxBytes, limits: limits, src: src, log: log, entries: map[string]*entry{}}, nil
}

// Close frees the instance's lock: the next executor to start on the
// host removes its roots, which sandboxes still ending may hold now.
func (c *Cache) Close() error {
	return c.inst.Close()
}

// Root returns the unpacked root of account's template name at digest,
// fetching it when this executor has none, and a release the caller
// calls once no sandbox uses it any more.
func (c *Cache) Root(ctx context.Context, account, name, digest string) (string, func(), error) {
	if !digestPattern.MatchString(digest) {
		return "", nil, fmt.Errorf("templatecache: %q is not a sha256 digest", digest)
	}
	c.mu.Lock()
	e, ok := c.entries[digest]
	if !ok {
		e = &entry{ready: make(chan struct{})}
		c.entries[digest] = e
		go c.fetch(context.WithoutCancel(ctx), account, name, digest, e)
	}
	e.users++
	c.mu.Unlock()
	release := sync.OnceFunc(func() {
		c.mu.Lock()
		e.users--
		e.lastUsed = time.Now()
		c.mu.Unlock()
		c.evict()
	})
	select {
	case <-e.ready:
	case <-ctx.Done():
		release()
		return "", nil, ctx.Err()
	}
	if e.err != nil {
		release()
		return "", nil, e.err
	}
	return filepath.Join(c.path(digest), "root"), release, nil
}

func (c *Cache) path(digest string) string {
	return filepath.Join(c.dir, strings.TrimPrefix(digest, "sha256:"))
}

// fetch unpacks the root of digest, checking its hash as it goes; a
// failure is every waiter's and leaves nothing behind.
func (c *Cache) fetch(ctx context.Context, account, name, digest string, e *entry) {
	size, err := c.unpack(ctx, account, name, digest)
	c.mu.Lock()
	if err != nil {
		e.err = err
		delete(c.entries, digest) // the next create tries again
	} else {
		e.size, e.lastUsed = size, time.Now()
		c.used += size
	}
	c.mu.Unlock()
	close(e.ready)
	if err != nil {
		c.log.Warn("template root not fetched", "template", name, "digest", digest, "error", err)
	}
	c.evict()
}

func (c *Cache) unpack(ctx context.Context, account, name, digest string) (int64, error) {
	p := c.path(digest)
	_ = os.RemoveAll(p)
	if err := os.Mkdir(p, 0o711); err != nil {
		return 0, fmt.Errorf("templatecache: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(p)
		}
	}()
	root := filepath.Join(p, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		return 0, fmt.Errorf("templatecache: %w", err)
	}
	rc, err := c.src.OpenRoot(ctx, account, name, digest)
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	// The archive is hashed, and counted, as it is read: its size is the
	// root's in the cache's bound (a little over its files', for the
	// archive's headers), with no walk of the tree it made.
	h := &countedHash{Hash: sha256.New()}
	if err := image.Extract(ctx, io.TeeReader(rc, h), root, c.limits); err != nil {
		return 0, fmt.Errorf("templatecache: unpack %s: %w", name, err)
	}
	// What Extract left unread (padding) is hashed too.
	if _, err := io.Copy(h, rc); err != nil {
		return 0, fmt.Errorf("templatecache: read %s: %w", name, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return 0, fmt.Errorf("templatecache: root of %s is %s, not the %s its template names", name, got, digest)
	}
	ok = true
	return h.n, nil
}

// evict removes the least recently used roots no sandbox holds until the
// cache is within its bound.
func (c *Cache) evict() {
	for {
		c.mu.Lock()
		if c.used <= c.max {
			c.mu.Unlock()
			return
		}
		var oldest string
		for d, e := range c.entries {
			if e.users > 0 || !isClosed(e.ready) || e.err != nil {
				continue
			}
			if oldest == "" || e.lastUsed.Before(c.entries[oldest].lastUsed) {
				oldest = d
			}
		}
		if oldest == "" {
			c.mu.Unlock()
			return
		}
		e := c.entries[oldest]
		delete(c.entries, oldest)
		c.used -= e.size
		c.mu.Unlock()
		if err := os.RemoveAll(c.path(oldest)); err != nil {
			c.log.Warn("template root not removed", "digest", oldest, "error", err)
		}
	}
}

// Used is the bytes of the roots the cache holds.
func (c *Cache) Used() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// countedHash is a hash that counts what it was written.
type countedHash struct {
	hash.Hash
	n int64
}

func (c *countedHash) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.Hash.Write(p)
}
