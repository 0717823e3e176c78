// Package persist keeps a sandbox's persistent workspace in step with the
// workspace service: it fills the workspace when the sandbox starts, and
// after each command and at the sandbox's end it sends what changed,
// leaving out (and listing) what the store cannot hold.
package persist

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/executor/wsclient"
	"github.com/conch-sh/conch/services/executor/wsync"
	"github.com/conch-sh/conch/services/internal/display"
	"github.com/conch-sh/conch/services/internal/platform/errs"
	"github.com/conch-sh/conch/services/internal/quota"
	"github.com/conch-sh/conch/services/workspace/files"
)

// Store stores persistent workspaces: the workspace service.
type Store interface {
	// Usage returns what the user's workspace stores: bytes and entries.
	Usage(ctx context.Context, account, user string) (bytes, files int64, err error)
	// Hydrate fills root with the user's workspace and returns its revision
	// and the etag of each file it wrote.
	Hydrate(ctx context.Context, account, user string, root *wsync.Root) (rev int64, etags map[string]string, err error)
	// Flush sends the changes of root since the last sync.
	Flush(ctx context.Context, account, user string, in wsclient.FlushInput) (wsclient.FlushResult, error)
}

// Room grows the limits of a persistent sandbox's workspace filesystem to
// hold what the user's workspace stores: one stored under a larger quota
// (or before sparse files counted whole) must still open, so that its
// user can delete files; the workspace service refuses it any growth.
func Room(ctx context.Context, st Store, account, user string, l *sandbox.Limits) error {
	bytes, entries, err := st.Usage(ctx, account, user)
	if err != nil {
		// Like a failed hydrate: the workspace cannot be opened now.
		return errs.Wrap(errs.Unavailable, err, "persistent: read the usage of the workspace of %q", user)
	}
	// The filesystem gives every file whole pages; the stored bytes don't.
	const page = 4096
	if need := bytes + entries*page; need > l.WorkspaceBytes {
		l.WorkspaceBytes = need
	}
	if l.WorkspaceFiles == 0 {
		l.WorkspaceFiles = quota.DefaultFiles
	}
	// One more for the workspace's own root directory.
	l.WorkspaceFiles = max(l.WorkspaceFiles, entries+1)
	return nil
}

// Workspace is the persistent workspace of one sandbox.
type Workspace struct {
	st            Store
	account, user string
	// quota is the workspace's, from the gateway's limits: the
	// workspace service holds every flush to it. The filesystem's size
	// may be larger, to open a workspace already over it.
	quota        quota.Limits
	scanLimit    int
	flushTimeout time.Duration

	// Sync state, under mu. ending is set once the sandbox is being
	// destroyed: only its last flush (Close) runs after that.
	mu       sync.Mutex
	ending   bool
	root     *wsync.Root
	revision int64
	synced   map[string]wsync.Meta
	// etags of the files as last synced, path → etag.
	etags map[string]string
	// unsaved is what of the workspace the store cannot hold, for the
	// sandbox's status; it has a lock of its own so that a status never
	// waits for a flush.
	unsaved unsavedPaths
}

// Options are what Open needs besides the store.
type Options struct {
	Account, User string
	// Path is the workspace on the host and UID its owner: the sandbox's
	// (sandbox.Sandbox.WorkspacePath, HostUID).
	Path string
	UID  int
	// Quota holds every flush; Files is what the workspace's filesystem
	// can hold (its limits after Room).
	Quota quota.Limits
	Files int64
	// FlushTimeout bounds each flush.
	FlushTimeout time.Duration
}

// Open fills the sandbox's workspace at o.Path from the store and returns
// it, to be flushed after each command and closed at the sandbox's end.
func Open(ctx context.Context, st Store, o Options) (*Workspace, error) {
	root, err := wsync.OpenRoot(o.Path, o.UID)
	if err != nil {
		return nil, err
	}
	w := &Workspace{
		st: st, account: o.Account, user: o.User, quota: o.Quota, flushTimeout: o.FlushTimeout,
		// What its filesystem can hold, and one more to tell a full one.
		scanLimit: int(max(o.Files, quota.DefaultFiles)) + 1,
		root:      root,
	}
	if w.revision, w.etags, err = st.Hydrate(ctx, w.account, w.user, root); err != nil {
		_ = root.Close()
		return nil, errs.Wrap(errs.Unavailable, err, "persistent: hydrate the workspace of %q", w.user)
	}
	if w.synced, err = root.Scan(w.scanLimit); err != nil {
		_ = root.Close()
		return nil, fmt.Errorf("persist: scan hydrated workspace: %w", err)
	}
	return w, nil
}

