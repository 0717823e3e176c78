package files

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

func TestContentCache(t *testing.T) {
	t.Parallel()
	sum := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return hex.EncodeToString(h[:])
	}
	c := newContentCache(10)
	c.put(sum("abcd"), []byte("abcd"))
	c.put(sum("other"), []byte("wrong")) // hash does not match: not cached
	if _, ok := c.get(sum("other")); ok {
		t.Fatal("content cached under another's hash")
	}
	c.put(sum("efgh"), []byte("efgh"))
	if got, ok := c.get(sum("abcd")); !ok || string(got) != "abcd" {
		t.Fatalf("get = %q, %v", got, ok)
	}
	c.put(sum("ijkl"), []byte("ijkl")) // evicts efgh, the least recently used
	if _, ok := c.get(sum("efgh")); ok {
		t.Fatal("least recently used entry kept over the limit")
	}
	if _, ok := c.get(sum("abcd")); !ok {
		t.Fatal("recently used entry evicted")
	}
	c.put(sum(strings.Repeat("x", 11)), []byte(strings.Repeat("x", 11)))
	if c.size > 10 {
		t.Fatalf("size %d over the limit", c.size)
	}
	off := newContentCache(-1)
	off.put(sum("abcd"), []byte("abcd"))
	if _, ok := off.get(sum("abcd")); ok {
		t.Fatal("disabled cache returned content")
	}
}
