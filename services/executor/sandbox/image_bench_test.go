package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSandboxCreateFromImage times cold creates of sandboxes on a
// template's unpacked root, with a writable workdir, against the floor of
// a bare bubblewrap on the same root (bare-p50-ms), alternated round by
// round as benchCreateCold does.
func BenchmarkSandboxCreateFromImage(b *testing.B) {
	root := imageRoot(b, nil)
	r := ownRuntime(b, Config{PoolSize: -1, AgentBinary: benchAgent()})
	floorArgs := []string{"--unshare-all", "--ro-bind", filepath.Join(root, "usr"), "/usr", "--symlink", "usr/bin", "/bin",
		"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--proc", "/proc", "--dev", "/dev", "/bin/true"}
	floor := func() time.Duration {
		waitSpares(b, r.launches, r.launches.size)
		start := time.Now()
		cmd := exec.Command("bwrap", floorArgs...)
		cmd.SysProcAttr = (&Runtime{}).credential(200999)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("bwrap: %v %s", err, out)
		}
		return time.Since(start)
	}
	var ds, bare []time.Duration
	i := 0
	for b.Loop() {
		i++
		b.StopTimer()
		if i%2 == 1 {
			bare = append(bare, floor())
		}
		waitSpares(b, r.launches, r.launches.size)
		b.StartTimer()
		start := time.Now()
		sb, err := r.Create(b.Context(), Spec{ID: fmt.Sprintf("img%d-%d", os.Getpid(), i), Image: &ImageRoot{Dir: root}, Workdir: "/app"})
		if err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(start))
		b.StopTimer()
		if i%2 == 0 {
			bare = append(bare, floor())
		}
		if err := sb.Destroy(b.Context()); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	reportP50As(b, bare, "bare-p50-ms")
	reportP50(b, ds)
}
