package sandbox

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cgroupControllers are the v1 hierarchies a sandbox is limited by.
var cgroupControllers = []string{"memory", "pids", "cpu"}

// cgroupRoot is where this host's cgroups live and which version they are.
type cgroupRoot struct {
	mount string // usually /sys/fs/cgroup
	v2    bool
	// parent is the directory under each hierarchy (v1) or under the
	// unified tree (v2) that holds the sandboxes' cgroups.
	parent string
}

// ParentLimits bound all the sandboxes under one parent group together.
type ParentLimits struct {
	MemoryBytes, Pids int64
}

// orHost returns l with its unset fields at the host's defaults: three
// quarters of its memory, half of the kernel's pid_max.
func (l ParentLimits) orHost() (ParentLimits, error) {
	if l.MemoryBytes == 0 {
		var si unix.Sysinfo_t
		if err := unix.Sysinfo(&si); err != nil {
			return l, fmt.Errorf("cgroups: host memory: %w", err)
		}
		l.MemoryBytes = int64(si.Totalram) * int64(si.Unit) / 4 * 3
	}
	if l.Pids == 0 {
		b, err := os.ReadFile("/proc/sys/kernel/pid_max")
		if err != nil {
			return l, fmt.Errorf("cgroups: pid_max: %w", err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return l, fmt.Errorf("cgroups: pid_max: %w", err)
		}
		l.Pids = n / 2
	}
	return l, nil
}

// detectCgroups finds the cgroup version mounted at mount, prepares the
// parent group and bounds it by limits.
func detectCgroups(mount, parent string, limits ParentLimits) (*cgroupRoot, error) {
	r, err := prepareCgroups(mount, parent)
	if err != nil {
		return nil, err
	}
	if limits, err = limits.orHost(); err != nil {
		return nil, err
	}
	return r, r.limitParent(limits)
}

// limitParent writes l to the parent group. Memory is bounded without
// swap; a bound below what the sandboxes already use fails.
func (r *cgroupRoot) limitParent(l ParentLimits) error {
	files := [][2]string{
		{filepath.Join(r.mount, r.parent, "pids.max"), strconv.FormatInt(l.Pids, 10)},
		{filepath.Join(r.mount, r.parent, "memory.max"), strconv.FormatInt(l.MemoryBytes, 10)},
		{filepath.Join(r.mount, r.parent, "memory.swap.max"), "0"},
	}
	if !r.v2 {
		files = [][2]string{
			{filepath.Join(r.mount, "pids", r.parent, "pids.max"), strconv.FormatInt(l.Pids, 10)},
			{filepath.Join(r.mount, "memory", r.parent, "memory.limit_in_bytes"), strconv.FormatInt(l.MemoryBytes, 10)},
		}
	}
	for _, f := range files {
		if err := os.WriteFile(f[0], []byte(f[1]), 0); err != nil {
			if strings.HasSuffix(f[0], "memory.swap.max") && errors.Is(err, fs.ErrNotExist) {
				continue // no swap accounting on this host
			}
			return fmt.Errorf("cgroups: bound the sandboxes together: set %s to %s: %w", f[0], f[1], err)
		}
	}
	return nil
}

// prepareCgroups finds the cgroup version mounted at mount and makes the
// parent group.
func prepareCgroups(mount, parent string) (*cgroupRoot, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(mount, &st); err != nil {
		return nil, fmt.Errorf("cgroups: stat %s: %w", mount, err)
	}
	r := &cgroupRoot{mount: mount, v2: st.Type == unix.CGROUP2_SUPER_MAGIC, parent: parent}
	if r.v2 {
		dir := filepath.Join(mount, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroups: create %s: %w", dir, err)
		}
		// Limits need the controllers enabled from the root down.
		rel := ""
		for _, part := range append([]string{""}, strings.Split(parent, "/")...) {
			rel = filepath.Join(rel, part)
			p := filepath.Join(mount, rel, "cgroup.subtree_control")
			if err := os.WriteFile(p, []byte("+memory +pids +cpu"), 0); err != nil {
				if !errors.Is(err, unix.EBUSY) || rel != "" {
					return nil, fmt.Errorf("cgroups: enable controllers in %s: %w", p, err)
				}
				// In a container the mount root is our own group, which holds
				// processes; v2 lets a group with processes have no
				// controlled children, so move them to a leaf first.
				if err := evacuate(filepath.Join(mount, rel), filepath.Join(mount, rel, "executor")); err != nil {
					return nil, err
				}
				if err := os.WriteFile(p, []byte("+memory +pids +cpu"), 0); err != nil {
					return nil, fmt.Errorf("cgroups: enable controllers in %s: %w", p, err)
				}
			}
			if rel == parent {
				break
			}
		}
		return r, nil
	}
	for _, c := range cgroupControllers {
		dir := filepath.Join(mount, c, parent)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("cgroups: create %s: %w", dir, err)
		}
	}
	return r, nil
}

