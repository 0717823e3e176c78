package files

import (
	"context"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"

	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/quota"
	"github.com/conch-sh/conch/services/internal/store"
)

// Flush is a sandbox's set of changes to a workspace: content is staged as
// it arrives, and Commit applies everything under the workspace's lock
// after checking the quota, so an overrun changes nothing.
type Flush struct {
	s      *Service
	ws     Workspace
	ops    []flushOp
	mem    int64
	staged []*staged
	done   bool
	// sent is the file content staged so far, limit what it may reach
	// (0 until the first file): content beyond it could never be
	// committed, so it is refused before it is stored.
	sent, limit int64
	// exact: a removal names one entry, see ExactRemovals.
	exact bool
	// quotaBytes and quotaFiles are the quota this flush commits under:
	// the service's, or less (see Narrow).
	quotaBytes, quotaFiles int64
}

type flushOp struct {
	remove string // path to remove, or
	had    Type   // what the sender last synced at remove, or 0
	etag   string // of the file the sender last synced at remove, or ""
	e      Entry  // an entry to create or replace
	st     *staged
}

// FlushResult is the workspace after a commit.
type FlushResult struct {
	Revision     int64
	Bytes, Files int64
	// Conflicts are what the flush kept of the workspace against the
	// sender's changes: removals not applied because the workspace
	// changed since the sender's copy, and entries moved aside to make
	// way for the sender's; everything else was applied.
	Conflicts []Conflict
}

// Conflict is what a flush kept at a path against the sender's change,
// and why or where.
type Conflict struct {
	Path, Reason string
}

// Reasons of conflicts, as the sender shows them.
const (
	// ChangedSince: the file was replaced since the sender synced it, or
	// the directory holds entries the sender never saw.
	ChangedSince = "changed in the workspace since this sandbox loaded it"
)

// movedAside is the reason of a conflict whose entry, of the kind given,
// was moved to the name given to make way for the sender's.
func movedAside(kind, name string) string {
	return "the " + kind + " written here in the workspace since this sandbox loaded it, as " + name
}

// conflictTime is the time in the name of an entry moved aside,
// <name>.conflict-<time>: UTC, to the second, sorting as it reads.
const conflictTime = "20060102T150405Z"

// BeginFlush starts a flush of ws.
func (s *Service) BeginFlush(ws Workspace) *Flush {
	return &Flush{s: s, ws: ws, quotaBytes: s.cfg.QuotaBytes, quotaFiles: s.cfg.QuotaFiles}
}

// Narrow lowers the quota this flush commits under to bytes and files
// where they are smaller than the service's (0 leaves one as it is): a
// sandbox's gateway may allow less than the service does, never more.
func (f *Flush) Narrow(bytes, files int64) {
	if bytes > 0 {
		f.quotaBytes = min(f.quotaBytes, bytes)
	}
	if files > 0 {
		f.quotaFiles = min(f.quotaFiles, files)
	}
}

// Put adds an entry; a file's content is read from r, which must match
// e.ETag when set.
func (f *Flush) Put(ctx context.Context, e Entry, r io.Reader) error {
	p, err := f.ws.cleanPath("entry.path", e.Path)
	if err != nil {
		return err
	}
	if p == "/" {
		return errs.New(errs.InvalidArgument, "entry.path: / cannot be replaced")
	}
	e.Path, e.Name = p, base(p)
	if e.Mode > 0o7777 {
		return errs.New(errs.InvalidArgument, "entry.mode: %o is not a permission mode (%s)", e.Mode, p)
	}
	if e.ModTime.IsZero() {
		e.ModTime = time.Now()
	}
	op := flushOp{e: e}
	switch e.Type {
	case File:
		if e.Mode == 0 {
			e.Mode, op.e.Mode = 0o644, 0o644
		}
		mem := int64(0)
		if f.mem < flushMemory {
			mem = min(prefetchMax, flushMemory-f.mem)
		}
		size := int64(-1)
		if e.Size > 0 {
			size = e.Size
		}
		if f.limit == 0 {
			if f.limit, err = f.stageLimit(ctx); err != nil {
				return err
			}
		}
		left := f.limit - f.sent
		if size > left {
			return f.overQuota(p, f.sent+size)
		}
		st, err := f.s.stage(ctx, f.ws.key(p), r, size, left, e.ETag, mem)
		if errs.KindOf(err) == errs.ResourceExhausted {
			return f.overQuota(p, f.sent+left+1)
		}
		if err != nil {
			return wrapKind(err, "entry %s", p)
		}
		f.sent += st.size
		if st.st != nil {
			f.staged = append(f.staged, st)
		} else {
			f.mem += st.size
		}
		op.st = st
	case Dir:
		if e.Mode == 0 {
			op.e.Mode = 0o755
		}
	case Symlink:
		if e.LinkTarget == "" || len(e.LinkTarget) > MaxLinkLen || strings.ContainsRune(e.LinkTarget, 0) {
			return errs.New(errs.InvalidArgument, "entry %s: link_target must be 1-%d bytes without NUL", p, MaxLinkLen)
		}
		op.e.Mode = 0o777
	default:
		return errs.New(errs.InvalidArgument, "entry %s: type must be file, dir or symlink", p)
	}
	f.ops = append(f.ops, op)
	return nil
}

