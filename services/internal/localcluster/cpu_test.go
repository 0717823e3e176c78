package localcluster

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestCPU reads a member's CPU time, here this test's own as an
// executor's, and sees it grow with its work, and its sandboxes' with the
// work of the children it reaps; a member not running counts nothing.
func TestCPU(t *testing.T) {
	start, _, err := procStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	st := &State{Members: []MemberState{{Name: "executor-0", Kind: KindExecutor, PID: os.Getpid(), StartTime: start}, {Name: "router-0", Kind: KindRouter}}}
	before, err := st.CPU()
	if err != nil {
		t.Fatal(err)
	}
	// Work until it is counted, for a while: the machine may be busy.
	grown := func(kind string, work func()) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			work()
			after, err := st.CPU()
			if err != nil {
				t.Fatal(err)
			}
			if d := after[kind] - before[kind]; d >= 50*time.Millisecond {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("20 s of work counted as %v for %s", after[kind]-before[kind], kind)
			}
		}
	}
	grown(KindExecutor, func() {
		for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
		}
	})
	grown(KindSandboxes, func() {
		if out, err := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done").CombinedOutput(); err != nil {
			t.Fatalf("%v %s", err, out)
		}
	})
	if after, _ := st.CPU(); after[KindRouter] != 0 {
		t.Fatalf("a member not running counted %v", after[KindRouter])
	}
}
