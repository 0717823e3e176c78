package files

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/conch-sh/conch/services/internal/store"
)

// A workspace's listing is kept beside it, so that a service that has not
// listed the workspace (a restart, another replica) hydrates it with one
// GET instead of listing every object, which for 1,000 files is most of a
// cold hydration. Like a pack it is a cache, never the record: it names
// the etcd revision of the workspace state it lists (the revision of that
// key's last write, which no later write of any key repeats), and it is
// used only while the state is still that write and not dirty. Every
// change writes the state, so a listing of an older state is never used;
// one that is missing or damaged costs the listing it would have saved.
// Deleting "/" deletes it with the packs.

// manifestMaxBytes bounds a kept listing (about 250 bytes an entry).
const manifestMaxBytes = 64 << 20

func (w Workspace) manifestKey() string { return w.base() + "manifest" }

type keptManifest struct {
	// StateRev is the etcd revision of the state the entries list.
	StateRev int64        `json:"state_rev"`
	Entries  []store.Info `json:"entries"`
}

// loadManifest returns ws's kept listing if it lists the state written at
// stateRev.
func (s *Service) loadManifest(ctx context.Context, ws Workspace, stateRev int64) ([]store.Info, bool) {
	rc, info, err := s.store.Get(ctx, ws.manifestKey())
	if err != nil {
		return nil, false
	}
	defer rc.Close()
	if info.Size > manifestMaxBytes {
		return nil, false
	}
	b, err := io.ReadAll(io.LimitReader(rc, manifestMaxBytes))
	if err != nil {
		return nil, false
	}
	var m keptManifest
	if json.Unmarshal(b, &m) != nil || m.StateRev != stateRev || stateRev == 0 {
		return nil, false
	}
	root := ws.root()
	for _, e := range m.Entries {
		// Every entry is the workspace's own.
		if len(e.Key) <= len(root) || !strings.HasPrefix(e.Key, root) {
			return nil, false
		}
	}
	return m.Entries, true
}

// keepManifestLater writes infos, the listing of ws's state written at
// stateRev, in the background, unless the state changed since; Close
// waits for it.
func (s *Service) keepManifestLater(ctx context.Context, ws Workspace, stateRev int64, infos []store.Info) {
	s.background.Go(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		// A listing of a changed workspace is of no use, and one must not
		// outlive a delete of "/", which drops the kept one.
		if st, rev, ok, err := s.locks.peekAt(ctx, ws); err != nil || !ok || rev != stateRev || st.Dirty {
			return
		}
		// Encoded here, off the hydration that listed: infos is only read.
		b, err := json.Marshal(keptManifest{StateRev: stateRev, Entries: infos})
		if err != nil || len(b) > manifestMaxBytes {
			return
		}
		if _, err := s.store.Put(ctx, ws.manifestKey(), bytes.NewReader(b), store.PutOptions{Size: int64(len(b)), Mode: 0o600}); err != nil {
			slog.WarnContext(ctx, "keeping a workspace's listing failed; services that have not listed it list it", "error", err)
		}
	})
}
