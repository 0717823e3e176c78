package localcluster

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestSandboxCgroup(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "conch"},
		{[]string{"executor", "--sandbox-cgroup", "load/a"}, "load/a"},
		{[]string{"executor", "--sandbox-cgroup=load/b", "--name", "x"}, "load/b"},
		{[]string{"executor", "--sandbox-cgroup"}, "conch"},
	} {
		if got := sandboxCgroup(tc.args); got != tc.want {
			t.Errorf("sandboxCgroup(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestCgroupCPU(t *testing.T) {
	v2, v1 := t.TempDir(), t.TempDir()
	write := func(p, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(v2, "conch", "cpu.stat"), "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\n")
	write(filepath.Join(v1, "cpuacct", "conch", "cpuacct.usage"), "2500000000\n")
	for _, tc := range []struct {
		mount, group string
		want         time.Duration
	}{
		{v2, "conch", 1500 * time.Millisecond},
		{v1, "conch", 2500 * time.Millisecond},
		{v1, "none", 0},
	} {
		got, err := cgroupCPU(tc.mount, tc.group)
		if err != nil || got != tc.want {
			t.Errorf("cgroupCPU(%s, %s) = %v, %v; want %v", tc.mount, tc.group, got, err, tc.want)
		}
	}
}

// TestCPU reads a member's CPU time, here this test's own, and sees it
// grow with work; a member not running counts nothing.
func TestCPU(t *testing.T) {
	start, _, err := procStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	st := &State{Members: []MemberState{{Name: "router-0", Kind: KindRouter, PID: os.Getpid(), StartTime: start}, {Name: "router-1", Kind: KindRouter}}}
	before, err := st.CPU()
	if err != nil {
		t.Fatal(err)
	}
	// Work until it is counted, for a while: the machine may be busy.
	deadline := time.Now().Add(20 * time.Second)
	for {
		for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
		}
		after, err := st.CPU()
		if err != nil {
			t.Fatal(err)
		}
		if d := after[KindRouter] - before[KindRouter]; d >= 50*time.Millisecond {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s of work counted as %v", after[KindRouter]-before[KindRouter])
		}
	}
}