// stageLimit is how much file content one flush of ws may carry: every
// file it sends is stored whole, so more than the quota could only commit
// into a workspace already above it, and then not beyond its usage.
func (f *Flush) stageLimit(ctx context.Context) (int64, error) {
	st, ok, err := f.s.locks.peek(ctx, f.ws)
	if err != nil {
		return 0, err
	}
	if ok && st.Bytes > f.quotaBytes {
		return st.Bytes, nil
	}
	return f.quotaBytes, nil
}

// overQuota refuses a flush whose files carry at least need bytes.
func (f *Flush) overQuota(p string, need int64) error {
	return quota.Exceeded("%s: the files of this change hold at least %d bytes (sparse files count their whole length), the quota is %d bytes; delete files to make room", p, need, f.quotaBytes)
}

// Remove adds the removal of a path (recursively for a directory); a path
// that does not exist is fine.
func (f *Flush) Remove(path string) error { return f.RemoveSynced(path, 0, "") }

// RemoveSynced adds the removal of a path where the sender last synced
// an entry of type had, a file with etag (0 and empty: whatever is
// there). A file stored under another etag, or an entry of another kind
// (a directory where the sender had a file, or the reverse), was
// written since, e.g. through the file API: it is kept and reported in
// the result's conflicts rather than lost to a delete of an older copy.
func (f *Flush) RemoveSynced(path string, had Type, etag string) error {
	p, err := f.ws.cleanPath("removed", path)
	if err != nil {
		return err
	}
	if had < 0 || had > Symlink {
		return errs.New(errs.InvalidArgument, "removal %s: type must be file, dir or symlink", p)
	}
	f.ops = append(f.ops, flushOp{remove: p, had: had, etag: etag})
	return nil
}

// ExactRemovals makes each removal name one entry the sender saw rather
// than a tree: a directory goes only when nothing is left below it after
// the flush's other removals. A sandbox that deletes a directory lists
// every path it had in it, so what was added to the workspace since its
// copy, e.g. uploaded through the file API, survives instead of going
// with a tree the sandbox never saw whole.
func (f *Flush) ExactRemovals() { f.exact = true }

// Abort drops what was staged. It is a no-op after Commit.
func (f *Flush) Abort(ctx context.Context) {
	if f.done {
		return
	}
	f.done = true
	for _, st := range f.staged {
		f.s.dropStaged(ctx, st)
	}
}

// Commit applies the flush under the workspace's lock.
func (f *Flush) Commit(ctx context.Context) (_ FlushResult, err error) {
	ctx, end := span(ctx, "flush.commit", f.ws, attribute.Int("conch.ops", len(f.ops)))
	defer end(&err)
	if f.done {
		return FlushResult{}, errs.New(errs.FailedPrecondition, "flush already committed or aborted")
	}
	defer f.Abort(ctx)
	var res FlushResult
	err = f.s.change(ctx, f.ws, func(c *changeSet) error {
		c.quotaBytes, c.quotaFiles = f.quotaBytes, f.quotaFiles
		sim := &simulation{c: c, touched: map[string]*store.Info{}, at: time.Now()}
		if len(f.ops) > 16 {
			if err := sim.loadAll(); err != nil {
				return err
			}
		}
		// Simulate first: conflicts and the quota are checked before
		// anything changes.
		plans := make([]plan, len(f.ops))
		var conflicts []Conflict
		refuse := func(err error) error {
			c.bytes, c.files = c.start.Bytes, c.start.Files
			return err
		}
		for i, op := range f.ops {
			var err error
			switch {
			case op.remove != "" && (f.exact || op.etag != "" || op.had != 0):
				var kept bool
				plans[i].remove, kept, err = sim.removeEntry(op.remove, op.had, op.etag)
				if kept && !reportedBelow(conflicts, op.remove) {
					conflicts = append(conflicts, Conflict{Path: op.remove, Reason: ChangedSince})
				}
			case op.remove != "":
				plans[i].remove, err = sim.remove(op.remove)
			default:
				var moved []Conflict
				plans[i].aside, moved, err = sim.put(op)
				for _, m := range moved {
					conflicts = supersede(conflicts, m)
				}
			}
			if err != nil {
				return refuse(err)
			}
		}
		if err := c.checkQuota(); err != nil {
			return refuse(err)
		}
		c.applied = true
		if err := f.applyAll(ctx, plans); err != nil {
			c.dirty = true
			return err
		}
		res = FlushResult{Revision: c.revision(), Bytes: c.bytes, Files: c.files, Conflicts: conflicts}
		return nil
	})
	if err == nil {
		f.pack(ctx, res.Revision)
	}
	return res, err
}

