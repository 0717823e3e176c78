package localcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// KindSandboxes names, in CPU's answer, the CPU time of the executors'
// sandboxes: every process in their cgroups (bubblewrap, the agents, the
// commands), counted by the kernel in the cgroup the executors make them
// under, whether the processes still run or not.
const KindSandboxes = "sandboxes"

// clockTick is the unit of /proc/<pid>/stat's times (USER_HZ, 100 on
// every Linux architecture conch runs on).
const clockTick = 10 * time.Millisecond

// CPU returns the CPU time the cluster's processes have used so far, by
// member kind: each member's own (user and system, not its children's),
// and the sandboxes' (KindSandboxes). Two readings' difference is what a
// stretch of work cost; a member that restarted between them is not
// comparable, and its kind's difference may be negative.
func (s *State) CPU() (map[string]time.Duration, error) {
	out := map[string]time.Duration{}
	groups := map[string]bool{}
	for i := range s.Members {
		m := &s.Members[i]
		if m.Kind == KindExecutor {
			groups[sandboxCgroup(m.Args)] = true
		}
		if !m.alive() {
			continue
		}
		f, err := procStatFields(m.PID)
		if err != nil {
			return nil, err
		}
		user, err1 := strconv.ParseUint(f[11], 10, 64)
		sys, err2 := strconv.ParseUint(f[12], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("localcluster: /proc/%d/stat: %w", m.PID, err)
		}
		out[m.Kind] += time.Duration(user+sys) * clockTick
	}
	for g := range groups {
		d, err := cgroupCPU("/sys/fs/cgroup", g)
		if err != nil {
			return nil, err
		}
		out[KindSandboxes] += d
	}
	return out, nil
}

// sandboxCgroup is the --sandbox-cgroup of an executor's arguments, or
// its default.
func sandboxCgroup(args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--sandbox-cgroup="); ok {
			return v
		}
		if a == "--sandbox-cgroup" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return "conch"
}

// cgroupCPU is the CPU time used in the cgroup group and below, from
// cgroup v2's cpu.stat or v1's cpuacct.usage under mount; nothing when
// the group does not exist (no sandbox ever started).
func cgroupCPU(mount, group string) (time.Duration, error) {
	if f, err := os.Open(filepath.Join(mount, group, "cpu.stat")); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "usage_usec "); ok {
				us, err := strconv.ParseInt(v, 10, 64)
				return time.Duration(us) * time.Microsecond, err
			}
		}
		return 0, fmt.Errorf("localcluster: no usage_usec in %s", f.Name())
	}
	b, err := os.ReadFile(filepath.Join(mount, "cpuacct", group, "cpuacct.usage"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return time.Duration(ns), err
}
