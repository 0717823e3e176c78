package files

import (
	"context"
	"errors"
	"time"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/quota"
	"github.com/conch-sh/conch/services/internal/store"
)

// changeSet is one change of a workspace under its lock: the operations
// it applies adjust the usage, which is checked against the quota before
// anything is applied and written back with the new revision at the end.
type changeSet struct {
	ctx   context.Context
	s     *Service
	ws    Workspace
	bytes int64
	files int64
	start state
	// applied is set before the first write to the store.
	applied bool
	// dirty marks a change that failed after applying part of itself.
	dirty bool
	// quotaBytes and quotaFiles are what the workspace may hold after the
	// change: the service's quota unless a flush narrowed it.
	quotaBytes, quotaFiles int64
}

// change runs fn under ws's lock. The state is marked dirty before fn
// runs, so a process that dies half-way makes the next change recount.
func (s *Service) change(ctx context.Context, ws Workspace, fn func(c *changeSet) error) error {
	h, err := s.locks.lock(ctx, ws, s.cfg.LockTimeout)
	if err != nil {
		return err
	}
	defer h.unlock(ctx)
	st := h.st
	if !h.has || st.Dirty {
		if st.Bytes, st.Files, err = s.usage(ctx, ws); err != nil {
			return err
		}
	}
	st.Dirty = true
	if err := h.put(ctx, st); err != nil {
		return err
	}
	c := &changeSet{ctx: ctx, s: s, ws: ws, start: st, bytes: st.Bytes, files: st.Files, quotaBytes: s.cfg.QuotaBytes, quotaFiles: s.cfg.QuotaFiles}
	ferr := fn(c)
	// Whether or not fn failed half-way, the recorded usage must match
	// what is stored: a failure after some operations applied recounts.
	next := state{Revision: st.Revision, Bytes: c.bytes, Files: c.files}
	switch {
	case ferr == nil:
		next.Revision++
	case c.applied || c.dirty:
		next.Dirty = true
		next.Revision++
	default:
		next.Bytes, next.Files = st.Bytes, st.Files
	}
	if err := h.put(context.WithoutCancel(ctx), next); err != nil && ferr == nil {
		return err
	}
	return ferr
}

// usage counts a workspace's stored bytes and entries.
func (s *Service) usage(ctx context.Context, ws Workspace) (bytes, files int64, err error) {
	for info, err := range s.store.List(ctx, ws.root(), true) {
		if err != nil {
			return 0, 0, storeErr(err, "count", "/")
		}
		bytes += info.Size
		files++
	}
	return bytes, files, nil
}

func (c *changeSet) add(bytes, files int64) {
	c.bytes += bytes
	c.files += files
}

func (c *changeSet) revision() int64 { return c.start.Revision + 1 }

// checkQuota fails when the usage after the change would exceed the quota
// while growing.
func (c *changeSet) checkQuota() error {
	if c.bytes > c.quotaBytes && c.bytes > c.start.Bytes {
		return quota.Exceeded("%d bytes needed, the quota is %d bytes (%d used before this change); delete files to make room", c.bytes, c.quotaBytes, c.start.Bytes)
	}
	if c.files > c.quotaFiles && c.files > c.start.Files {
		return quota.Exceeded("%d files and directories needed, the quota is %d (%d used before this change); delete files to make room", c.files, c.quotaFiles, c.start.Files)
	}
	return nil
}

// existing returns what is at p (Type 0 when nothing).
func (c *changeSet) existing(p string) (Entry, error) {
	e, err := c.s.lookup(c.ctx, c.ws, p)
	if errs.KindOf(err) == errs.NotFound {
		return Entry{}, nil
	}
	return e, err
}

// makeDirs makes sure every path of dirs (parents first) is a directory
// with a marker. It is all or nothing as far as it can be: a file in the
// way, or a quota the new directories would exceed, refuses before the
// first marker is written.
func (c *changeSet) makeDirs(dirs []string) error {
	var missing []string
	for _, d := range dirs {
		info, err := c.s.store.Stat(c.ctx, c.ws.dirKey(d))
		if err == nil && info.IsDir() {
			continue
		}
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return storeErr(err, "stat", d)
		}
		if _, err := c.s.store.Stat(c.ctx, c.ws.key(d)); err == nil {
			return errs.New(errs.FailedPrecondition, "%s: a file exists there, not a directory", d)
		} else if !errors.Is(err, store.ErrNotFound) {
			return storeErr(err, "stat", d)
		}
		missing = append(missing, d)
	}
	c.add(0, int64(len(missing)))
	if err := c.checkQuota(); err != nil {
		c.add(0, -int64(len(missing)))
		return err
	}
	for i, d := range missing {
		c.applied = true
		if _, err := c.s.store.Put(c.ctx, c.ws.dirKey(d), nil, store.PutOptions{Size: 0, Mode: 0o755, ModTime: time.Now()}); err != nil {
			c.add(0, -int64(len(missing)-i))
			return storeErr(err, "mkdir", d)
		}
	}
	return nil
}

// remove deletes what is at p and returns how many entries went; a
// directory needs recursive unless empty. With mustExist a missing p is
// NotFound.
func (c *changeSet) remove(p string, recursive, mustExist bool) (int64, error) {
	if p != "/" {
		if info, err := c.s.store.Stat(c.ctx, c.ws.key(p)); err == nil {
			c.applied = true
			if err := c.s.store.Delete(c.ctx, []string{info.Key}); err != nil {
				return 0, storeErr(err, "delete", p)
			}
			c.add(-info.Size, -1)
			return 1, nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return 0, storeErr(err, "stat", p)
		}
	}
	prefix := c.ws.dirKey(p)
	if p == "/" {
		prefix = c.ws.root()
	}
	var keys []string
	var size int64
	for info, err := range c.s.store.List(c.ctx, prefix, true) {
		if err != nil {
			return 0, storeErr(err, "list", p)
		}
		if !recursive {
			return 0, errs.New(errs.FailedPrecondition, "%s: directory not empty; delete with recursive=true", p)
		}
		keys = append(keys, info.Key)
		size += info.Size
	}
	if p != "/" {
		if _, err := c.s.store.Stat(c.ctx, prefix); err == nil {
			keys = append(keys, prefix)
		} else if !errors.Is(err, store.ErrNotFound) {
			return 0, storeErr(err, "stat", p)
		} else if len(keys) == 0 && mustExist {
			return 0, errs.New(errs.NotFound, "%s: no such file or directory", p)
		}
	}
	// Delete children first and the marker last, so that a failure never
	// leaves children without their directory.
	c.applied = true
	for i := 0; i < len(keys); i += 1000 {
		batch := keys[i:min(i+1000, len(keys))]
		if err := c.s.store.Delete(c.ctx, batch); err != nil {
			c.dirty = true
			return 0, storeErr(err, "delete", p)
		}
	}
	c.add(-size, -int64(len(keys)))
	return int64(len(keys)), nil
}
