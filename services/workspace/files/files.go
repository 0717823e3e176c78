// Package files is the domain of the workspace service: one persistent
// workspace per (account, user) in an object store, the file operations of
// the Shell file API, and the sync (hydrate and flush) of the executor.
//
// Layout: a workspace path "/a/b" is the key
// "accounts/<account>/users/<user>/files/a/b"; a directory is the marker
// key ending in '/'. Large content is staged in the store (invisible) while
// it streams in, and published under the lock.
// Every change runs under the workspace's lock in etcd, which also keeps
// the workspace's revision and usage, so quotas hold across processes.
package files

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/internal/contract"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/platform/tenant"
	"github.com/conch-sh/conch/services/internal/quota"
	"github.com/conch-sh/conch/services/internal/store"
)

// Type is the kind of an entry.
type Type int

// The kinds of entries.
const (
	File Type = iota + 1
	Dir
	Symlink
)

// Entry is one file, directory or symlink of a workspace.
type Entry struct {
	Name       string
	Path       string
	Type       Type
	Size       int64
	Mode       uint32
	ModTime    time.Time
	LinkTarget string
	// ETag is the hex SHA-256 of a file's content.
	ETag string
}

// Workspace names a workspace.
type Workspace struct {
	Account, User string
}

// NewWorkspace checks account and user and returns their workspace.
func NewWorkspace(account, user string) (Workspace, error) {
	if !tenant.ValidUserID(account) {
		return Workspace{}, errs.New(errs.Unauthenticated, "no valid account in the call")
	}
	if !tenant.ValidUserID(user) {
		return Workspace{}, errs.New(errs.InvalidArgument, "user (X-Shell-User-Id): must be %s", tenant.UserIDRule)
	}
	return Workspace{Account: account, User: user}, nil
}

func (w Workspace) base() string { return "accounts/" + w.Account + "/users/" + w.User + "/" }
func (w Workspace) root() string { return w.base() + "files/" }

// key is the object of a clean path; dirKey its directory marker.
func (w Workspace) key(p string) string    { return w.root() + p[1:] }
func (w Workspace) dirKey(p string) string { return w.root() + strings.TrimPrefix(p+"/", "/") }

// CleanPath checks a path (see CleanPath) and that its keys fit the
// store: an S3 key holds 1024 bytes, the workspace's own prefix included.
func (w Workspace) CleanPath(field, path string) (string, error) {
	return w.cleanPath(field, path)
}

func (w Workspace) cleanPath(field, path string) (string, error) {
	p, err := CleanPath(field, path)
	if err != nil {
		return "", err
	}
	if len(w.dirKey(p)) > store.PortableKeyLen {
		return "", errs.New(errs.InvalidArgument, "%s: too long for the object store; a path holds at most %d bytes in this workspace", field, store.PortableKeyLen-len(w.root())-1)
	}
	return p, nil
}

// pathOf is the workspace path of a key below root.
func (w Workspace) pathOf(key string) string {
	return "/" + strings.TrimSuffix(strings.TrimPrefix(key, w.root()), "/")
}

// Config tunes the service.
type Config struct {
	// QuotaBytes and QuotaFiles limit each workspace by what it stores;
	// files count every entry (files, directories and links); 0 means the
	// defaults of package quota.
	QuotaBytes, QuotaFiles int64
	// MaxFileSize limits one file written through the file API.
	MaxFileSize int64
	// LockTimeout bounds the wait for a workspace's lock.
	LockTimeout time.Duration
	// LockTTL is the lease of the process's locks, in seconds: how long the
	// locks of a process that died stay held.
	LockTTL int
	// ContentCacheBytes bounds the cache of small files' content served to
	// hydrations; 0 means DefaultContentCache, negative disables it.
	ContentCacheBytes int64
}

// Defaults for Config's zero fields.
const (
	DefaultMaxFileSize  = contract.MaxFileBytes
	DefaultContentCache = 64 << 20
)

// memLimit is the largest content kept in memory before staging it.
const memLimit = 4 << 20

// Service operates on workspaces.
type Service struct {
	store   store.Store
	locks   *locker
	cfg     Config
	cache   manifestCache
	content *contentCache
	// background runs the writes of packs, which Close waits for.
	background sync.WaitGroup
	// packing holds a token per hydration holding packs' content.
	packing chan struct{}
}

