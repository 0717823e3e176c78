package files

import (
	"context"
	"errors"
	"io"
	"sort"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"

	"github.com/conch-sh/conch/services/internal/platform/chunks"
	"github.com/conch-sh/conch/services/internal/store"
)

// HydrateMsg is one message of a hydration, in order: entries (a file
// whose content the caller lacks is followed by its Data), Removed paths,
// then the End with the revision.
type HydrateMsg struct {
	Entry    *Entry
	Data     []byte
	Removed  string
	End      bool
	Revision int64
}

const (
	// prefetchMax is the largest file fetched ahead of its turn.
	prefetchMax = 1 << 20
	// prefetchWindow bounds the files fetched ahead.
	prefetchWindow = 32
	// flushMemory bounds the content of one flush kept in memory.
	flushMemory = 32 << 20
)

// Hydrate sends ws's entries to send, with the content of the files whose
// SHA-256 is not the one in have (path → etag), and the paths of have that
// no longer exist. Links are sent as links.
func (s *Service) Hydrate(ctx context.Context, ws Workspace, have map[string]string, send func(HydrateMsg) error) (err error) {
	ctx, end := span(ctx, "hydrate", ws, attribute.Int("conch.have", len(have)))
	defer end(&err)
	infos, rev, err := s.manifest(ctx, ws)
	if err != nil {
		return err
	}

	need := func(info store.Info) bool {
		return !info.IsDir() && info.LinkTarget == "" && have[ws.pathOf(info.Key)] != info.SHA256
	}
	// Content the service has not cached comes from the workspace's
	// packs when there is enough of it to be worth their listing.
	var packed map[string][]byte
	var packKeys []string
	missing, files := map[string]bool{}, 0
	for _, info := range infos {
		if need(info) && info.Size <= packFileMax && info.SHA256 != "" && !s.content.has(info.SHA256) {
			missing[info.SHA256] = true
			files++
		}
	}
	// Packs' content is held until the hydration ends; when other
	// hydrations hold theirs, this one fetches file by file instead.
	usePacks := false
	if files >= packMinFiles {
		select {
		case s.packing <- struct{}{}:
			usePacks = true
			defer func() { <-s.packing }()
		default:
		}
	}
	if usePacks {
		packed, packKeys = s.readPacks(ctx, ws, missing)
	}
	// Small files are fetched ahead, at most storeParallel at once, and
	// sent in key order.
	type item struct {
		info store.Info
		done chan struct{} // closed when data is fetched; nil: not prefetched
		data []byte
		got  store.Info
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	queue := make(chan *item, prefetchWindow)
	gets := make(chan struct{}, storeParallel)
	var fetched atomic.Int64
	go func() {
		defer close(queue)
		for _, info := range infos {
			it := &item{info: info}
			if need(info) && info.Size <= prefetchMax {
				it.done = make(chan struct{})
				if data, ok := s.content.get(info.SHA256); ok && int64(len(data)) == info.Size {
					it.got, it.data = info, data
					close(it.done)
				} else if data, ok := packed[info.SHA256]; ok && int64(len(data)) == info.Size {
					it.got, it.data = info, data
					s.content.put(info.SHA256, data)
					close(it.done)
				} else {
					go func() {
						defer close(it.done)
						select {
						case gets <- struct{}{}:
						case <-ctx.Done():
							it.err = ctx.Err()
							return
						}
						defer func() { <-gets }()
						fetched.Add(1)
						rc, gi, err := s.store.Get(ctx, info.Key)
						if err != nil {
							it.err = err
							return
						}
						defer rc.Close()
						it.got = gi
						it.data, it.err = io.ReadAll(io.LimitReader(rc, prefetchMax+1))
						if it.err == nil {
							s.content.put(gi.SHA256, it.data)
						}
					}()
				}
			}
			select {
			case queue <- it:
			case <-ctx.Done():
				return
			}
		}
	}()
	// What this hydration sends is packed again when it still needed
	// many GETs, and all of it fits one pack; it is kept only while it
	// does.
	sent, sentBytes := map[string][]byte{}, 0
	whole := usePacks
	seen := make(map[string]bool, len(infos))
	for it := range queue {
		e := entryOf(ws, it.info)
		seen[e.Path] = true
		switch {
		case !need(it.info):
			if err := send(HydrateMsg{Entry: &e}); err != nil {
				return err
			}
		case it.done != nil:
			<-it.done
			if errors.Is(it.err, store.ErrNotFound) {
				continue // deleted since the listing
			}
			if it.err != nil {
				return storeErr(it.err, "read", e.Path)
			}
			if int64(len(it.data)) != it.got.Size {
				// Replaced by a larger file since the listing: stream it.
				if err := s.hydrateLarge(ctx, ws, it.info, send); err != nil {
					return err
				}
				continue
			}
			e = entryOf(ws, it.got)
			if err := sendFile(send, &e, it.data); err != nil {
				return err
			}
			if whole && len(it.data) <= packFileMax && it.got.SHA256 != "" {
				if sentBytes += len(it.data); sentBytes > packMaxBytes {
					whole, sent = false, nil
				} else {
					sent[it.got.SHA256] = it.data
				}
			}
		default:
			if err := s.hydrateLarge(ctx, ws, it.info, send); err != nil {
				return err
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	removed := make([]string, 0)
	for p := range have {
		if !seen[p] && p != "/" {
			removed = append(removed, p)
		}
	}
	sort.Strings(removed)
	for _, p := range removed {
		if err := send(HydrateMsg{Removed: p}); err != nil {
			return err
		}
	}
	if err := send(HydrateMsg{End: true, Revision: rev}); err != nil {
		return err
	}
	if whole && fetched.Load() >= packMinFiles {
		s.packLater(ctx, ws, rev, sent, packKeys)
	}
	return nil
}

func sendFile(send func(HydrateMsg) error, e *Entry, data []byte) error {
	if err := send(HydrateMsg{Entry: e}); err != nil {
		return err
	}
	for len(data) > 0 {
		n := min(len(data), chunks.Size)
		if err := send(HydrateMsg{Data: data[:n]}); err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

func (s *Service) hydrateLarge(ctx context.Context, ws Workspace, info store.Info, send func(HydrateMsg) error) error {
	rc, gi, err := s.store.Get(ctx, info.Key)
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return storeErr(err, "read", ws.pathOf(info.Key))
	}
	defer rc.Close()
	e := entryOf(ws, gi)
	if err := send(HydrateMsg{Entry: &e}); err != nil {
		return err
	}
	buf := make([]byte, chunks.Size)
	for {
		n, err := io.ReadFull(rc, buf)
		if n > 0 {
			if err := send(HydrateMsg{Data: buf[:n]}); err != nil {
				return err
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return storeErr(err, "read", e.Path)
		}
	}
}

// manifest returns ws's listing and revision: from the cache when etcd
// says the workspace has not changed since, else listed under the lock.
// Every change goes through the lock and marks the state dirty before it
// writes, so a clean state at the cached revision means the same content.
func (s *Service) manifest(ctx context.Context, ws Workspace) ([]store.Info, int64, error) {
	st, stateRev, ok, err := s.locks.peekAt(ctx, ws)
	if err != nil {
		return nil, 0, err
	}
	if ok && !st.Dirty {
		if infos, hit := s.cache.get(ws, st.Revision); hit {
			return infos, st.Revision, nil
		}
		if infos, hit := s.loadManifest(ctx, ws, stateRev); hit {
			s.cache.put(ws, st.Revision, infos)
			return infos, st.Revision, nil
		}
	}
	h, err := s.locks.lock(ctx, ws, s.cfg.LockTimeout)
	if err != nil {
		return nil, 0, err
	}
	rev := h.st.Revision
	var infos []store.Info
	for info, err := range s.store.List(ctx, ws.root(), true) {
		if err != nil {
			h.unlock(ctx)
			return nil, 0, storeErr(err, "list", "/")
		}
		infos = append(infos, info)
	}
	h.unlock(ctx)
	s.cache.put(ws, rev, infos)
	if h.has && !h.st.Dirty && len(infos) <= maxCachedEntries/4 {
		s.keepManifestLater(ctx, ws, h.modRev, infos)
	}
	return infos, rev, nil
}

// manifestCache keeps recent workspace listings, bounded by their total
// number of entries.
type manifestCache struct {
	mu      sync.Mutex
	m       map[Workspace]cachedManifest
	entries int
}

type cachedManifest struct {
	rev   int64
	infos []store.Info
}

// maxCachedEntries bounds the cache's memory (roughly 200 bytes each).
const maxCachedEntries = 500_000

func (c *manifestCache) get(ws Workspace, rev int64) ([]store.Info, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.m[ws]
	return m.infos, ok && m.rev == rev
}

func (c *manifestCache) put(ws Workspace, rev int64, infos []store.Info) {
	if len(infos) > maxCachedEntries/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[Workspace]cachedManifest{}
	}
	if old, ok := c.m[ws]; ok {
		c.entries -= len(old.infos)
	}
	// Evict arbitrary workspaces until the new listing fits.
	for k, v := range c.m {
		if c.entries+len(infos) <= maxCachedEntries {
			break
		}
		c.entries -= len(v.infos)
		delete(c.m, k)
	}
	c.m[ws] = cachedManifest{rev: rev, infos: infos}
	c.entries += len(infos)
}
