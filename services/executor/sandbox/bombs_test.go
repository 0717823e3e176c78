package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestBombsStayInTheirGroups runs a fork bomb and a memory bomb in two
// sandboxes at once, each asking for far more than the parent group's
// bound: the parent's bound holds them together, and meanwhile the host
// and a third sandbox still run commands.
func TestBombsStayInTheirGroups(t *testing.T) {
	if testing.Short() {
		t.Skip("bombs take seconds")
	}
	parent := ParentLimits{MemoryBytes: 768 << 20, Pids: 384}
	r := ownRuntime(t, Config{ParentLimits: parent})
	if got := readParent(t, r, "pids", "pids.max"); got != "384" {
		t.Fatalf("parent pids.max %q, want 384", got)
	}
	create := func(name string, l Limits) *Sandbox {
		sb, err := r.Create(t.Context(), Spec{ID: fmt.Sprintf("bomb-%d-%s", os.Getpid(), name), Limits: l})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sb.Destroy(t.Context()) })
		return sb
	}
	forks := create("fork", Limits{Pids: 4096, MemoryBytes: 512 << 20})
	memory := create("memory", Limits{Pids: 64, MemoryBytes: 6 << 30})
	third := create("third", Limits{})

	var wg sync.WaitGroup
	results := make([]result, 2)
	memoryDone := make(chan struct{})
	for i, c := range []struct {
		sb  *Sandbox
		cmd string
	}{
		// Forks until refused, for 10 seconds.
		{forks, `end=$(($(date +%s)+10)); while [ "$(date +%s)" -lt "$end" ]; do sleep 30 & done 2>/dev/null; echo forked`},
		// tail holds all of its input in memory.
		{memory, `head -c 4G /dev/zero | tail -n 1 >/dev/null; echo "exit $?"`},
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = run(t, c.sb, Options{Command: c.cmd}, 60*time.Second)
			if c.sb == memory {
				close(memoryDone)
			}
		}()
	}
	// While they run, once both are at work (the fork bomb holds 32
	// processes, the memory bomb 64 MiB or has ended): the third sandbox
	// and the host answer.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		forking := groupValue(t, forks, "pids", "pids.current") >= 32
		filling := groupValue(t, memory, "memory", memoryUsage(r)) >= 64<<20 || closed(memoryDone)
		if forking && filling {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bombs never got going: forking %v, filling %v", forking, filling)
		}
	}
	if got := sh(t, third, "echo alive").stdout; got != "alive\n" {
		t.Errorf("third sandbox during the bombs: %q", got)
	}
	if out, err := exec.Command("sh", "-c", "echo alive").Output(); err != nil || string(out) != "alive\n" {
		t.Errorf("host during the bombs: %q %v", out, err)
	}
	if n := parentPids(t, r); n > parent.Pids {
		t.Errorf("%d processes under the parent, above its bound of %d", n, parent.Pids)
	}
	wg.Wait()
	if got := results[1].stdout; strings.Contains(got, "exit 0") {
		t.Errorf("memory bomb of 4 GiB finished under a parent bound of 768 MiB: %q", got)
	}
	if got := sh(t, third, "echo alive").stdout; got != "alive\n" {
		t.Errorf("third sandbox after the bombs: %q", got)
	}
}

// readParent reads file of the parent group in controller's hierarchy.
func readParent(t *testing.T, r *Runtime, controller, file string) string {
	t.Helper()
	dir := filepath.Join(r.cgroups.mount, r.cgroups.parent)
	if !r.cgroups.v2 {
		dir = filepath.Join(r.cgroups.mount, controller, r.cgroups.parent)
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// groupValue reads the number in file of sb's group in controller's
// hierarchy.
func groupValue(t *testing.T, sb *Sandbox, controller, file string) int64 {
	t.Helper()
	dir := sb.cg.dirs[0]
	if !sb.cg.root.v2 {
		dir = sb.cg.dirs[slices.Index(cgroupControllers, controller)]
	}
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// memoryUsage is the file that holds a group's memory in use.
func memoryUsage(r *Runtime) string {
	if r.cgroups.v2 {
		return "memory.current"
	}
	return "memory.usage_in_bytes"
}

// parentPids is how many processes the parent group holds now.
func parentPids(t *testing.T, r *Runtime) int64 {
	n, err := strconv.ParseInt(readParent(t, r, "pids", "pids.current"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