// evacuate moves every process of the v2 group from into the leaf group to.
func evacuate(from, to string) error {
	if err := os.MkdirAll(to, 0o755); err != nil {
		return fmt.Errorf("cgroups: create %s: %w", to, err)
	}
	src := &cgroup{root: &cgroupRoot{v2: true}, dirs: []string{from}}
	dst := &cgroup{root: &cgroupRoot{v2: true}, dirs: []string{to}}
	pids, err := src.pids()
	if err != nil {
		return fmt.Errorf("cgroups: list %s: %w", from, err)
	}
	for _, pid := range pids {
		if err := dst.add(pid); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}

// cgroup is one sandbox's group (one directory per v1 hierarchy, or one
// directory in the unified tree).
type cgroup struct {
	root *cgroupRoot
	dirs []string
	// events is the memory controller's event counts, kept open: every
	// command reads them when it starts and when it ends, and a read of an
	// open file costs a small part of opening it.
	events *os.File
}

func (r *cgroupRoot) create(name string, l Limits) (*cgroup, error) {
	cg := &cgroup{root: r}
	if r.v2 {
		cg.dirs = []string{filepath.Join(r.mount, r.parent, name)}
	} else {
		for _, c := range cgroupControllers {
			cg.dirs = append(cg.dirs, filepath.Join(r.mount, c, r.parent, name))
		}
	}
	for _, d := range cg.dirs {
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			_ = cg.remove()
			return nil, fmt.Errorf("cgroups: create %s: %w", d, err)
		}
	}
	if err := cg.setLimits(l); err != nil {
		_ = cg.remove()
		return nil, err
	}
	events := filepath.Join(cg.dirs[0], "memory.oom_control")
	if r.v2 {
		events = filepath.Join(cg.dirs[0], "memory.events")
	}
	f, err := os.Open(events)
	if err != nil {
		_ = cg.remove()
		return nil, fmt.Errorf("cgroups: open %s: %w", events, err)
	}
	cg.events = f
	return cg, nil
}

func (cg *cgroup) setLimits(l Limits) error {
	period := int64(100000)
	quota := l.CPUMillicores * period / 1000
	var files map[string]string
	if cg.root.v2 {
		d := cg.dirs[0]
		files = map[string]string{
			filepath.Join(d, "memory.max"):      strconv.FormatInt(l.MemoryBytes, 10),
			filepath.Join(d, "memory.swap.max"): "0",
			filepath.Join(d, "pids.max"):        strconv.FormatInt(l.Pids, 10),
			filepath.Join(d, "cpu.max"):         fmt.Sprintf("%d %d", quota, period),
		}
	} else {
		files = map[string]string{
			filepath.Join(cg.dirs[0], "memory.limit_in_bytes"): strconv.FormatInt(l.MemoryBytes, 10),
			filepath.Join(cg.dirs[1], "pids.max"):              strconv.FormatInt(l.Pids, 10),
			filepath.Join(cg.dirs[2], "cpu.cfs_period_us"):     strconv.FormatInt(period, 10),
			filepath.Join(cg.dirs[2], "cpu.cfs_quota_us"):      strconv.FormatInt(quota, 10),
		}
	}
	for p, v := range files {
		if err := os.WriteFile(p, []byte(v), 0); err != nil {
			if strings.HasSuffix(p, "memory.swap.max") && errors.Is(err, fs.ErrNotExist) {
				continue // no swap accounting on this host
			}
			return fmt.Errorf("cgroups: set %s: %w", p, err)
		}
	}
	return nil
}

// add moves a process into the group.
func (cg *cgroup) add(pid int) error {
	for _, d := range cg.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("cgroups: add %d to %s: %w", pid, d, err)
		}
	}
	return nil
}

// fd opens the v2 group for clone3's CLONE_INTO_CGROUP.
func (cg *cgroup) fd() (*os.File, error) {
	return os.Open(cg.dirs[0])
}

// pids lists the processes in the group.
func (cg *cgroup) pids() ([]int, error) {
	f, err := os.Open(filepath.Join(cg.dirs[0], "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []int
	s := bufio.NewScanner(f)
	for s.Scan() {
		if pid, err := strconv.Atoi(strings.TrimSpace(s.Text())); err == nil {
			out = append(out, pid)
		}
	}
	return out, s.Err()
}

// kill kills every process in the group and waits until it is empty.
func (cg *cgroup) kill(timeout time.Duration) error {
	if cg.root.v2 {
		_ = os.WriteFile(filepath.Join(cg.dirs[0], "cgroup.kill"), []byte("1"), 0)
	}
	deadline := time.Now().Add(timeout)
	for {
		pids, err := cg.pids()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("cgroups: list %s: %w", cg.dirs[0], err)
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroups: %d processes left in %s", len(pids), cg.dirs[0])
		}
		time.Sleep(2 * time.Millisecond) // let the kernel reap them
	}
}

// remove deletes the group's directories; the group must be empty.
func (cg *cgroup) remove() error {
	var errs []error
	if cg.events != nil {
		_ = cg.events.Close()
	}
	for _, d := range cg.dirs {
		if err := unix.Rmdir(d); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("cgroups: remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// oomKills returns how many processes the group's memory limit has killed.
func (cg *cgroup) oomKills() int64 {
	var buf [512]byte // either file is a few short lines
	n, err := cg.events.ReadAt(buf[:], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0
	}
	return oomKillCount(buf[:n])
}

// oomKillCount reads the oom_kill line of memory.events (v2) or
// memory.oom_control (v1); 0 if there is none.
func oomKillCount(b []byte) int64 {
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(line, []byte("oom_kill ")); ok {
			n, _ := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
			return n
		}
	}
	return 0
}
