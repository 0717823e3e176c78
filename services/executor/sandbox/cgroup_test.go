package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCgroupLimitFiles checks what each cgroup version is told for a
// sandbox's limits, on a directory laid out like each cgroupfs.
func TestCgroupLimitFiles(t *testing.T) {
	l := Limits{MemoryBytes: 64 << 20, Pids: 32, CPUMillicores: 500}
	tests := []struct {
		name string
		v2   bool
		dirs []string
		want map[string]string
	}{
		{"v2", true, []string{"p"}, map[string]string{
			"p/sb/memory.max": "67108864", "p/sb/memory.swap.max": "0", "p/sb/pids.max": "32", "p/sb/cpu.max": "50000 100000",
		}},
		{"v1", false, []string{"memory/p", "pids/p", "cpu/p"}, map[string]string{
			"memory/p/sb/memory.limit_in_bytes": "67108864", "pids/p/sb/pids.max": "32",
			"cpu/p/sb/cpu.cfs_period_us": "100000", "cpu/p/sb/cpu.cfs_quota_us": "50000",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mount := t.TempDir()
			for _, d := range tt.dirs {
				if err := os.MkdirAll(filepath.Join(mount, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			r := &cgroupRoot{mount: mount, v2: tt.v2, parent: "p"}
			if _, err := r.create("sb", l); err != nil {
				t.Fatal(err)
			}
			for f, want := range tt.want {
				b, err := os.ReadFile(filepath.Join(mount, f))
				if err != nil || string(b) != want {
					t.Errorf("%s = %q %v, want %q", f, b, err, want)
				}
			}
		})
	}
}

// unifiedMount returns a mounted cgroup2 hierarchy: /sys/fs/cgroup on a
// v2 host, the hybrid layout's unified tree on a v1 host.
func unifiedMount(t *testing.T) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		for i, field := range fields {
			if field == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" {
				return fields[4]
			}
		}
	}
	t.Skip("no cgroup2 hierarchy mounted")
	return ""
}

// TestCgroupV2KillsTheTree runs a process tree in a real cgroup2 group —
// background children, one in a new session — and checks that the group's
// kill (cgroup.kill) ends all of them and the group can be removed. It
// needs no controllers, so it runs on a v1 host's unified tree too.
func TestCgroupV2KillsTheTree(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups")
	}
	mount := unifiedMount(t)
	parent := fmt.Sprintf("conch-test-%d", os.Getpid())
	if err := os.Mkdir(filepath.Join(mount, parent), 0o755); err != nil {
		t.Skipf("cannot create a group in %s: %v", mount, err)
	}
	t.Cleanup(func() { _ = unix.Rmdir(filepath.Join(mount, parent)) })
	r := &cgroupRoot{mount: mount, v2: true, parent: parent}
	cg := &cgroup{root: r, dirs: []string{filepath.Join(mount, parent, "sb")}}
	if err := os.Mkdir(cg.dirs[0], 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cg.kill(time.Second); _ = cg.remove() })

	// The shell waits for its go until it is in the group, so that every
	// child starts inside.
	cmd := exec.Command("/bin/sh", "-c", "read go; (sleep 300 &); setsid sleep 300 & nohup sleep 300 >/dev/null 2>&1 & sleep 300")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if err := cg.add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := cg.pids()
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) >= 5 { // sh and four sleeps
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tree never started: %v", pids)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cg.kill(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if pids, err := cg.pids(); err != nil || len(pids) != 0 {
		t.Fatalf("after kill: %v %v", pids, err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the shell survived the group's kill")
	}
	if err := cg.remove(); err != nil {
		t.Fatal(err)
	}
}

// TestAdoptTreePassesOverEndedProcesses moves a real process tree into a
// real cgroup v1 group, as a v1 host's sandboxes are adopted after their
// agent's hello, while processes below the root come and go: one that has
// ended (here a pid no process has) is passed over, the root having ended
// is an error.
func TestAdoptTreePassesOverEndedProcesses(t *testing.T) {
	root, err := detectCgroups("/sys/fs/cgroup", fmt.Sprintf("conch-test-adopt-%d", os.Getpid()))
	if err != nil {
		t.Skip(err)
	}
	if root.v2 {
		t.Skip("cgroup v2 starts bubblewrap in the group: nothing is adopted")
	}
	cg, err := root.create("sb", Limits{MemoryBytes: 64 << 20, Pids: 32, CPUMillicores: 500})
	if err != nil {
		t.Fatal(err)
	}
	sb := &Sandbox{cg: cg}
	tree := exec.Command("/bin/sh", "-c", "sleep 30 & sleep 30 & wait")
	if err := tree.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cg.kill(5 * time.Second)
		_ = tree.Wait()
		_ = cg.remove()
		for _, c := range cgroupControllers {
			_ = os.Remove(filepath.Join(root.mount, c, root.parent))
		}
	})
	// A pid no process has: an ended process's own pid may already be
	// another's, which adopting would move into the group.
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	dead, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the shell has started both sleeps.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		c, _ := childrenOf(tree.Process.Pid)
		if len(c) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shell started %v", c)
		}
	}

	tests := []struct {
		name         string
		pid          int
		top          bool
		wantVanished bool
		wantErr      bool
	}{
		{"a live tree", tree.Process.Pid, true, false, false},
		{"an ended process below the root", dead, false, true, false},
		{"the root ended", dead, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vanished, err := sb.adopt(tt.pid, tt.top)
			if vanished != tt.wantVanished || (err != nil) != tt.wantErr {
				t.Fatalf("adopt(%d, %v) = %v, %v; want vanished %v, an error %v", tt.pid, tt.top, vanished, err, tt.wantVanished, tt.wantErr)
			}
		})
	}
	pids, err := cg.pids()
	if err != nil || len(pids) != 3 {
		t.Fatalf("the group holds %v (%v), want the shell and its two sleeps", pids, err)
	}
	if err := sb.adoptTree(dead); err == nil {
		t.Fatal("adoptTree of an ended process succeeded")
	}
}

// TestEveryProcessIsInTheSandboxGroups checks, from the host, that every
// process of a new sandbox is in the sandbox's groups, once
// the agent's spare shells have started: on cgroup v1 they are moved in
// after the agent's hello, and the agent starts them, from a thread of its
// own, as soon as it has said it. A spare left outside would run the first
// command with no memory or pids limit.
func TestEveryProcessIsInTheSandboxGroups(t *testing.T) {
	t.Parallel()
	for range 3 {
		sb := newSandbox(t, Spec{})
		var procs []int
		// bubblewrap, the agent, and the spare's two shells.
		for deadline := time.Now().Add(5 * time.Second); len(procs) < 4; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("sandbox runs %v, not yet the spare shells", procs)
			}
			procs = processesBelow(t, sb.cmd.Process.Pid)
		}
		in, err := sb.cg.pids()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if !slices.Contains(in, p) {
				t.Errorf("process %d of the sandbox's uid %d is not in its groups %v", p, sb.uid, in)
			}
		}
	}
}

// processesBelow lists root and the processes descending from it, by
// each process's parent as /proc/<pid>/stat gives it: not by the lists of
// children the code under test walks.
func processesBelow(t *testing.T, root int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// The parent is the second field after the command's ")".
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 {
			parent[pid], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	for pid := range parent {
		for p := pid; p > 1; p = parent[p] {
			if p == root {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
