// Package dirlock gives one process a directory: an exclusive flock on
// a lock file inside it (FileName), which names the holder's pid. A
// second process is refused at once, told the holder's pid, instead of
// waiting, as etcd does, unbounded and in silence, for the locks of its
// data files. The kernel drops a flock when its holder exits, however it
// exits, so a crashed holder never blocks the next one.
package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// FileName is the lock file inside a held directory. It is never
// removed: a process that opened it before a removal would lock a file
// no longer there while the next one locked a new one.
const FileName = "conch.lock"

// pidReads and pidReadEvery bound how long a refused process waits for
// the holder to write its pid, which it does just after taking the lock.
const (
	pidReads     = 20
	pidReadEvery = 5 * time.Millisecond
)

// A Lock is a held directory.
type Lock struct {
	f *os.File
}

// HeldError says another process holds the directory.
type HeldError struct {
	// Dir is the directory as the caller named it.
	Dir string
	// Holder says what holds it, for the message ("conch dev").
	Holder string
	// PID is the holder's pid, 0 if it could not be read.
	PID int
}

// Error says which directory is in use, by what and which pid.
func (e *HeldError) Error() string {
	pid := "pid unknown"
	if e.PID > 0 {
		pid = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("%s is in use by another %s (%s)", e.Dir, e.Holder, pid)
}

// Acquire takes dir, which must exist, for this process without waiting.
// holder names what takes it, as another process's HeldError will say.
// When another process holds dir, the error is a *HeldError.
func Acquire(dir, holder string) (*Lock, error) {
	path := filepath.Join(dir, FileName)
	// os.OpenFile sets O_CLOEXEC: a child the holder starts (a sandbox)
	// does not inherit the lock and cannot outlive it with it.
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("dirlock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, &HeldError{Dir: dir, Holder: holder, PID: readPID(f)}
		}
		return nil, fmt.Errorf("dirlock: lock %s: %w", path, err)
	}
	// What a crashed holder wrote is stale: only the pid is left.
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("dirlock: write %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// readPID reads the holder's pid from f, waiting a moment for a holder
// that has just taken the lock to write it; 0 if it never does.
func readPID(f *os.File) int {
	buf := make([]byte, 32)
	for i := range pidReads {
		if i > 0 {
			time.Sleep(pidReadEvery)
		}
		n, _ := f.ReadAt(buf, 0)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(buf[:n]))); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}

// Release gives the directory up. The lock file stays, emptied.
func (l *Lock) Release() error {
	_ = l.f.Truncate(0)
	return l.f.Close()
}
