package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
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
// sandbox's limits, and where its OOM kills are counted, on a directory
// laid out like each cgroupfs.
func TestCgroupLimitFiles(t *testing.T) {
	l := Limits{MemoryBytes: 64 << 20, Pids: 32, CPUMillicores: 500}
	tests := []struct {
		name   string
		v2     bool
		dirs   []string
		events string // the kernel's file of OOM kill counts
		want   map[string]string
	}{
		{"v2", true, []string{"p"}, "p/sb/memory.events", map[string]string{
			"p/sb/memory.max": "67108864", "p/sb/memory.swap.max": "0", "p/sb/pids.max": "32", "p/sb/cpu.max": "50000 100000",
		}},
		{"v1", false, []string{"memory/p", "pids/p", "cpu/p"}, "memory/p/sb/memory.oom_control", map[string]string{
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
			if _, err := r.create("sb", l); err == nil {
				t.Fatal("created a group with no file of OOM kills")
			}
			events := filepath.Join(mount, tt.events)
			if err := os.MkdirAll(filepath.Dir(events), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(events, []byte("oom 3\noom_kill 2\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			cg, err := r.create("sb", l)
			if err != nil {
				t.Fatal(err)
			}
			defer cg.events.Close()
			for f, want := range tt.want {
				b, err := os.ReadFile(filepath.Join(mount, f))
				if err != nil || string(b) != want {
					t.Errorf("%s = %q %v, want %q", f, b, err, want)
				}
			}
			// The count is read again from the file kept open.
			for _, want := range []int64{2, 5} {
				if err := os.WriteFile(events, fmt.Appendf(nil, "oom %d\noom_kill %d\n", want, want), 0o644); err != nil {
					t.Fatal(err)
				}
				if got := cg.oomKills(); got != want {
					t.Errorf("oomKills() = %d, want %d", got, want)
				}
			}
		})
	}
}

func TestOOMKillCount(t *testing.T) {
	tests := []struct {
		name string
		file string
		want int64
	}{
		{"v2 memory.events", "low 0\nhigh 0\nmax 12\noom 4\noom_kill 3\noom_group_kill 0\n", 3},
		{"v1 memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n", 7},
		{"no trailing newline", "oom_kill 9", 9},
		{"no oom_kill line", "oom_kill_disable 1\nunder_oom 0\n", 0},
		{"empty", "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := oomKillCount([]byte(tt.file)); got != tt.want {
				t.Errorf("oomKillCount(%q) = %d, want %d", tt.file, got, tt.want)
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

// TestEveryProcessIsInTheSandboxGroups checks, from the host, that every
// process of a new sandbox is in the sandbox's groups, once the agent's
// spare shells have started: on cgroup v1 bubblewrap is moved in while it
// waits for its arguments, and all it starts must be born inside. A spare
// left outside would run the first command with no memory or pids limit.
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

// waitReading waits until process pid is blocked reading file descriptor
// fd.
func waitReading(t *testing.T, pid, fd int) {
	t.Helper()
	want := fmt.Sprintf("%d 0x%x ", unix.SYS_READ, fd)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if err == nil && strings.HasPrefix(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is not reading fd %d: %q %v", pid, fd, b, err)
		}
	}
}

// TestLaunchWaitsInItsCgroupAndEndsFirst checks a launch, bubblewrap
// started ahead of its sandbox: it is in its cgroup, has made no namespace
// and started nothing while its arguments have not come; closing it kills
// it before its argument pipe closes (an empty argument list would still
// run bubblewrap's command), and gives back its cgroup and uid.
func TestLaunchWaitsInItsCgroupAndEndsFirst(t *testing.T) {
	t.Parallel()
	r := testRuntime(t)
	l, err := r.launch()
	if err != nil {
		t.Fatal(err)
	}
	pid := l.cmd.Process.Pid
	// Once it waits on its argument pipe (fd 4), it has done all it does
	// unasked.
	waitReading(t, pid, 4)
	in, err := l.cg.pids()
	if err != nil || !slices.Contains(in, pid) {
		t.Fatalf("bubblewrap %d is not in its cgroup %v (%v)", pid, in, err)
	}
	if below := processesBelow(t, pid); len(below) != 1 {
		t.Fatalf("a waiting bubblewrap runs %v", below)
	}
	for _, ns := range []string{"user", "mnt", "pid", "net"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil || its != mine {
			t.Fatalf("a waiting bubblewrap has its own %s namespace: %s (%v)", ns, its, err)
		}
	}
	dir := l.cg.dirs[0]
	l.close()
	select {
	case <-l.exit:
	default:
		t.Fatal("close returned before bubblewrap ended")
	}
	if st := l.cmd.ProcessState; st == nil || st.Success() || !strings.Contains(st.String(), "killed") {
		t.Fatalf("bubblewrap ended %v, want killed", st)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("cgroup %s left behind: %v", dir, err)
	}
	r.uids.mu.Lock()
	held := r.uids.held[l.uid] != nil
	r.uids.mu.Unlock()
	if held {
		t.Fatalf("uid %d still claimed", l.uid)
	}
}

// TestFailedStartLeavesNothing builds a sandbox whose agent never says
// hello: the create fails with the agent's end, and its processes, cgroup,
// state dir and uid are all gone.
func TestFailedStartLeavesNothing(t *testing.T) {
	t.Parallel()
	r := ownRuntime(t, Config{AgentBinary: "/bin/false", LaunchAhead: -1})
	before, err := os.ReadDir(r.cfg.StateDir) // the runtime's own: agent, tool, /etc
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.Create(t.Context(), Spec{ID: "nohello"})
	if err == nil || !strings.Contains(err.Error(), "agent did not start") {
		t.Fatalf("Create = %v, want the agent's failure", err)
	}
	var groups []string
	for _, d := range cgroupDirs(r) {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if e.IsDir() {
				groups = append(groups, filepath.Join(d, e.Name()))
			}
		}
	}
	if len(groups) > 0 {
		t.Errorf("cgroups left behind: %v", groups)
	}
	after, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before) {
		t.Errorf("state dir holds %v, held %v before the create", after, before)
	}
	r.uids.mu.Lock()
	held := len(r.uids.held)
	r.uids.mu.Unlock()
	if held != 0 {
		t.Errorf("%d uids still claimed", held)
	}
}

// cgroupDirs are the directories holding r's sandbox cgroups.
func cgroupDirs(r *Runtime) []string {
	if r.cgroups.v2 {
		return []string{filepath.Join(r.cfg.CgroupMount, r.cfg.CgroupParent)}
	}
	var out []string
	for _, c := range cgroupControllers {
		out = append(out, filepath.Join(r.cfg.CgroupMount, c, r.cfg.CgroupParent))
	}
	return out
}
