package store

import (
	"context"
	"net/url"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/conch-sh/conch/services/approval/document"
	"github.com/conch-sh/conch/services/internal/platform/etcdx"
)

// docCache keeps every account's document in memory while a watch keeps it
// current, so judging a command does not wait on etcd. Entries carry their
// revision; an older value never replaces a newer one, and the store's own
// writes update the cache at once (read-your-writes on this replica).
type docCache struct {
	mu    sync.RWMutex
	ready bool
	docs  map[string]cachedDoc
}

type cachedDoc struct {
	doc *document.Document // never mutated once cached
	rev int64              // ModRevision; 0 when the account has none
	// seen is the etcd revision this entry is known current at, for
	// deletions (which have no ModRevision of their own).
	seen int64
}

func (c *docCache) get(account string) (cachedDoc, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if !c.ready {
		return cachedDoc{}, false
	}
	d, ok := c.docs[account]
	if !ok {
		// Every stored document is listed: none means the empty one.
		return cachedDoc{doc: document.Empty()}, true
	}
	return d, true
}

func (c *docCache) put(account string, d cachedDoc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.docs == nil {
		return
	}
	if old, ok := c.docs[account]; ok && old.seen >= d.seen {
		return
	}
	c.docs[account] = d
}

func (c *docCache) reset(ready bool, docs map[string]cachedDoc) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ready, c.docs = ready, docs
}

// DocumentsCached reports whether documents are served from memory.
func (s *Store) DocumentsCached() bool {
	s.cache.mu.RLock()
	defer s.cache.mu.RUnlock()
	return s.cache.ready
}

// HasDenyRules reports whether the account's document holds deny rules
// for agent, the defaults' or the agent's own, from memory; ok is false
// while WatchDocuments has not loaded the documents.
func (s *Store) HasDenyRules(account, agent string) (has, ok bool) {
	d, ok := s.cache.get(account)
	if !ok {
		return false, false
	}
	return len(d.doc.Denylist(agent)) > 0, true
}

// CachedDocument returns the account's document for reading only: from
// memory while WatchDocuments runs, else from etcd. The caller must not
// modify it.
func (s *Store) CachedDocument(ctx context.Context, account string) (*document.Document, int64, error) {
	if d, ok := s.cache.get(account); ok {
		return d.doc, d.rev, nil
	}
	return s.Document(ctx, account)
}

// WatchDocuments keeps the document cache current until ctx ends; while it
// is not running (or re-syncing after an error), reads go to etcd.
func (s *Store) WatchDocuments(ctx context.Context) error {
	prefix := s.prefix + "doc/"
	etcdx.ListWatch(ctx, s.cli, prefix, etcdx.Handler{
		Reset: func(kvs []*mvccpb.KeyValue, _ int64) error {
			docs := make(map[string]cachedDoc, len(kvs))
			for _, kv := range kvs {
				if d, err := document.Parse(kv.Value); err == nil {
					docs[accountOf(string(kv.Key), prefix)] = cachedDoc{doc: d, rev: kv.ModRevision, seen: kv.ModRevision}
				}
			}
			s.cache.reset(true, docs)
			return nil
		},
		Events: func(evs []*clientv3.Event) error {
			for _, ev := range evs {
				account := accountOf(string(ev.Kv.Key), prefix)
				switch ev.Type {
				case clientv3.EventTypePut:
					d, err := document.Parse(ev.Kv.Value)
					if err != nil {
						continue
					}
					s.cache.put(account, cachedDoc{doc: d, rev: ev.Kv.ModRevision, seen: ev.Kv.ModRevision})
				case clientv3.EventTypeDelete:
					s.cache.put(account, cachedDoc{doc: document.Empty(), seen: ev.Kv.ModRevision})
				}
			}
			return nil
		},
		// Stop serving from memory until listed again.
		Stale: func() { s.cache.reset(false, nil) },
	})
	return ctx.Err()
}

func accountOf(key, prefix string) string {
	a, err := url.PathUnescape(strings.TrimPrefix(key, prefix))
	if err != nil {
		return strings.TrimPrefix(key, prefix)
	}
	return a
}
