package wsync

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/executor/sandbox"
	"github.com/conch-sh/conch/services/executor/sandbox/agent"
	"github.com/conch-sh/conch/services/executor/sandbox/seccomp"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
)

// TestMain lets the test binary serve as the sandbox agent.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == wire.AgentCommand {
		if err := agent.Run(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// newSandbox builds a real sandbox whose workspace the tests read and write.
func newSandbox(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	dir, err := os.MkdirTemp("", "conch-wsync-test-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o711)
	prog, err := seccomp.Program()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := sandbox.NewRuntime(sandbox.Config{Seccomp: prog, StateDir: filepath.Join(dir, "state"), CgroupParent: "conch-test/" + filepath.Base(dir)})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := rt.Create(t.Context(), sandbox.Spec{ID: "w"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sb.Destroy(context.WithoutCancel(t.Context()))
		rt.Close()
		_ = os.RemoveAll(dir)
	})
	return sb
}

func sh(t *testing.T, sb *sandbox.Sandbox, cmd string) string {
	t.Helper()
	var out strings.Builder
	p, err := sb.Start(sandbox.Options{Command: cmd, Budget: -1, OnOutput: func(_ sandbox.Stream, b []byte) { out.Write(b) }})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("%q did not finish", cmd)
	}
	return out.String()
}

func uidOf(t *testing.T, sb *sandbox.Sandbox) int { return sb.HostUID() }

// Class 17: symlinks made inside the sandbox are recorded, never followed.
func TestHostSideNeverFollowsSymlinks(t *testing.T) {
	sb := newSandbox(t)
	hostSecret := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(hostSecret, []byte("host only"), 0o644); err != nil {
		t.Fatal(err)
	}
	sh(t, sb, `echo inside > real
ln -s /etc/shadow shadow
ln -s / rootlink
ln -s ../../../../.. up
ln -s `+hostSecret+` hostfile
ln -s /proc/self/root selfroot
mkdir d && ln -s /etc d/etc
mkfifo fifo`)

	scan, err := Scan(sb.WorkspacePath(), 1000)
	if err != nil {
		t.Fatal(err)
	}
	for p, target := range map[string]string{"/shadow": "/etc/shadow", "/rootlink": "/", "/up": "../../../../..", "/hostfile": hostSecret, "/d/etc": "/etc"} {
		if m := scan[p]; m.Type != Symlink || m.Target != target {
			t.Errorf("scan[%s] = %+v, want a symlink to %s", p, m, target)
		}
	}
	if _, ok := scan["/rootlink/etc"]; ok {
		t.Error("scan descended into a symlink")
	}
	if _, ok := scan["/fifo"]; ok {
		t.Error("scan listed a fifo")
	}

	root, err := OpenRoot(sb.WorkspacePath(), uidOf(t, sb))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, p := range []string{"/shadow", "/rootlink/etc/passwd", "/up/etc/passwd", "/hostfile", "/d/etc/hostname", "/selfroot/etc/passwd", "/fifo", "/d", "/../etc/passwd", "/nope"} {
		if f, err := root.Open(p); err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			t.Errorf("Open(%s) read %q, want refused", p, b)
		}
	}
	f, err := root.Open("/real")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "inside\n" {
		t.Fatalf("real = %q", b)
	}

	// Writing through a planted symlink never reaches the host.
	hostDir := t.TempDir()
	sh(t, sb, "ln -s "+hostDir+" evil; ln -s "+hostSecret+" overwrite")
	if err := root.WriteFile("/evil/planted", 0o644, time.Time{}, strings.NewReader("x")); err == nil {
		t.Error("wrote through a symlinked directory")
	}
	if entries, _ := os.ReadDir(hostDir); len(entries) != 0 {
		t.Fatalf("host dir got %v", entries)
	}
	if err := root.WriteFile("/overwrite", 0o644, time.Time{}, strings.NewReader("replaced")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(hostSecret); string(b) != "host only" {
		t.Fatalf("host file changed to %q", b)
	}
	if err := root.Mkdir("/evil/sub", 0o755); err == nil {
		t.Error("made a directory through a symlink")
	}
	if err := root.Symlink("/evil/l", "/"); err == nil {
		t.Error("made a symlink through a symlink")
	}
	if got := sh(t, sb, "cat overwrite; echo; ls -l overwrite | cut -c1"); got != "replaced\n-\n" {
		t.Fatalf("sandbox sees %q", got)
	}
}

// Hydrated files belong to the sandbox user, who can change them.
func TestHydratedFilesBelongToTheSandbox(t *testing.T) {
	sb := newSandbox(t)
	root, err := OpenRoot(sb.WorkspacePath(), uidOf(t, sb))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := root.Mkdir("/notes", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := root.WriteFile("/notes/a.txt", 0o644, time.Time{}, strings.NewReader("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := root.Symlink("/latest", "notes/a.txt"); err != nil {
		t.Fatal(err)
	}
	got := sh(t, sb, "cat latest && echo more >> notes/a.txt && stat -c '%u %n' notes notes/a.txt && rm latest && echo ok")
	if got != "hello\n1000 notes\n1000 notes/a.txt\nok\n" {
		t.Fatalf("sandbox sees %q", got)
	}
	before, err := Scan(sb.WorkspacePath(), 100)
	if err != nil {
		t.Fatal(err)
	}
	sh(t, sb, "echo new > notes/b.txt; rm -r notes/a.txt; mkdir -p x/y")
	after, err := Scan(sb.WorkspacePath(), 100)
	if err != nil {
		t.Fatal(err)
	}
	c := Diff(before, after)
	if !slices.Contains(c.Changed, "/notes/b.txt") || !slices.Contains(c.Changed, "/x/y") || !slices.Equal(c.Removed, []string{"/notes/a.txt"}) {
		t.Fatalf("diff %+v", c)
	}
	if slices.Index(c.Changed, "/x") > slices.Index(c.Changed, "/x/y") {
		t.Fatalf("parent after child: %v", c.Changed)
	}
	if _, err := Scan(sb.WorkspacePath(), 2); err == nil {
		t.Fatal("scan ignored its entry limit")
	}
}

func TestCleanRefusesEscapes(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "a", "/", "/a/../b", "/..", "/a/.", "//a", "/a//b", "/a\x00b", "/" + strings.Repeat("x", 256), "/a/"} {
		if _, err := clean(p); err == nil {
			t.Errorf("clean(%q) accepted", p)
		}
	}
	for _, p := range []string{"/a", "/a/b.txt", "/.hidden", "/a b/ü"} {
		if _, err := clean(p); err != nil {
			t.Errorf("clean(%q): %v", p, err)
		}
	}
}

// Hydrated files keep their stored permission bits and mtime, whatever
// the process umask, and never become setuid or setgid.
func TestWriteFileRestoresModeAndMtime(t *testing.T) {
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	dir := t.TempDir()
	root, err := OpenRoot(dir, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	mtime := time.Date(2024, 2, 29, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		p          string
		mode, want fs.FileMode
	}{
		{"/script", 0o755, 0o755},
		{"/shared", 0o666, 0o666},
		{"/suid", fs.ModeSetuid | fs.ModeSetgid | 0o755, 0o755},
	} {
		if err := root.WriteFile(tc.p, tc.mode, mtime, strings.NewReader("x")); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(filepath.Join(dir, tc.p))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != tc.want || !fi.ModTime().Equal(mtime) {
			t.Errorf("%s: mode %v mtime %v, want %v %v", tc.p, fi.Mode(), fi.ModTime(), tc.want, mtime)
		}
	}
	if err := root.Mkdir("/team", 0o775); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "team")); err != nil || fi.Mode().Perm() != 0o775 {
		t.Errorf("dir mode %v %v, want 0775", fi.Mode(), err)
	}
}
