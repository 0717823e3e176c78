package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Class 15: the mount table a sandbox can read names sandbox paths only:
// not the executor's state dir, its instance name or its pid.
func TestMountTableHoldsNoHostFacts(t *testing.T) {
	t.Parallel()
	// An executor's state dir as production names it, with the instance
	// name (host, pid, random) the sandbox must never learn.
	instance := InstanceName("leakprobehost", "q7zx3k")
	// Not t.TempDir: sandbox uids must be able to pass through every parent.
	root, err := os.MkdirTemp("", "conch-leak-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o711); err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(root, instance)
	var r *Runtime
	r, err = NewRuntime(Config{Seccomp: filter(t), StateDir: stateDir, CgroupParent: "conch-test/" + instance})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	sb, err := r.Create(t.Context(), Spec{ID: "leak" + strconv.Itoa(os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(context.WithoutCancel(t.Context())) })

	out := sh(t, sb, "cat /proc/self/mountinfo /proc/self/mounts /proc/1/mountinfo /proc/self/cgroup 2>&1").stdout
	if !strings.Contains(out, " /home/workspace ") || !strings.Contains(out, " /run/conch ") {
		t.Fatalf("no mount table read: %q", out)
	}
	pid := strconv.Itoa(os.Getpid())
	// The sandbox's state dir is seen by its random name in the state tmpfs;
	// neither the host's path to it nor the sandbox's id may show.
	for _, leak := range []string{root, stateDir, instance, "leakprobehost", "q7zx3k", sb.dir, sb.ID()} {
		if strings.Contains(out, leak) {
			t.Errorf("mount table shows %q:\n%s", leak, out)
		}
	}
	// A pid would leak in a path; the table's other numbers (ids, device
	// numbers, options such as ptmxmode=666) may equal it by chance.
	for _, field := range strings.Fields(out) {
		if !strings.Contains(field, "/") {
			continue
		}
		if slices.Contains(regexp.MustCompile(`[0-9]+`).FindAllString(field, -1), pid) {
			t.Errorf("mount table shows the executor's pid %s in %s:\n%s", pid, field, out)
		}
	}
}
