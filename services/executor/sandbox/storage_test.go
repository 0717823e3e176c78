package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/internal/conchtest"
	"github.com/conch-sh/conch/services/internal/image/imagetest"
)

// storageRuntime returns a runtime of its own whose sandboxes keep their
// writable state on a btrfs filesystem of the test's.
func storageRuntime(t *testing.T) (*Runtime, string) {
	t.Helper()
	root := filepath.Join(conchtest.Btrfs(t, 2<<30), "storage")
	return ownRuntime(t, Config{Storage: root}), root
}

func TestStorageHoldsLimits(t *testing.T) {
	root := filepath.Join(conchtest.Btrfs(t, 2<<30), "storage")
	r := ownRuntime(t, Config{Storage: root, PoolSize: 1})
	waitPool(t, r, 1)
	ctx := context.Background()
	// A warm sandbox is fitted to its workspace's size.
	pooled, err := r.Create(ctx, Spec{ID: "storage-pooled", Limits: Limits{WorkspaceBytes: 8 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer pooled.Destroy(ctx)
	if res := sh(t, pooled, "head -c 9000000 /dev/zero > /home/workspace/b; echo $?"); strings.TrimSpace(res.stdout) != "1" {
		t.Fatalf("a pooled sandbox wrote past its workspace's size: %q %q", res.stdout, res.stderr)
	}
	sb, err := r.Create(ctx, Spec{ID: "storage-limits", Limits: Limits{WorkspaceBytes: 8 << 20, TmpBytes: 4 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Destroy(ctx)
	for _, tc := range []struct {
		name, cmd, want string
	}{
		{"workspace within its size", "head -c 4000000 /dev/zero > /home/workspace/a && echo ok", "ok"},
		{"workspace past its size", "head -c 8000000 /dev/zero > /home/workspace/b; echo $?", "1"},
		{"tmp past its size", "head -c 6000000 /dev/zero > /tmp/a; echo $?", "1"},
		{"tmp is the user's", "stat -c '%U %a' /tmp", "user 755"},
		{"workspace is the user's", "stat -c '%U %a' /home/workspace", "user 700"},
		// A subvolume of its own would hold a quota of its own: limited
		// by nothing.
		{"no btrfs ioctl", "python3 -c 'import fcntl,os; fcntl.ioctl(os.open(\"/tmp\", os.O_RDONLY), 0x5000940e, bytearray(4096))' 2>&1 | grep -c 'Operation not permitted'", "1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "no btrfs ioctl" {
				if _, err := os.Stat("/usr/bin/python3"); err != nil {
					t.Skip("no python3 to issue the ioctl")
				}
			}
			res := sh(t, sb, tc.cmd)
			if got := strings.TrimSpace(res.stdout); got != tc.want {
				t.Fatalf("%s: got %q (stderr %q), want %q", tc.cmd, got, res.stderr, tc.want)
			}
		})
	}
}

func TestStorageCopyOnWrite(t *testing.T) {
	r, root := storageRuntime(t)
	ctx := context.Background()
	img := imageRoot(t, []imagetest.File{{Path: "app/seed", Body: "from the image\n"}})
	spec := Spec{ID: "cow-src", Image: &ImageRoot{Dir: img}, Workdir: "/app"}
	src, err := r.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Destroy(ctx)
	write := "head -c 50000000 /dev/urandom > /home/workspace/big && echo w > /home/workspace/f && mkdir /tmp/d && echo t > /tmp/d/g && ln -s /etc/passwd /home/workspace/link && echo a > /app/new && rm /app/seed && sha256sum /home/workspace/big | cut -c1-64"
	res := sh(t, src, write)
	if res.exit.Code != 0 {
		t.Fatalf("write: %+v %q", res.exit, res.stderr)
	}
	sum := strings.TrimSpace(res.stdout)

	copySpec := spec
	copySpec.ID, copySpec.From = "cow-copy", src
	cp, err := r.Create(ctx, copySpec)
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Destroy(ctx)
	if cp.uid == src.uid {
		t.Fatal("the copy has its source's uid")
	}
	check := "sha256sum /home/workspace/big | cut -c1-64; cat /home/workspace/f /tmp/d/g /app/new; readlink /home/workspace/link; test -e /app/seed || echo seed gone; stat -c %U /home/workspace/big /tmp/d /app/new"
	want := sum + "\nw\nt\na\n/etc/passwd\nseed gone\nuser\nuser\nuser\n"
	if got := sh(t, cp, check); got.stdout != want {
		t.Fatalf("the copy holds:\n%s(stderr %q)\nwant:\n%s", got.stdout, got.stderr, want)
	}
	// Each writes its own: neither sees the other's changes.
	if res := sh(t, cp, "echo copy > /home/workspace/f && rm /tmp/d/g && echo c >> /app/new && echo more >> /home/workspace/big"); res.exit.Code != 0 {
		t.Fatalf("write in the copy: %+v %q", res.exit, res.stderr)
	}
	if got := sh(t, src, "cat /home/workspace/f /tmp/d/g /app/new; sha256sum /home/workspace/big | cut -c1-64"); got.stdout != "w\nt\na\n"+sum+"\n" {
		t.Fatalf("the copy's writes reached its source: %q %q", got.stdout, got.stderr)
	}
	// A copy needs the source's image and workdir.
	other := Spec{ID: "cow-other", From: src}
	if _, err := r.Create(ctx, other); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("a copy without its source's image: %v", err)
	}
	// Destroying removes every subvolume; nothing of either is left once
	// both end.
	dir := cp.vol
	if err := cp.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the copy's storage is left: %v", err)
	}
	if got := sh(t, src, "cat /home/workspace/f"); got.stdout != "w\n" {
		t.Fatalf("destroying the copy changed its source: %q", got.stdout)
	}
	_ = src.Destroy(ctx)
	entries, _ := filepath.Glob(filepath.Join(root, "*", "*"))
	if len(entries) != 0 {
		t.Fatalf("storage left after every sandbox ended: %v", entries)
	}
}

// A copy of a sandbox on the runtime's own root is a warm sandbox of the
// pool that adopts snapshots of its source's files: mounted over its own
// empty subvolumes on the host, they reach it by propagation. It holds
// what its source held, as its own user's; neither sees the other's
// writes; the sandbox cannot unmount its copy to reach what is under it;
// a copy of the copy is a copy too; nothing is left once all end.
func TestStorageCopyAdoptsIntoAWarmSandbox(t *testing.T) {
	root := filepath.Join(conchtest.Btrfs(t, 2<<30), "storage")
	r := ownRuntime(t, Config{Storage: root, PoolSize: 2})
	ctx := context.Background()
	waitPool(t, r, 2)
	src, err := r.Create(ctx, Spec{ID: "adopt-src"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Destroy(ctx)
	write := "head -c 20000000 /dev/urandom > /home/workspace/big && echo w > /home/workspace/f && mkdir /tmp/d && echo t > /tmp/d/g && ln -s /etc/passwd /home/workspace/link && sha256sum /home/workspace/big | cut -c1-64"
	res := sh(t, src, write)
	if res.exit.Code != 0 {
		t.Fatalf("write: %+v %q", res.exit, res.stderr)
	}
	sum := strings.TrimSpace(res.stdout)
	waitPool(t, r, 2)

	cp, err := r.Create(ctx, Spec{ID: "adopt-copy", From: src, Limits: Limits{WorkspaceBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Destroy(ctx)
	if len(cp.hostMounts) != 2 {
		t.Fatalf("the copy was not a warm sandbox's adoption (host mounts %q)", cp.hostMounts)
	}
	check := "sha256sum /home/workspace/big | cut -c1-64; cat /home/workspace/f /tmp/d/g; readlink /home/workspace/link; stat -c %U /home/workspace/big /tmp/d; pwd"
	want := sum + "\nw\nt\n/etc/passwd\nuser\nuser\n/home/workspace\n"
	if got := sh(t, cp, check); got.stdout != want {
		t.Fatalf("the copy holds:\n%s(stderr %q)\nwant:\n%s", got.stdout, got.stderr, want)
	}
	// The host's path of the workspace (the file API's root) shows the
	// copy too.
	if b, err := os.ReadFile(filepath.Join(cp.WorkspacePath(), "f")); err != nil || string(b) != "w\n" {
		t.Fatalf("the copy's workspace on the host holds %q, %v", b, err)
	}
	// The copy is held to its own size.
	if got := sh(t, cp, "head -c 50000000 /dev/zero > /home/workspace/z; echo $?"); strings.TrimSpace(got.stdout) != "1" {
		t.Fatalf("the copy wrote past its size: %q %q", got.stdout, got.stderr)
	}
	if res := sh(t, cp, "rm /home/workspace/z; echo copy > /home/workspace/f && rm /tmp/d/g"); res.exit.Code != 0 {
		t.Fatalf("write in the copy: %+v %q", res.exit, res.stderr)
	}
	if got := sh(t, src, "cat /home/workspace/f /tmp/d/g"); got.stdout != "w\nt\n" {
		t.Fatalf("the copy's writes reached its source: %q %q", got.stdout, got.stderr)
	}
	if res := sh(t, src, "echo src > /home/workspace/f2"); res.exit.Code != 0 {
		t.Fatal(res.stderr)
	}
	if got := sh(t, cp, "cat /home/workspace/f; test -e /home/workspace/f2 || echo no f2"); got.stdout != "copy\nno f2\n" {
		t.Fatalf("the source's writes reached its copy: %q %q", got.stdout, got.stderr)
	}
	if got := sh(t, cp, "umount /home/workspace 2>&1; umount -l /tmp 2>&1; cat /home/workspace/f"); !strings.HasSuffix(got.stdout, "copy\n") {
		t.Fatalf("the sandbox reached under its copy: %q", got.stdout)
	}

	waitPool(t, r, 2)
	cp2, err := r.Create(ctx, Spec{ID: "adopt-copy2", From: cp})
	if err != nil {
		t.Fatal(err)
	}
	if got := sh(t, cp2, "cat /home/workspace/f; sha256sum /home/workspace/big | cut -c1-64"); got.stdout != "copy\n"+sum+"\n" {
		t.Fatalf("a copy of the copy holds %q %q", got.stdout, got.stderr)
	}
	for _, sb := range []*Sandbox{cp2, cp, src} {
		dir := sb.vol
		if err := sb.Destroy(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a sandbox's storage is left: %v", err)
		}
	}
}

// A copy of a sandbox in tmpfs cannot be made copy-on-write: it is
// refused, never made by another means here.
func TestCopyNeedsStorage(t *testing.T) {
	r := testRuntime(t)
	ctx := context.Background()
	src, err := r.Create(ctx, Spec{ID: "nocow-src"})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Destroy(ctx)
	if r.CopyOnWrite() {
		t.Fatal("a runtime without storage says it copies on write")
	}
	if _, err := r.Create(ctx, Spec{ID: "nocow-copy", From: src}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("got %v", err)
	}
}

// What an executor that died left in storage is removed by the next one
// to start there, not by one that runs beside it.
func TestStorageSweepsTheDead(t *testing.T) {
	mnt := conchtest.Btrfs(t, 1<<30)
	root := filepath.Join(mnt, "storage")
	first, _, err := openStorage(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := first.dir("sb")
	if err := os.Mkdir(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := volume(filepath.Join(dir, "workspace"), "", 0, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	second, _, err := openStorage(root)
	if err != nil {
		t.Fatal(err)
	}
	defer second.close()
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("a live instance's storage was swept: %v", err)
	}
	// A copy adopted by a warm sandbox is a mount over its subvolume.
	if err := volume(filepath.Join(dir, "workspace-copy"), "", 0, 0, 1<<20); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(filepath.Join(dir, "workspace-copy"), filepath.Join(dir, "workspace"), "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	first.inst.Close() // as a crash would: its storage is left
	third, stale, err := openStorage(root)
	if err != nil || stale != nil {
		t.Fatal(err)
	}
	defer third.close()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a dead instance's storage is left: %v", err)
	}
	if _, _, err := openStorage(t.TempDir()); err == nil || !strings.Contains(err.Error(), "not on btrfs") {
		t.Fatalf("storage off btrfs: %v", err)
	}
}
