package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// DefaultUIDLockDir is where executors on one host claim sandbox uids.
const DefaultUIDLockDir = "/run/conch-sandbox-uids"

// uidClaims hands out host uids that no other live sandbox on the host holds,
// whichever executor made it. A uid is claimed by holding an exclusive flock
// on the file named by it in a directory every executor of the host shares:
// the kernel drops the lock when its holder closes it or dies, so an executor
// that crashes never keeps uids from the others.
type uidClaims struct {
	dir         string
	base, count int

	mu   sync.Mutex
	held map[int]*os.File
	next int
}

func newUIDClaims(dir string, base, count int) (*uidClaims, error) {
	// Sandbox uids are unprivileged: the directory is the host's to write.
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: uid lock dir: %w", err)
	}
	return &uidClaims{dir: dir, base: base, count: count, held: map[int]*os.File{}}, nil
}

// claim returns a uid held by no live sandbox on the host; it stays the
// caller's until release.
func (c *uidClaims) claim() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i < c.count; i++ {
		off := (c.next + i) % c.count
		uid := c.base + off
		if c.held[uid] != nil {
			continue
		}
		f, err := c.lock(uid)
		if err != nil {
			return 0, err
		}
		if f == nil {
			continue
		}
		c.held[uid] = f
		c.next = (off + 1) % c.count
		return uid, nil
	}
	return 0, errors.New("sandbox: no free uid")
}

// lock takes uid's lock file, or returns nil if another holder has it.
func (c *uidClaims) lock(uid int) (*os.File, error) {
	path := filepath.Join(c.dir, strconv.Itoa(uid))
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("sandbox: claim uid %d: %w", uid, err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, nil
			}
			return nil, fmt.Errorf("sandbox: claim uid %d: %w", uid, err)
		}
		// A releaser unlinks the file before unlocking it: a lock taken on
		// a file no longer at path holds nothing, so take the new one.
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Ino == now.Ino && held.Dev == now.Dev {
			return f, nil
		}
		f.Close()
	}
}

// release gives uid back; its lock file goes so that the directory holds
// only the uids in use.
func (c *uidClaims) release(uid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.held[uid]
	if f == nil {
		return
	}
	delete(c.held, uid)
	_ = os.Remove(f.Name())
	_ = f.Close()
}

// close releases every uid still held.
func (c *uidClaims) close() {
	c.mu.Lock()
	uids := make([]int, 0, len(c.held))
	for uid := range c.held {
		uids = append(uids, uid)
	}
	c.mu.Unlock()
	for _, uid := range uids {
		c.release(uid)
	}
}
