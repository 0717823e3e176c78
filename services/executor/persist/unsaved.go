package persist

import (
	"maps"
	"slices"
	"sync"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"github.com/conch-sh/conch/services/executor/wsync"
	"github.com/conch-sh/conch/services/internal/display"
)

// MaxUnsavedShown is how many unsaved paths a sandbox's status lists; the
// rest are counted, so that a command making thousands of bad names
// cannot blow up every status.
const MaxUnsavedShown = 100

// Unsaved is a path of a persistent workspace the store cannot hold.
type Unsaved struct {
	path   string // workspace-absolute, as on disk (maybe not UTF-8)
	Reason string
}

// Display is the path as the sandbox sees it, escaped so that any bytes
// can be shown (and sent in a proto string).
func (u Unsaved) Display() string {
	return display.Escape(wire.WorkspaceDir + u.path)
}

// unsavedPaths is what of a sandbox's workspace is not saved, and why,
// until the path is saved or gone.
type unsavedPaths struct {
	mu sync.Mutex
	m  map[string]string // path → reason
}

// note records paths a flush left out.
func (u *unsavedPaths) note(ps []Unsaved) {
	if len(ps) == 0 {
		return
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = make(map[string]string, len(ps))
	}
	for _, p := range ps {
		u.m[p.path] = p.Reason
	}
}

// forget drops the paths a flush saved and those no longer in the
// workspace (scan).
func (u *unsavedPaths) forget(saved []string, scan map[string]wsync.Meta) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.m) == 0 {
		return
	}
	for _, p := range saved {
		delete(u.m, p)
	}
	for p := range u.m {
		if _, ok := scan[p]; !ok {
			delete(u.m, p)
		}
	}
}

// list returns up to limit unsaved paths, sorted, and how many more there
// are.
func (u *unsavedPaths) list(limit int) (shown []Unsaved, more int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	paths := slices.Sorted(maps.Keys(u.m))
	for _, p := range paths[:min(limit, len(paths))] {
		shown = append(shown, Unsaved{path: p, Reason: u.m[p]})
	}
	return shown, len(paths) - len(shown)
}
