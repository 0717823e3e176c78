package sandbox

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// An executor that died leaves its state tmpfs with workspaces mounted in
// it; the next one on the host unmounts and removes all of it.
func TestSweepStaleUnmountsStateDir(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, fmt.Sprintf("host-%d-abc", dead.ProcessState.Pid()))
	ws := filepath.Join(dir, "cxyz", "workspace")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0711"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", ws, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	if err := SweepStale(root, t.TempDir(), "none"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stale state dir: %v", err)
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), dir) {
		t.Fatalf("stale mounts remain:\n%s", b)
	}
}
