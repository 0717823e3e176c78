package sandbox

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// A pooled sandbox is fitted to the limits asked for and is as isolated as
// a new one.
func TestPooledSandboxGetsItsLimits(t *testing.T) {
	r := poolRuntime(t, 1)
	r.pool.mu.Lock()
	pooled := r.pool.ready[0]
	r.pool.mu.Unlock()
	sb, err := r.Create(t.Context(), Spec{ID: fmt.Sprintf("pooled%d", os.Getpid()), Limits: Limits{WorkspaceBytes: 4 << 20, Pids: 32}, PathPrepend: []string{"/opt/tools"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Destroy(t.Context()) })
	if sb != pooled {
		t.Fatalf("sandbox at %s did not come from the pool", sb.dir)
	}
	r2 := sh(t, sb, "dd if=/dev/zero of=big bs=1M count=16 2>&1; echo $PATH; cat /sys/fs/cgroup/pids.max 2>&1; id -u")
	if !strings.Contains(r2.stdout, "No space left") || !strings.Contains(r2.stdout, "/opt/tools:/usr/local/bin") || !strings.HasSuffix(r2.stdout, "1000\n") {
		t.Fatalf("pooled sandbox: %q", r2.stdout)
	}
	b, err := os.ReadFile(sb.cg.dirs[1] + "/pids.max")
	if err != nil || strings.TrimSpace(string(b)) != "32" {
		t.Fatalf("pids.max = %q %v, want 32", b, err)
	}
}
