package conchtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Btrfs mounts a new btrfs filesystem of size bytes, on a loop device
// over a sparse file in the test's temp dir, for sandbox storage
// (--sandbox-storage), and returns where; it is unmounted, with whatever
// is mounted in it, when the test ends. It needs root and mkfs.btrfs
// (the btrfs-progs package, which .ci/run installs).
func Btrfs(t testing.TB, size int64) string {
	t.Helper()
	dir := t.TempDir()
	// Sandboxes' uids reach their storage by its path: every parent must
	// be searchable.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	img, mnt := filepath.Join(dir, "btrfs.img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o711); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(img)
	if err == nil {
		err = f.Truncate(size)
		f.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range [][]string{{"mkfs.btrfs", "-q", img}, {"mount", "-o", "loop,nosuid,nodev,nobarrier", img, mnt}} {
		if out, err := exec.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", c, err, out)
		}
	}
	// Cleanups run last first: this one before TempDir's removal.
	// Recursively: an executor killed by the test leaves its storage's
	// instance mounted, for the next executor there to remove.
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-R", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", mnt, err, out)
		}
	})
	return mnt
}
