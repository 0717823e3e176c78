package dirlock

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// An Instance is a directory of one process's own under a root that the
// processes of a host share (an executor's template roots, its sandboxes'
// storage). Its lock file, root/<name>.lock beside it, is held for as
// long as the process runs, so that the next process to take an instance
// under the same root removes the directories of those that ended
// without removing their own.
type Instance struct {
	// Dir is the instance's directory, root/<name>.
	Dir  string
	lock *os.File
}

// TakeInstance makes root/name (mode 0711, as are root and every
// directory made under it for sandboxes' uids to search) and locks it,
// then removes, with remove, the directories of instances whose lock no
// one holds. It fails when another process holds name. What remove could
// not take is returned in stale, for the caller to log; it is tried
// again by the next process.
func TakeInstance(root, name string, remove func(dir string) error) (_ *Instance, stale error, _ error) {
	if name == "" || strings.ContainsAny(name, "/.") {
		return nil, nil, fmt.Errorf("dirlock: instance name %q", name)
	}
	dir := filepath.Join(root, name)
	for _, d := range []string{root, dir} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, nil, fmt.Errorf("dirlock: %w", err)
		}
		if err := os.Chmod(d, 0o711); err != nil {
			return nil, nil, fmt.Errorf("dirlock: %w", err)
		}
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("dirlock: %w", err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, nil, fmt.Errorf("dirlock: instance %s is held already: %w", dir, err)
	}
	return &Instance{Dir: dir, lock: lock}, sweepInstances(root, name, remove), nil
}

// sweepInstances removes the directories of root's instances, other than
// self, whose lock no one holds, and their lock files.
func sweepInstances(root, self string, remove func(dir string) error) error {
	locks, _ := filepath.Glob(filepath.Join(root, "*.lock"))
	var errs []error
	for _, l := range locks {
		name := strings.TrimSuffix(filepath.Base(l), ".lock")
		if name == self {
			continue
		}
		f, err := os.OpenFile(l, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			if err := remove(filepath.Join(root, name)); err != nil {
				errs = append(errs, fmt.Errorf("instance %s: %w", name, err))
			} else {
				_ = os.Remove(l)
			}
		}
		f.Close()
	}
	return errors.Join(errs...)
}

// Close frees the instance's lock; its directory is left for its owner
// or the next process to remove.
func (i *Instance) Close() error {
	return i.lock.Close()
}