// New returns the service over st, coordinating through etcd.
func New(st store.Store, cli *clientv3.Client, cfg Config) (*Service, error) {
	if st == nil || cli == nil {
		return nil, errors.New("files: store and etcd client are required")
	}
	if cfg.QuotaBytes <= 0 {
		cfg.QuotaBytes = quota.DefaultBytes
	}
	if cfg.QuotaFiles <= 0 {
		cfg.QuotaFiles = quota.DefaultFiles
	}
	if cfg.MaxFileSize <= 0 {
		cfg.MaxFileSize = DefaultMaxFileSize
	}
	if cfg.LockTimeout <= 0 {
		cfg.LockTimeout = 30 * time.Second
	}
	if cfg.LockTTL <= 0 {
		cfg.LockTTL = 10
	}
	if cfg.ContentCacheBytes == 0 {
		cfg.ContentCacheBytes = DefaultContentCache
	}
	return &Service{store: st, locks: &locker{cli: cli, ttl: cfg.LockTTL}, cfg: cfg, content: newContentCache(cfg.ContentCacheBytes), packing: make(chan struct{}, packHydrations)}, nil
}

// Close releases the service's etcd session and with it any lock.
func (s *Service) Close() {
	s.background.Wait()
	s.locks.close()
}

// MaxFileSize is the limit of one file written through the file API.
func (s *Service) MaxFileSize() int64 { return s.cfg.MaxFileSize }

func entryOf(ws Workspace, info store.Info) Entry {
	p := ws.pathOf(info.Key)
	e := Entry{Name: base(p), Path: p, Type: File, Size: info.Size, Mode: info.Mode, ModTime: info.ModTime, ETag: info.SHA256}
	switch {
	case info.IsDir():
		e.Type, e.Size, e.ETag = Dir, 0, ""
		if info.Prefix && e.Mode == 0 {
			e.Mode = 0o755
		}
	case info.LinkTarget != "":
		e.Type, e.LinkTarget, e.ETag = Symlink, info.LinkTarget, ""
	}
	return e
}

func rootEntry() Entry { return Entry{Name: "", Path: "/", Type: Dir, Mode: 0o755} }

func storeErr(err error, what, p string) error {
	if errors.Is(err, store.ErrNotFound) {
		return errs.New(errs.NotFound, "%s: no such file or directory", p)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return errs.Wrap(errs.KindOf(err), err, "%s %s", what, p)
	}
	return errs.Wrap(errs.Unavailable, err, "workspace storage: %s %s", what, p)
}

// lookup finds what is at a clean path: a file or link, a directory
// (marker, or only keys below it), or nothing (NotFound).
func (s *Service) lookup(ctx context.Context, ws Workspace, p string) (Entry, error) {
	if p == "/" {
		return rootEntry(), nil
	}
	info, err := s.store.Stat(ctx, ws.key(p))
	if err == nil {
		return entryOf(ws, info), nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return Entry{}, storeErr(err, "stat", p)
	}
	info, err = s.store.Stat(ctx, ws.dirKey(p))
	if err == nil {
		return entryOf(ws, info), nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return Entry{}, storeErr(err, "stat", p)
	}
	for _, err := range s.store.List(ctx, ws.dirKey(p), false) {
		if err != nil {
			return Entry{}, storeErr(err, "list", p)
		}
		return entryOf(ws, store.Info{Key: ws.dirKey(p), Prefix: true}), nil
	}
	return Entry{}, errs.New(errs.NotFound, "%s: no such file or directory", p)
}

// Stat returns the entry at path.
func (s *Service) Stat(ctx context.Context, ws Workspace, path string) (Entry, error) {
	p, err := ws.cleanPath("path", path)
	if err != nil {
		return Entry{}, err
	}
	return s.lookup(ctx, ws, p)
}

// maxListBytes bounds the encoded size of one directory listing, which is
// one gRPC response: about 100,000 entries, within the 32 MiB the router
// accepts (launch's MaxCallRecvMsgSize).
const maxListBytes = 24 << 20