// Flush sends the workspace's changes since the last sync. It returns a
// note for each changed path the store cannot hold, which is left out and
// the rest saved, and for each deleted path the workspace service kept
// because it changed since this sandbox's copy. A nil Workspace (a
// sandbox without one) flushes nothing.
func (w *Workspace) Flush(ctx context.Context) ([]string, error) {
	if w == nil {
		return nil, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ending {
		// The sandbox's destroy flushes last, once its commands are gone.
		return nil, nil
	}
	return w.flushLocked(ctx)
}

// End marks the sandbox as ending, once any flush in progress is done:
// no flush starts after it but Close's.
func (w *Workspace) End() {
	if w == nil {
		return
	}
	w.mu.Lock()
	w.ending = true
	w.mu.Unlock()
}

// Close flushes the workspace one last time and closes it. The sandbox's
// processes must have ended, and its files must still be there: what the
// killed commands wrote last is read and kept.
func (w *Workspace) Close(ctx context.Context) error {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ending = true
	_, err := w.flushLocked(ctx)
	if w.root != nil {
		_ = w.root.Close()
		w.root = nil
	}
	return err
}

// Unsaved returns up to MaxUnsavedShown of the paths the store could not
// hold, sorted, and how many more there are.
func (w *Workspace) Unsaved() ([]Unsaved, int) {
	if w == nil {
		return nil, 0
	}
	return w.unsaved.list(MaxUnsavedShown)
}

// flushLocked is Flush under w.mu. It reads the workspace through its
// open root, never by path: a path whose mount went away would read as a
// workspace whose every file was removed.
func (w *Workspace) flushLocked(ctx context.Context) ([]string, error) {
	if w.root == nil {
		return nil, nil
	}
	scan, err := w.root.Scan(w.scanLimit)
	if err != nil {
		return nil, errs.Wrap(errs.ResourceExhausted, err, "workspace: scan")
	}
	c := wsync.Diff(w.synced, scan)
	unsaved := leaveUnstorable(files.Workspace{Account: w.account, User: w.user}, &c, scan)
	w.unsaved.note(unsaved)
	notes := make([]string, 0, len(unsaved))
	for _, u := range unsaved {
		notes = append(notes, "conch: "+u.Display()+": not saved: "+u.Reason)
	}
	if len(c.Changed) == 0 && len(c.Removed) == 0 {
		// Nothing to send; what could not be stored is noted once, not
		// at every command.
		w.synced = scan
		w.unsaved.forget(nil, scan)
		return notes, nil
	}
	// Not canceled with the caller (a result is only returned once its
	// writes are durable) but bounded: the lock held here serializes every
	// command of the sandbox.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.flushTimeout)
	defer cancel()
	res, err := w.st.Flush(fctx, w.account, w.user, wsclient.FlushInput{Base: w.revision, Quota: w.quota, Root: w.root, Scan: scan, Synced: w.synced, Changes: c, ETags: w.etags})
	if err != nil {
		// The service has the same deadline and may end the call a moment
		// before this side's timer marks fctx: the clock decides.
		if dl, _ := fctx.Deadline(); fctx.Err() != nil || !time.Now().Before(dl) {
			// Said in words the model reads; the service's own error
			// would only say that a context ended.
			return notes, errs.New(errs.DeadlineExceeded, "flush timed out after %s", w.flushTimeout)
		}
		return notes, err
	}
	for _, p := range res.Unsent {
		if m, ok := w.synced[p]; ok {
			scan[p] = m // as stored: still differs from the disk
		} else {
			delete(scan, p)
		}
	}
	for _, p := range c.Removed {
		delete(w.etags, p)
	}
	for _, p := range c.Changed {
		if scan[p].Type != wsync.File {
			delete(w.etags, p)
		}
	}
	if w.etags == nil {
		w.etags = map[string]string{}
	}
	maps.Copy(w.etags, res.ETags)
	for _, k := range res.Conflicts {
		// What the service kept is not in this sandbox; the model is told
		// where its own errors are, like an unsaved path.
		notes = append(notes, "conch: "+display.Escape(wire.WorkspaceDir+k.Path)+": kept: "+display.Escape(k.Reason))
	}
	w.revision, w.synced = res.Revision, scan
	w.unsaved.forget(c.Changed, scan)
	return notes, nil
}

// leaveUnstorable takes out of c the paths the workspace store would
// refuse, so that one such name never keeps the rest of the workspace from
// being saved, and returns each changed one with the reason. The rules are
// the file API's own (files.Workspace.CleanPath).
func leaveUnstorable(ws files.Workspace, c *wsync.Changes, scan map[string]wsync.Meta) []Unsaved {
	var notes []Unsaved
	keep := c.Changed[:0]
	for _, p := range c.Changed {
		why := unstorable(ws, p, scan[p])
		if why == "" {
			keep = append(keep, p)
			continue
		}
		notes = append(notes, Unsaved{path: p, Reason: why})
	}
	c.Changed = keep
	removed := c.Removed[:0]
	for _, p := range c.Removed {
		// Never stored, so there is nothing to remove.
		if unstorable(ws, p, wsync.Meta{}) == "" {
			removed = append(removed, p)
		}
	}
	c.Removed = removed
	return notes
}

// unstorable says why the store cannot hold p, or "".
func unstorable(ws files.Workspace, p string, m wsync.Meta) string {
	if _, err := ws.CleanPath("path", p); err != nil {
		return strings.TrimPrefix(err.Error(), "path: ")
	}
	if m.Type == wsync.Symlink && len(m.Target) > files.MaxLinkLen {
		return fmt.Sprintf("a symlink target longer than %d bytes", files.MaxLinkLen)
	}
	return ""
}