// plan is what applying one op takes besides the op itself: the keys a
// removal deletes, or the entries a write moves out of its way first.
type plan struct {
	remove []string
	aside  []move
}

// move is a stored object moved aside, from one key to another.
type move struct{ from, to string }

// applyAll applies the ops in order, except that a run of files is
// written storeParallel at once: the simulation has checked that none of
// them is in another's way, they name different paths, and each write is
// atomic on its own, so the
// order within a run changes nothing a reader could see at the end. A
// failure stops the flush after the run's writes in flight.
func (f *Flush) applyAll(ctx context.Context, plans []plan) error {
	for i := 0; i < len(f.ops); {
		// A run ends before a second write of the same path, whose
		// order matters, and before a write that moves entries aside.
		j, paths := i, map[string]bool{}
		for j < len(f.ops) && f.ops[j].remove == "" && f.ops[j].e.Type == File && !paths[f.ops[j].e.Path] && len(plans[j].aside) == 0 {
			paths[f.ops[j].e.Path] = true
			j++
		}
		if j-i < 2 {
			if err := f.apply(ctx, f.ops[i], plans[i]); err != nil {
				return err
			}
			i++
			continue
		}
		if err := f.applyFiles(ctx, f.ops[i:j]); err != nil {
			return err
		}
		i = j
	}
	return nil
}