// List returns a directory's entries sorted by name.
func (s *Service) List(ctx context.Context, ws Workspace, path string) ([]Entry, error) {
	p, err := ws.cleanPath("path", path)
	if err != nil {
		return nil, err
	}
	e, err := s.lookup(ctx, ws, p)
	if err != nil {
		return nil, err
	}
	if e.Type != Dir {
		return nil, errs.New(errs.FailedPrecondition, "%s: not a directory", p)
	}
	prefix := ws.dirKey(p)
	if p == "/" {
		prefix = ws.root()
	}
	entries := []Entry{}
	size := 0
	for info, err := range s.store.List(ctx, prefix, false) {
		if err != nil {
			return nil, storeErr(err, "list", p)
		}
		e := entryOf(ws, info)
		// Name, path, link and etag, plus the fixed fields and framing.
		if size += len(e.Name) + len(e.Path) + len(e.LinkTarget) + len(e.ETag) + 48; size > maxListBytes {
			return nil, errs.New(errs.ResourceExhausted, "%s: too many entries for one listing (%d so far); list its subdirectories", p, len(entries))
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// Open opens a regular file for reading. Links are never followed.
func (s *Service) Open(ctx context.Context, ws Workspace, path string) (io.ReadCloser, Entry, error) {
	p, err := ws.cleanPath("path", path)
	if err != nil {
		return nil, Entry{}, err
	}
	return s.open(ctx, ws, p, "")
}

func (s *Service) open(ctx context.Context, ws Workspace, p, etag string) (io.ReadCloser, Entry, error) {
	if p != "/" {
		rc, info, err := s.store.Get(ctx, ws.key(p))
		if err == nil {
			e := entryOf(ws, info)
			switch {
			case e.Type == Symlink:
				rc.Close()
				return nil, Entry{}, errs.New(errs.FailedPrecondition, "%s: is a symbolic link (to %q); links are not followed", p, e.LinkTarget)
			case etag != "" && e.ETag != etag:
				rc.Close()
				return nil, Entry{}, errs.New(errs.NotFound, "%s: the file changed since the link was made", p)
			}
			return rc, e, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, Entry{}, storeErr(err, "read", p)
		}
	}
	e, err := s.lookup(ctx, ws, p)
	if err != nil {
		return nil, Entry{}, err
	}
	return nil, Entry{}, errs.New(errs.FailedPrecondition, "%s: is a directory", e.Path)
}

// WriteOptions describe a file to write.
type WriteOptions struct {
	// Mode is the permission bits; 0 means 0644.
	Mode uint32
	// ModTime is the modification time; zero means now.
	ModTime time.Time
	// Size is the expected size, or -1.
	Size int64
}

// staged is content read and hashed: in memory, or staged in the store.
type staged struct {
	data      []byte
	st        *store.Staged
	size      int64
	sum       string
	published bool
}

// stage reads r whole, up to limit bytes, for key: into memory when it
// fits mem, else into the store's staging. A size known in advance (else
// -1) beyond mem goes straight to the store.
func (s *Service) stage(ctx context.Context, key string, r io.Reader, size, limit int64, expect string, mem int64) (*staged, error) {
	tooBig := func() error {
		return errs.New(errs.ResourceExhausted, "file larger than the limit of %d bytes", limit)
	}
	if size > limit {
		return nil, tooBig()
	}
	buf := &bytes.Buffer{}
	if size < 0 || size <= mem {
		n, err := io.Copy(buf, io.LimitReader(r, min(limit, mem)+1))
		if err != nil {
			return nil, readErr(err)
		}
		if n > limit {
			return nil, tooBig()
		}
		if n <= mem {
			sum := sha256.Sum256(buf.Bytes())
			st := &staged{data: buf.Bytes(), size: n, sum: hex.EncodeToString(sum[:])}
			if size >= 0 && size != n {
				return nil, errs.New(errs.InvalidArgument, "size: the content has %d bytes, not the %d announced", n, size)
			}
			if expect != "" && !strings.EqualFold(expect, st.sum) {
				return nil, errs.New(errs.InvalidArgument, "etag: content has SHA-256 %s, not %s", st.sum, expect)
			}
			return st, nil
		}
	}
	lr := &limitedReader{r: io.MultiReader(buf, r), n: limit}
	st, err := s.store.Stage(ctx, key, lr, store.PutOptions{Size: size, SHA256: expect})
	switch {
	case lr.over:
		return nil, tooBig()
	case lr.err != nil:
		return nil, readErr(lr.err)
	case errors.Is(err, store.ErrContentMismatch):
		return nil, errs.New(errs.InvalidArgument, "the content does not match the size or etag announced: %v", err)
	case err != nil:
		return nil, storeErr(err, "stage", "upload")
	}
	return &staged{st: &st, size: st.Size, sum: st.SHA256}, nil
}

// dropStaged discards staged content that was not published.
func (s *Service) dropStaged(ctx context.Context, st *staged) {
	if st == nil || st.st == nil || st.published {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_ = s.store.Discard(ctx, *st.st)
}

// commitStaged makes staged content visible at key.
func (s *Service) commitStaged(ctx context.Context, key string, st *staged, mode uint32, mtime time.Time) (store.Info, error) {
	o := store.PutOptions{Size: st.size, Mode: mode, ModTime: mtime, SHA256: st.sum}
	if st.st == nil {
		info, err := s.store.Put(ctx, key, bytes.NewReader(st.data), o)
		if err == nil {
			s.content.put(st.sum, st.data)
		}
		return info, err
	}
	if st.st.Key != key {
		return store.Info{}, fmt.Errorf("workspace: content staged for %s, not %s", st.st.Key, key)
	}
	st.published = true
	return s.store.Publish(ctx, *st.st, o)
}

func readErr(err error) error {
	if k := errs.KindOf(err); k != errs.Internal {
		return errs.Wrap(k, err, "read upload")
	}
	return errs.Wrap(errs.InvalidArgument, err, "read upload")
}

type limitedReader struct {
	r    io.Reader
	n    int64
	over bool
	err  error
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		l.over = true
		return 0, errors.New("file larger than the limit")
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		l.over = true
		return 0, errors.New("file larger than the limit")
	}
	if err != nil && err != io.EOF {
		l.err = err
	}
	return n, err
}

// Write stores a file from r, creating parent directories. Nothing is
// visible until the whole content arrived; a failed write leaves nothing.
func (s *Service) Write(ctx context.Context, ws Workspace, path string, r io.Reader, o WriteOptions) (_ Entry, err error) {
	ctx, end := span(ctx, "write", ws)
	defer end(&err)
	p, err := ws.cleanPath("path", path)
	if err != nil {
		return Entry{}, err
	}
	if p == "/" {
		return Entry{}, errs.New(errs.InvalidArgument, "path: / is the workspace's root directory, not a file")
	}
	if o.Mode == 0 {
		o.Mode = 0o644
	}
	if o.Mode > 0o7777 {
		return Entry{}, errs.New(errs.InvalidArgument, "mode: %o is not a permission mode", o.Mode)
	}
	if o.ModTime.IsZero() {
		o.ModTime = time.Now()
	}
	if o.Size > s.cfg.MaxFileSize {
		return Entry{}, errs.New(errs.ResourceExhausted, "size: %d bytes is more than the limit of %d", o.Size, s.cfg.MaxFileSize)
	}
	if err := s.fits(ctx, ws, p, o.Size); err != nil {
		return Entry{}, err
	}
	st, err := s.stage(ctx, ws.key(p), r, o.Size, s.cfg.MaxFileSize, "", memLimit)
	if err != nil {
		return Entry{}, err
	}
	defer s.dropStaged(ctx, st)
	if o.Size >= 0 && o.Size != st.size {
		return Entry{}, errs.New(errs.InvalidArgument, "size: the upload had %d bytes, not the %d announced", st.size, o.Size)
	}
	var out Entry
	err = s.change(ctx, ws, func(c *changeSet) error {
		// Refuse before creating anything: a directory in the way, or a
		// file that would not fit the quota.
		old, err := c.existing(p)
		if err != nil {
			return err
		}
		if old.Type == Dir {
			return errs.New(errs.FailedPrecondition, "%s: is a directory", p)
		}
		c.add(st.size-old.Size, boolInt(old.Type == 0))
		if err := c.checkQuota(); err != nil {
			return err
		}
		if err := c.makeDirs(ancestors(p)); err != nil {
			return err
		}
		c.applied = true
		info, err := s.commitStaged(ctx, ws.key(p), st, o.Mode, o.ModTime)
		if err != nil {
			return storeErr(err, "write", p)
		}
		out = entryOf(ws, info)
		return nil
	})
	return out, err
}

// fits refuses early, before a byte is read, a write of size bytes (-1:
// unknown) at p that the last recorded usage says cannot fit the quota.
// The check under the lock stays the one that counts; this one only
// spares the client sending, and the store staging, what would be refused.
func (s *Service) fits(ctx context.Context, ws Workspace, p string, size int64) error {
	if size < 0 {
		return nil
	}
	st, ok, err := s.locks.peek(ctx, ws)
	if err != nil || !ok || st.Dirty {
		return err
	}
	used := st.Bytes
	if info, err := s.store.Stat(ctx, ws.key(p)); err == nil {
		used -= info.Size
	}
	if used+size > s.cfg.QuotaBytes && used+size > st.Bytes {
		return quota.Exceeded("%d bytes needed, the quota is %d bytes (%d used); delete files to make room", used+size, s.cfg.QuotaBytes, st.Bytes)
	}
	return nil
}

// Mkdir creates a directory and its parents; an existing directory is fine.
func (s *Service) Mkdir(ctx context.Context, ws Workspace, path string) (_ Entry, err error) {
	ctx, end := span(ctx, "mkdir", ws)
	defer end(&err)
	p, err := ws.cleanPath("path", path)
	if err != nil {
		return Entry{}, err
	}
	if p == "/" {
		return rootEntry(), nil
	}
	var out Entry
	err = s.change(ctx, ws, func(c *changeSet) error {
		if err := c.makeDirs(append(ancestors(p), p)); err != nil {
			return err
		}
		info, err := s.store.Stat(ctx, ws.dirKey(p))
		if err != nil {
			return storeErr(err, "stat", p)
		}
		out = entryOf(ws, info)
		return nil
	})
	return out, err
}

// Delete deletes a file, link or directory (with recursive, its content;
// "/" empties the workspace) and returns how many entries went.
func (s *Service) Delete(ctx context.Context, ws Workspace, path string, recursive bool) (_ int64, err error) {
	ctx, end := span(ctx, "delete", ws)
	defer end(&err)
	p, err := ws.cleanPath("path", path)
	if err != nil {
		return 0, err
	}
	if p == "/" && !recursive {
		return 0, errs.New(errs.FailedPrecondition, "deleting / empties the whole workspace and needs recursive=true")
	}
	var n int64
	err = s.change(ctx, ws, func(c *changeSet) error {
		var err error
		n, err = c.remove(p, recursive, true)
		if err == nil && p == "/" {
			// The packs hold copies of the files' content.
			if err := s.dropPacks(ctx, ws); err != nil {
				return storeErr(err, "delete", "/")
			}
		}
		return err
	})
	return n, err
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// OpenVersion opens a regular file only if its content still has etag.
func (s *Service) OpenVersion(ctx context.Context, ws Workspace, path, etag string) (io.ReadCloser, Entry, error) {
	p, err := ws.cleanPath("path", path)
	if err != nil {
		return nil, Entry{}, err
	}
	if etag == "" {
		return nil, Entry{}, errs.New(errs.InvalidArgument, "etag: required")
	}
	return s.open(ctx, ws, p, etag)
}

// Usage is a workspace's usage and quota.
type Usage struct {
	Bytes, Files           int64
	QuotaBytes, QuotaFiles int64
}

// Usage returns ws's usage as of its last change (counted when unknown).
func (s *Service) Usage(ctx context.Context, ws Workspace) (Usage, error) {
	u := Usage{QuotaBytes: s.cfg.QuotaBytes, QuotaFiles: s.cfg.QuotaFiles}
	h, err := s.locks.lock(ctx, ws, s.cfg.LockTimeout)
	if err != nil {
		return u, err
	}
	defer h.unlock(ctx)
	if h.has && !h.st.Dirty {
		u.Bytes, u.Files = h.st.Bytes, h.st.Files
		return u, nil
	}
	u.Bytes, u.Files, err = s.usage(ctx, ws)
	return u, err
}
