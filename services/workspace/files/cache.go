package files

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"sync"
)

// contentCache keeps the content of small files by SHA-256, least recently
// used first out. Sandboxes are created per conversation and hydrate the
// same workspace again and again; served from here, a file costs no store
// request. Being keyed by content hash, an entry is never stale.
type contentCache struct {
	max int64

	mu    sync.Mutex
	size  int64
	order *list.List // of *cached, most recent in front
	m     map[string]*list.Element
}

type cached struct {
	sum  string
	data []byte
}

// maxCachedFile is the largest content cached.
const maxCachedFile = 256 << 10

func newContentCache(max int64) *contentCache {
	return &contentCache{max: max, order: list.New(), m: map[string]*list.Element{}}
}

func (c *contentCache) get(sum string) ([]byte, bool) {
	if c.max <= 0 || sum == "" {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[sum]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*cached).data, true
}

// has says whether sum's content is cached.
func (c *contentCache) has(sum string) bool {
	if c.max <= 0 || sum == "" {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.m[sum]
	return ok
}

// put caches data under sum after checking that sum is its hash; the
// caller must not change data afterwards.
func (c *contentCache) put(sum string, data []byte) {
	if c.max <= 0 || len(data) > maxCachedFile || int64(len(data)) > c.max {
		return
	}
	h := sha256.Sum256(data)
	if hex.EncodeToString(h[:]) != sum {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[sum]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.m[sum] = c.order.PushFront(&cached{sum: sum, data: data})
	c.size += int64(len(data))
	for c.size > c.max {
		last := c.order.Back()
		v := last.Value.(*cached)
		c.order.Remove(last)
		delete(c.m, v.sum)
		c.size -= int64(len(v.data))
	}
}
