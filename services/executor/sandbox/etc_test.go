package sandbox

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeRoot lays out a root filesystem's /etc with the kinds of entries a
// copy meets.
func fakeRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	etc := filepath.Join(root, "etc")
	for _, d := range []string{"ssl/certs", "ssl/private", "perl"} {
		if err := os.MkdirAll(filepath.Join(etc, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{"ssl/certs/ca.pem": "CERT", "ssl/private/key.pem": "KEY", "mime.types": "text/plain txt", "perl/x.pm": "1;", "shadow": "root:secret", "zoneinfo-utc": "UTC"}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(etc, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.Chmod(filepath.Join(etc, "ssl/private"), 0o700))
	must(t, os.Chmod(filepath.Join(etc, "ssl/private/key.pem"), 0o600))
	must(t, os.Symlink("ca.pem", filepath.Join(etc, "ssl/certs/abcd.0")))
	must(t, os.Symlink("/usr/share/zoneinfo/Etc/UTC", filepath.Join(etc, "ssl/certs/absolute")))
	must(t, os.Symlink(filepath.Join(etc, "zoneinfo-utc"), filepath.Join(etc, "localtime")))
	must(t, syscall.Mkfifo(filepath.Join(etc, "perl/fifo"), 0o644))
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestCopyEtc(t *testing.T) {
	root := fakeRoot(t)
	dir := filepath.Join(t.TempDir(), "etc")
	must(t, copyEtc(root, dir))
	cases := []struct {
		path string
		mode fs.FileMode // 0: absent
		body string      // a file's content or a symlink's target
	}{
		{"mime.types", 0o644, "text/plain txt"},
		{"ssl", fs.ModeDir | 0o755, ""},
		{"ssl/certs/ca.pem", 0o644, "CERT"},
		{"ssl/certs/abcd.0", fs.ModeSymlink | 0o777, "ca.pem"},
		{"ssl/certs/absolute", fs.ModeSymlink | 0o777, "/usr/share/zoneinfo/Etc/UTC"},
		{"ssl/private", fs.ModeDir | 0o700, ""},
		{"ssl/private/key.pem", 0o600, "KEY"},
		// An entry that is a symlink is followed, as a bind of it is.
		{"localtime", 0o644, "UTC"},
		{"perl/x.pm", 0o644, "1;"},
		{"perl/fifo", 0, ""},
		// Nothing that is not chosen.
		{"shadow", 0, ""},
		{"zoneinfo-utc", 0, ""},
		{"passwd", 0o644, identity["passwd"]},
		{"hostname", 0o644, "sandbox\n"},
	}
	for _, c := range cases {
		p := filepath.Join(dir, c.path)
		fi, err := os.Lstat(p)
		if c.mode == 0 {
			if err == nil {
				t.Errorf("%s copied", c.path)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.path, err)
			continue
		}
		if fi.Mode() != c.mode {
			t.Errorf("%s: mode %v, want %v", c.path, fi.Mode(), c.mode)
		}
		var got string
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			got, _ = os.Readlink(p)
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			got = string(b)
		}
		if got != c.body {
			t.Errorf("%s: %q, want %q", c.path, got, c.body)
		}
	}
}

func TestCopyEtcBounded(t *testing.T) {
	root := fakeRoot(t)
	big, err := os.Create(filepath.Join(root, "etc/perl/big"))
	must(t, err)
	must(t, big.Truncate(maxEtcBytes+1))
	must(t, big.Close())
	err = copyEtc(root, filepath.Join(t.TempDir(), "etc"))
	if err == nil || !strings.Contains(err.Error(), "more than 64 MiB") {
		t.Fatalf("err = %v", err)
	}
}

// A change to an entry, even in place with the same size, makes a new copy;
// the old one stays for the sandboxes that bound it.
func TestEtcRefresh(t *testing.T) {
	root := fakeRoot(t)
	e, err := newEtcCopy(root, t.TempDir())
	must(t, err)
	first := e.current()
	if changed, err := e.refresh(); err != nil || changed {
		t.Fatalf("refresh without a change: %v %v", changed, err)
	}
	time.Sleep(10 * time.Millisecond) // a later change time
	must(t, os.WriteFile(filepath.Join(root, "etc/ssl/certs/ca.pem"), []byte("CERU"), 0o644))
	if changed, err := e.refresh(); err != nil || !changed {
		t.Fatalf("refresh after a change: %v %v", changed, err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.current(), "ssl/certs/ca.pem")); string(b) != "CERU" {
		t.Fatalf("new copy holds %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(first, "ssl/certs/ca.pem")); string(b) != "CERT" {
		t.Fatalf("old copy holds %q", b)
	}
	// An entry that is a symlink to a directory is watched through it.
	lib := filepath.Join(root, "usr/lib/python3")
	must(t, os.MkdirAll(lib, 0o755))
	must(t, os.WriteFile(filepath.Join(lib, "site.conf"), []byte("a"), 0o644))
	must(t, os.Symlink(lib, filepath.Join(root, "etc/python3")))
	if changed, err := e.refresh(); err != nil || !changed {
		t.Fatalf("refresh after a new entry: %v %v", changed, err)
	}
	time.Sleep(10 * time.Millisecond)
	must(t, os.WriteFile(filepath.Join(lib, "site.conf"), []byte("b"), 0o644))
	if changed, err := e.refresh(); err != nil || !changed {
		t.Fatalf("refresh after a change behind a symlink: %v %v", changed, err)
	}
	if b, _ := os.ReadFile(filepath.Join(e.current(), "python3/site.conf")); string(b) != "b" {
		t.Fatalf("new copy holds %q", b)
	}
	must(t, os.Remove(filepath.Join(root, "etc/mime.types")))
	if changed, err := e.refresh(); err != nil || !changed {
		t.Fatalf("refresh after a removal: %v %v", changed, err)
	}
	if _, err := os.Stat(filepath.Join(e.current(), "mime.types")); err == nil {
		t.Fatal("a removed entry is still copied")
	}
}

// A sandbox's /etc holds the chosen entries the root filesystem has and its
// identity files, nothing else, in one read-only mount.
func TestSandboxEtc(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	var want []string
	for _, name := range etcFiles {
		if _, err := os.Stat(filepath.Join("/etc", name)); err == nil {
			want = append(want, name)
		}
	}
	for name := range identity {
		want = append(want, name)
	}
	r := sh(t, sb, "ls -A /etc | LC_ALL=C sort; touch /etc/x 2>/dev/null && echo writable; grep -c ' /etc[/ ]' /proc/self/mountinfo")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	got, mounts := lines[:len(lines)-1], lines[len(lines)-1]
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("/etc holds %q, want %q", got, want)
	}
	if mounts != "1" {
		t.Errorf("%s mounts at /etc and below it, want 1: %q", mounts, r.stdout)
	}
}
