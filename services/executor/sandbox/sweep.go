package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// InstanceName names an executor instance on this host; the pid in it lets a
// later instance tell that the owner is gone.
func InstanceName(host, random string) string {
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), random)
}

// instanceAlive reports whether the executor that named an instance still
// runs.
func instanceAlive(name string) bool {
	parts := strings.Split(name, "-")
	if len(parts) < 3 {
		return true // not ours to judge
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil || pid <= 0 {
		return true
	}
	if pid == os.Getpid() {
		return true
	}
	return unix.Kill(pid, 0) == nil || errors.Is(unix.Kill(pid, 0), unix.EPERM)
}

// SweepStale removes what executors that died without cleaning up left under
// stateRoot and the cgroup parent: workspace mounts, state dirs, and
// cgroups, killing any process still in them.
func SweepStale(stateRoot, cgroupMount, cgroupParent string) error {
	entries, err := os.ReadDir(stateRoot)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sandbox: sweep %s: %w", stateRoot, err)
	}
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || instanceAlive(e.Name()) {
			continue
		}
		dir := filepath.Join(stateRoot, e.Name())
		sbs, _ := os.ReadDir(dir)
		for _, sb := range sbs {
			if !sb.IsDir() {
				continue // the agent binary and other files hold no mounts
			}
			ws := filepath.Join(dir, sb.Name(), "workspace")
			if err := unix.Unmount(ws, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("sandbox: unmount stale %s: %w", ws, err))
			}
		}
		// The instance's own state tmpfs (runtimes of older versions had none).
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("sandbox: unmount stale %s: %w", dir, err))
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("sandbox: remove stale %s: %w", dir, err))
		}
	}
	roots := []string{filepath.Join(cgroupMount, cgroupParent)}
	for _, c := range cgroupControllers {
		roots = append(roots, filepath.Join(cgroupMount, c, cgroupParent))
	}
	for _, root := range roots {
		instances, _ := os.ReadDir(root)
		for _, inst := range instances {
			if !inst.IsDir() || instanceAlive(inst.Name()) {
				continue
			}
			idir := filepath.Join(root, inst.Name())
			groups, _ := os.ReadDir(idir)
			for _, g := range groups {
				if g.IsDir() {
					cg := &cgroup{root: &cgroupRoot{}, dirs: []string{filepath.Join(idir, g.Name())}}
					_ = cg.kill(0)
					_ = cg.remove()
				}
			}
			if err := unix.Rmdir(idir); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("sandbox: remove stale cgroup %s: %w", idir, err))
			}
		}
	}
	return errors.Join(errs...)
}