// applyFiles writes file ops in parallel and returns the first error.
func (f *Flush) applyFiles(ctx context.Context, ops []flushOp) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		sem   = make(chan struct{}, storeParallel)
	)
	for _, op := range ops {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f.apply(ctx, op, plan{}); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// pack writes the small files of a committed flush as a pack, when there
// are enough of them.
func (f *Flush) pack(ctx context.Context, rev int64) {
	files, n := map[string][]byte{}, 0
	for _, op := range f.ops {
		if op.st != nil && op.st.st == nil && op.st.size <= packFileMax {
			files[op.st.sum] = op.st.data
			n++
		}
	}
	if n >= packMinFiles {
		f.s.packLater(ctx, f.ws, rev, files, nil)
	}
}

// supersede adds the conflict of an entry moved aside, which replaces
// those reported at or below its path: they moved with it.
func supersede(conflicts []Conflict, moved Conflict) []Conflict {
	keep := conflicts[:0]
	for _, c := range conflicts {
		if c.Path != moved.Path && !strings.HasPrefix(c.Path, moved.Path+"/") {
			keep = append(keep, c)
		}
	}
	return append(keep, moved)
}

// reportedBelow says whether a conflict below directory p is reported:
// a directory kept only for that entry needs no line of its own.
func reportedBelow(conflicts []Conflict, p string) bool {
	for _, c := range conflicts {
		if strings.HasPrefix(c.Path, p+"/") {
			return true
		}
	}
	return false
}

func (f *Flush) apply(ctx context.Context, op flushOp, pl plan) error {
	ws := f.ws
	if err := f.moveAside(ctx, pl.aside); err != nil {
		return err
	}
	if op.remove != "" {
		for i := 0; i < len(pl.remove); i += 1000 {
			if err := f.s.store.Delete(ctx, pl.remove[i:min(i+1000, len(pl.remove))]); err != nil {
				return storeErr(err, "delete", op.remove)
			}
		}
		return nil
	}
	e := op.e
	var err error
	switch e.Type {
	case File:
		_, err = f.s.commitStaged(ctx, ws.key(e.Path), op.st, e.Mode, e.ModTime)
	case Dir:
		_, err = f.s.store.Put(ctx, ws.dirKey(e.Path), nil, store.PutOptions{Size: 0, Mode: e.Mode, ModTime: e.ModTime})
	case Symlink:
		_, err = f.s.store.Put(ctx, ws.key(e.Path), nil, store.PutOptions{Size: 0, Mode: e.Mode, ModTime: e.ModTime, LinkTarget: e.LinkTarget})
	}
	if err != nil {
		return storeErr(err, "write", e.Path)
	}
	return nil
}

// moveAside copies each object to its new key, then deletes the
// originals, children before their directory's marker: a failure in
// between leaves an entry in both places, never in neither.
func (f *Flush) moveAside(ctx context.Context, moves []move) error {
	if len(moves) == 0 {
		return nil
	}
	for _, m := range moves {
		if err := f.s.copyObject(ctx, m.from, m.to); err != nil {
			return storeErr(err, "move aside", f.ws.pathOf(m.from))
		}
	}
	keys := make([]string, 0, len(moves))
	for i := len(moves) - 1; i >= 0; i-- {
		keys = append(keys, moves[i].from)
	}
	for i := 0; i < len(keys); i += 1000 {
		if err := f.s.store.Delete(ctx, keys[i:min(i+1000, len(keys))]); err != nil {
			return storeErr(err, "move aside", f.ws.pathOf(keys[i]))
		}
	}
	return nil
}

// copyObject stores a copy of the object at from under to, with its
// metadata; a file's content is checked against its hash on the way.
func (s *Service) copyObject(ctx context.Context, from, to string) error {
	rc, info, err := s.store.Get(ctx, from)
	if err != nil {
		return err
	}
	defer rc.Close()
	o := store.PutOptions{Size: info.Size, Mode: info.Mode, ModTime: info.ModTime, LinkTarget: info.LinkTarget}
	if !info.IsDir() && info.LinkTarget == "" {
		o.SHA256 = info.SHA256
	}
	_, err = s.store.Put(ctx, to, rc, o)
	return err
}

// simulation tracks the keys a flush touches, to check conflicts and the
// quota before applying anything.
type simulation struct {
	c       *changeSet
	all     map[string]store.Info // whole workspace, when loaded
	touched map[string]*store.Info
	// at is the flush's time, in the names of entries it moves aside.
	at time.Time
}

func (s *simulation) loadAll() error {
	s.all = map[string]store.Info{}
	for info, err := range s.c.s.store.List(s.c.ctx, s.c.ws.root(), true) {
		if err != nil {
			return storeErr(err, "list", "/")
		}
		s.all[info.Key] = info
	}
	return nil
}

// get returns the simulated object at key.
func (s *simulation) get(key string) (*store.Info, error) {
	if info, ok := s.touched[key]; ok {
		return info, nil
	}
	if s.all != nil {
		if info, ok := s.all[key]; ok {
			return &info, nil
		}
		return nil, nil
	}
	info, err := s.c.s.store.Stat(s.c.ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, storeErr(err, "stat", s.c.ws.pathOf(key))
	}
	return &info, nil
}

// below returns the simulated keys under prefix.
func (s *simulation) below(prefix string) ([]string, error) {
	infos, err := s.belowInfos(prefix)
	keys := make([]string, len(infos))
	for i, info := range infos {
		keys[i] = info.Key
	}
	return keys, err
}

// belowInfos returns the simulated objects under prefix.
func (s *simulation) belowInfos(prefix string) ([]store.Info, error) {
	set := map[string]*store.Info{}
	if s.all != nil {
		for k, info := range s.all {
			if strings.HasPrefix(k, prefix) {
				set[k] = &info
			}
		}
	} else {
		for info, err := range s.c.s.store.List(s.c.ctx, prefix, true) {
			if err != nil {
				return nil, storeErr(err, "list", s.c.ws.pathOf(prefix))
			}
			set[info.Key] = &info
		}
	}
	for k, info := range s.touched {
		if strings.HasPrefix(k, prefix) {
			set[k] = info
		}
	}
	var infos []store.Info
	for _, info := range set {
		if info != nil {
			infos = append(infos, *info)
		}
	}
	return infos, nil
}

func (s *simulation) set(key string, info *store.Info) error {
	old, err := s.get(key)
	if err != nil {
		return err
	}
	if old != nil {
		s.c.add(-old.Size, -1)
	}
	if info != nil {
		s.c.add(info.Size, 1)
	}
	s.touched[key] = info
	return nil
}

func (s *simulation) remove(p string) ([]string, error) {
	ws := s.c.ws
	var keys []string
	if p != "/" {
		for _, k := range []string{ws.key(p), ws.dirKey(p)} {
			info, err := s.get(k)
			if err != nil {
				return nil, err
			}
			if info != nil {
				keys = append(keys, k)
			}
		}
	}
	prefix := ws.dirKey(p)
	if p == "/" {
		prefix = ws.root()
	}
	below, err := s.below(prefix)
	if err != nil {
		return nil, err
	}
	// Children first, then the directory's marker.
	keys = append(below, keys...)
	for _, k := range keys {
		if err := s.set(k, nil); err != nil {
			return nil, err
		}
	}
	return keys, nil
}

// removeEntry removes the file or link at p, or p's directory marker
// when nothing is left below it. With etag (the sender had a file at p)
// only a file with that content goes; with had, only an entry of that
// kind. kept says an entry stayed that the sender deleted: a directory
// still holding entries, or what replaced the sender's entry.
func (s *simulation) removeEntry(p string, had Type, etag string) (keys []string, kept bool, err error) {
	if etag != "" && had == 0 {
		had = File
	}
	ws := s.c.ws
	if p == "/" {
		return nil, false, nil
	}
	info, err := s.get(ws.key(p))
	if err != nil {
		return nil, false, err
	}
	if info != nil {
		// A file staged by this same flush has no hash yet; it is the
		// sender's own, so its removal stands.
		if etag != "" && info.SHA256 != "" && info.SHA256 != etag {
			return nil, true, nil
		}
		if link := info.LinkTarget != ""; had == Dir || had == File && link || had == Symlink && !link {
			return nil, true, nil
		}
		return []string{ws.key(p)}, false, s.set(ws.key(p), nil)
	}
	below, err := s.below(ws.dirKey(p))
	if err != nil {
		return nil, false, err
	}
	marker, err := s.get(ws.dirKey(p))
	if err != nil || (marker == nil && len(below) == 0) {
		return nil, false, err
	}
	if (had != 0 && had != Dir) || len(below) > 0 {
		// A directory where the sender had a file or link, or one
		// holding entries it never saw.
		return nil, true, nil
	}
	return []string{ws.dirKey(p)}, false, s.set(ws.dirKey(p), nil)
}

// put simulates writing op's entry. An entry of another kind that the
// workspace holds in its way (a file or link where op writes a
// directory or at one of its parents, a directory where op writes a
// file or link, a file where op writes a link or the reverse) was
// written there since the sender loaded the workspace, as the sender
// removes what it saw before writing another kind: it is moved aside
// (see asideOf) and reported, and op's entry takes the path, so that a
// conflict never stops the flush. Only an entry this same flush wrote
// is an error, as the sender contradicts itself.
func (s *simulation) put(op flushOp) ([]move, []Conflict, error) {
	ws, e := s.c.ws, op.e
	var moves []move
	var moved []Conflict
	aside := func(p string, dir bool) error {
		m, c, err := s.asideOf(p, dir, e.Path)
		moves, moved = append(moves, m...), append(moved, c)
		return err
	}
	for _, a := range ancestors(e.Path) {
		if info, err := s.get(ws.key(a)); err != nil {
			return nil, nil, err
		} else if info != nil {
			if err := aside(a, false); err != nil {
				return nil, nil, err
			}
		}
	}
	if e.Type == Dir {
		if info, err := s.get(ws.key(e.Path)); err != nil {
			return nil, nil, err
		} else if info != nil {
			if err := aside(e.Path, false); err != nil {
				return nil, nil, err
			}
		}
		return moves, moved, s.set(ws.dirKey(e.Path), &store.Info{Key: ws.dirKey(e.Path)})
	}
	if info, err := s.get(ws.key(e.Path)); err != nil {
		return nil, nil, err
	} else if _, own := s.touched[ws.key(e.Path)]; info != nil && !own && (info.LinkTarget != "") != (e.Type == Symlink) {
		if err := aside(e.Path, false); err != nil {
			return nil, nil, err
		}
	}
	below, err := s.below(ws.dirKey(e.Path))
	if err != nil {
		return nil, nil, err
	}
	marker, err := s.get(ws.dirKey(e.Path))
	if err != nil {
		return nil, nil, err
	}
	if len(below) > 0 || marker != nil {
		if err := aside(e.Path, true); err != nil {
			return nil, nil, err
		}
	}
	info := &store.Info{Key: ws.key(e.Path)}
	if op.st != nil {
		info.Size = op.st.size
	}
	return moves, moved, s.set(info.Key, info)
}

// maxAside bounds the names tried for one entry moved aside: the
// conflicts at one path within one second.
const maxAside = 100

// asideOf plans moving the entry at p, the file or link at its key or
// (dir) the directory with everything below it, to a free name beside
// it, <name>.conflict-<time>, and returns the moves and the conflict to
// report. forPath is the path of the entry in whose way it is.
func (s *simulation) asideOf(p string, dir bool, forPath string) ([]move, Conflict, error) {
	ws := s.c.ws
	var from []store.Info
	kind := "file"
	if dir {
		below, err := s.belowInfos(ws.dirKey(p))
		if err != nil {
			return nil, Conflict{}, err
		}
		from, kind = below, "directory"
		if marker, err := s.get(ws.dirKey(p)); err != nil {
			return nil, Conflict{}, err
		} else if marker != nil {
			from = append(from, *marker)
		}
	} else {
		info, err := s.get(ws.key(p))
		if err != nil || info == nil {
			return nil, Conflict{}, err
		}
		from = []store.Info{*info}
		if info.LinkTarget != "" {
			kind = "symbolic link"
		}
	}
	// Parents before children, so that the originals are deleted
	// children first (moveAside deletes in reverse).
	slices.SortFunc(from, func(a, b store.Info) int { return strings.Compare(a.Key, b.Key) })
	longest := 0
	for _, info := range from {
		if _, own := s.touched[info.Key]; own {
			// Written by this same flush: the sender contradicts itself.
			return nil, Conflict{}, errs.New(errs.FailedPrecondition, "entry %s: this flush also writes %s, which is in its way", forPath, p)
		}
		// A file's path must also hold as a directory's (cleanPath).
		longest = max(longest, len(strings.TrimSuffix(info.Key, "/"))+1)
	}
	to, err := s.freeName(p, longest)
	if err != nil {
		return nil, Conflict{}, err
	}
	// Nothing is at or below to (freeName), so a move changes no usage.
	moves := make([]move, len(from))
	for i, info := range from {
		moved := info
		moved.Key = ws.key(to) + strings.TrimPrefix(info.Key, ws.key(p))
		s.touched[info.Key], s.touched[moved.Key] = nil, &moved
		moves[i] = move{from: info.Key, to: moved.Key}
	}
	return moves, Conflict{Path: p, Reason: movedAside(kind, base(to))}, nil
}

// freeName returns a path beside p that nothing takes, named
// <name>.conflict-<time>, or with -2, -3… after it when that is taken.
// The name is shortened, at a character's boundary, where it would not
// fit a path component or, with the longest key moved under it being
// longest bytes, the store's keys.
func (s *simulation) freeName(p string, longest int) (string, error) {
	ws := s.c.ws
	dir, name := p[:strings.LastIndexByte(p, '/')], base(p)
	stamp := ".conflict-" + s.at.UTC().Format(conflictTime)
	for n := 1; n <= maxAside; n++ {
		suffix := stamp
		if n > 1 {
			suffix += "-" + strconv.Itoa(n)
		}
		keep := min(len(name), MaxNameLen-len(suffix), len(name)+store.PortableKeyLen-longest-len(suffix))
		for keep > 0 && keep < len(name) && !utf8.RuneStart(name[keep]) {
			keep--
		}
		if keep <= 0 {
			break
		}
		cand, err := ws.cleanPath("path", dir+"/"+name[:keep]+suffix)
		if err != nil {
			continue
		}
		taken, err := s.taken(cand)
		if err != nil {
			return "", err
		}
		if !taken {
			return cand, nil
		}
	}
	return "", errs.New(errs.FailedPrecondition, "%s: no name is free beside it to keep it as %s…", p, name+stamp)
}

// taken says whether anything is at p.
func (s *simulation) taken(p string) (bool, error) {
	ws := s.c.ws
	for _, k := range []string{ws.key(p), ws.dirKey(p)} {
		if info, err := s.get(k); err != nil || info != nil {
			return info != nil, err
		}
	}
	below, err := s.below(ws.dirKey(p))
	return len(below) > 0, err
}

func wrapKind(err error, format string, args ...any) error {
	return errs.Wrap(errs.KindOf(err), err, format, args...)
}
