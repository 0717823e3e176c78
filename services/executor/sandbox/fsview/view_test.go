package fsview

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// tree is a host directory standing in for one sandbox: a root
// filesystem, a workspace, a tools dir and an agent binary, plus host
// files no sandbox sees.
type tree struct {
	dir    string
	mounts []Mount
}

// sandboxUID is the host uid the tree's sandbox runs as; it owns nothing
// the test makes, so the others' permission bits apply to it.
const sandboxUID = 4242

func newTree(t *testing.T) *tree {
	t.Helper()
	dir := t.TempDir()
	tr := &tree{dir: dir}
	files := []struct {
		path string
		mode fs.FileMode
		body string
	}{
		{"rootfs/usr/bin/tool", 0o755, "system tool"},
		{"rootfs/usr/bin/env", 0o755, "system env"},
		{"rootfs/usr/bin/plain", 0o644, "not a program"},
		{"rootfs/usr/bin/owned", 0o700, "only for its owner"},
		{"rootfs/usr/sbin/admin", 0o755, "system admin"},
		{"rootfs/etc/shadow", 0o600, "host secret"},
		{"ws/bin/tool", 0o755, "workspace tool"},
		{"ws/bin/plain", 0o644, "not a program"},
		{"ws/bin/owned", 0o700, "only for its owner"},
		{"ws/locked/tool", 0o755, "behind a closed dir"},
		{"ws/script", 0o755, "workspace script"},
		{"secret/tool", 0o755, "host secret"},
		{"agent", 0o555, "the agent"},
	}
	for _, f := range files {
		p := filepath.Join(dir, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"rootfs/usr/local/bin", "rootfs/etc/alternatives", "ws/bin/dirprog", "tools"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "ws/locked"), 0o700); err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"rootfs/usr/bin/alt":          "/etc/alternatives/alt",
		"rootfs/etc/alternatives/alt": "/usr/bin/tool",
		"tools/search":                "/run/conch/agent",
		"ws/abs":                      "/usr/bin/env",
		"ws/bin/shadow":               "/etc/shadow",
		"ws/rel-escape":               "../../../etc/shadow",
		"ws/deep-escape":              strings.Repeat("../", 40) + "etc/shadow",
		"ws/rel-host":                 "../secret/tool",
		"ws/host-dir":                 "../secret",
		"ws/host-abs":                 filepath.Join(dir, "secret/tool"),
		"ws/loop1":                    "loop2",
		"ws/loop2":                    "loop1",
		"ws/self":                     "self",
		"ws/dot":                      ".",
		"ws/up":                       "..",
		"ws/usrbin":                   "/usr/bin",
		"ws/bin-link":                 "/bin",
		"ws/tmp":                      "/tmp/tool",
		"ws/proc":                     "/proc/self/root/etc/shadow",
		"ws/empty-dir-link":           "bin/dirprog",
		"ws/dangling":                 "nowhere",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	tr.mounts = []Mount{
		{Target: "/usr", Source: filepath.Join(dir, "rootfs/usr")},
		{Target: "/bin", Link: "usr/bin"},
		{Target: "/sbin", Link: "usr/sbin"},
		{Target: "/etc/alternatives", Source: filepath.Join(dir, "rootfs/etc/alternatives")},
		{Target: "/etc/missing", Source: filepath.Join(dir, "rootfs/etc/missing")},
		{Target: "/proc"},
		{Target: "/dev"},
		{Target: "/tmp"},
		{Target: "/run"},
		{Target: "/run/conch"},
		{Target: "/run/conch/agent", Source: filepath.Join(dir, "agent")},
		{Target: "/run/conch/tools", Source: filepath.Join(dir, "tools")},
		{Target: "/home/workspace", Source: filepath.Join(dir, "ws")},
	}
	return tr
}

func (tr *tree) view(t *testing.T, uid int) *View {
	t.Helper()
	v, err := New(tr.mounts, uid, uid)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// sandboxPath is the PATH of a sandbox's commands.
var sandboxPath = []string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin", "/sbin", "/run/conch/tools"}

const ws = "/home/workspace"

// failure names how a lookup must fail.
type failure int

const (
	ok failure = iota
	notFound
	missing   // ENOENT
	notDir    // ENOTDIR
	denied    // EACCES
	loop      // ELOOP
	private   // ErrPrivate
	somewhere // ENOENT or ErrPrivate, depending on where the test's temp dir is
)

func (f failure) check(t *testing.T, err error) {
	t.Helper()
	want := map[failure][]error{
		notFound: {ErrNotFound}, missing: {fs.ErrNotExist}, notDir: {unix.ENOTDIR}, denied: {unix.EACCES},
		loop: {unix.ELOOP}, private: {ErrPrivate}, somewhere: {fs.ErrNotExist, ErrPrivate},
	}[f]
	for _, w := range want {
		if errors.Is(err, w) {
			return
		}
	}
	t.Errorf("error %v, want one of %v", err, want)
}

func TestLookPath(t *testing.T) {
	tr := newTree(t)
	v := tr.view(t, sandboxUID)
	tests := []struct {
		name, dir string
		path      []string // nil: sandboxPath
		want      string   // LookPath's answer
		real      string   // RealPath of it; empty: want
		fail      failure
	}{
		// PATH search.
		{name: "tool", dir: ws, want: "/usr/bin/tool"},
		{name: "admin", dir: ws, want: "/usr/sbin/admin"},
		{name: "alt", dir: ws, want: "/usr/bin/alt", real: "/usr/bin/tool"},
		{name: "search", dir: ws, want: "/run/conch/tools/search", real: "/run/conch/agent"},
		{name: "nosuch", dir: ws, fail: notFound},
		{name: "plain", dir: ws, fail: notFound},
		{name: "owned", dir: ws, fail: notFound},
		{name: "shadow", dir: ws, fail: notFound},
		{name: "..", dir: ws, fail: notFound},
		{name: "tool", dir: ws, path: []string{ws + "/bin", "/usr/bin"}, want: ws + "/bin/tool"},
		{name: "dirprog", dir: ws, path: []string{ws + "/bin", "/usr/bin"}, fail: notFound},
		{name: "plain", dir: ws, path: []string{ws + "/bin", "/usr/bin"}, fail: notFound},
		{name: "env", dir: ws, path: []string{ws + "/locked", "/usr/bin"}, want: "/usr/bin/env"},
		{name: "tool", dir: ws, path: []string{ws + "/locked", "/usr/bin"}, want: "/usr/bin/tool"},
		{name: "tool", dir: ws, path: []string{ws + "/host-dir", "/usr/bin"}, want: "/usr/bin/tool"},
		{name: "tool", dir: ws, path: []string{ws + "/usrbin"}, want: "/usr/bin/tool"},
		{name: "tool", dir: ws, path: []string{"/bin"}, want: "/usr/bin/tool"},
		{name: "tool", dir: ws, path: []string{"/tmp/bin", "/usr/bin"}, fail: private},
		{name: "tool", dir: ws, path: []string{"/proc/self/cwd", "/usr/bin"}, fail: private},
		{name: "tool", dir: ws, path: []string{"/opt/bin", "/nonexistent", "/usr/bin"}, want: "/usr/bin/tool"},
		// Empty and relative PATH entries are the working directory's.
		{name: "script", dir: ws, path: []string{"", "/usr/bin"}, want: ws + "/script"},
		{name: "tool", dir: ws, path: []string{"bin", "/usr/bin"}, want: ws + "/bin/tool"},
		{name: "tool", dir: ws + "/bin", path: []string{".", "/usr/bin"}, want: ws + "/bin/tool"},
		{name: "abs", dir: ws, path: []string{""}, want: ws + "/abs", real: "/usr/bin/env"},
		{name: "loop1", dir: ws, path: []string{"", "/usr/bin"}, fail: notFound},
		{name: "tmp", dir: ws, path: []string{"", "/usr/bin"}, fail: private},

		// Names with a slash, after cd.
		{name: "./script", dir: ws, want: ws + "/script"},
		{name: "bin/tool", dir: ws, want: ws + "/bin/tool"},
		{name: "./tool", dir: ws + "/bin", want: ws + "/bin/tool"},
		{name: "../script", dir: ws + "/bin", want: ws + "/script"},
		{name: "bin/../bin/./tool", dir: ws, want: ws + "/bin/tool"},
		{name: "/home/workspace/bin/tool", dir: "/", want: ws + "/bin/tool"},
		{name: "/bin/tool", dir: ws, want: "/usr/bin/tool"},
		{name: "../../../../usr/bin/tool", dir: ws, want: "/usr/bin/tool"},
		{name: "bin/plain", dir: ws, fail: denied},
		{name: "bin/dirprog", dir: ws, fail: denied},
		{name: "bin", dir: ws, path: []string{""}, fail: notFound},
		{name: "locked/tool", dir: ws, fail: denied},
		{name: "bin/tool/", dir: ws, fail: notFound},
		{name: "bin/tool/x", dir: ws, fail: notDir},
		{name: "bin/owned", dir: ws, fail: denied},
		{name: "/usr/bin/owned", dir: ws, fail: denied},
		{name: "./dangling", dir: ws, fail: missing},
		{name: "./empty-dir-link", dir: ws, fail: denied},
		// The working directory is walked too: cd into a link.
		{name: "./tool", dir: ws + "/usrbin", want: "/usr/bin/tool"},
		{name: "./script", dir: ws + "/dot/dot", want: ws + "/script"},

		// Symlinks resolve in the sandbox, never on the host.
		{name: "./abs", dir: ws, want: ws + "/abs", real: "/usr/bin/env"},
		{name: "usrbin/tool", dir: ws, want: "/usr/bin/tool"},
		{name: "bin-link/alt", dir: ws, want: "/usr/bin/alt", real: "/usr/bin/tool"},
		// ".." after a link is the link target's parent, not lexical.
		{name: "usrbin/../bin/tool", dir: ws, want: "/usr/bin/tool"},
		{name: "usrbin/../sbin/admin", dir: ws, want: "/usr/sbin/admin"},
		{name: "up/workspace/script", dir: ws, want: ws + "/script"},
		{name: "up/../../../home/workspace/script", dir: ws, want: ws + "/script"},
		{name: "./rel-escape", dir: ws, fail: missing},
		{name: "./deep-escape", dir: ws, fail: missing},
		{name: "bin/shadow", dir: ws, fail: missing},
		{name: "/etc/shadow", dir: ws, fail: missing},
		{name: "./rel-host", dir: ws, fail: missing},
		{name: "host-dir/tool", dir: ws, fail: missing},
		{name: "./host-abs", dir: ws, fail: somewhere},
		{name: "/opt/tool", dir: ws, fail: missing},
		{name: "/etc/missing", dir: ws, fail: missing},
		{name: "./loop1", dir: ws, fail: loop},
		{name: "./self", dir: ws, fail: loop},
		{name: "./tmp", dir: ws, fail: private},
		{name: "./proc", dir: ws, fail: private},
		{name: "/tmp/tool", dir: ws, fail: private},
		{name: "/run/conch/cmd-1", dir: ws, fail: private},
		{name: "/run/conch/agent", dir: ws, want: "/run/conch/agent"},
		{name: "./tool", dir: "/tmp", fail: private},
	}
	for _, tt := range tests {
		t.Run(tt.name+" in "+tt.dir, func(t *testing.T) {
			p := tt.path
			if p == nil {
				p = sandboxPath
			}
			r := Resolver{View: v, Path: p}
			got, err := r.LookPath(tt.name, tt.dir)
			if tt.fail != ok {
				if err == nil {
					t.Fatalf("LookPath = %q, want an error", got)
				}
				tt.fail.check(t, err)
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("LookPath = %q, %v; want %q", got, err, tt.want)
			}
			real := tt.real
			if real == "" {
				real = tt.want
			}
			if got := r.RealPath(got); got != real {
				t.Errorf("RealPath = %q, want %q", got, real)
			}
		})
	}
}

// The permissions that count are those of the sandbox's uid: what its
// owner may run, another may not.
func TestLookPathAsOwner(t *testing.T) {
	tr := newTree(t)
	owner := Resolver{View: tr.view(t, os.Getuid()), Path: []string{ws + "/locked", ws + "/bin"}}
	other := Resolver{View: tr.view(t, sandboxUID), Path: owner.Path}
	for _, tt := range []struct{ name, owner, other string }{
		{"tool", ws + "/locked/tool", ws + "/bin/tool"},
		{"owned", ws + "/bin/owned", ""},
	} {
		if got, err := owner.LookPath(tt.name, ws); got != tt.owner {
			t.Errorf("owner: LookPath(%q) = %q, %v; want %q", tt.name, got, err, tt.owner)
		}
		if got, _ := other.LookPath(tt.name, ws); got != tt.other {
			t.Errorf("other: LookPath(%q) = %q, want %q", tt.name, got, tt.other)
		}
	}
}

func TestOpen(t *testing.T) {
	tr := newTree(t)
	v := tr.view(t, sandboxUID)
	for _, tt := range []struct {
		path, want string
		fail       failure
	}{
		{path: ws + "/bin/tool", want: "workspace tool"},
		{path: ws + "/abs", want: "system env"},
		{path: "/bin/alt", want: "system tool"},
		{path: "/run/conch/tools/search", want: "the agent"},
		{path: ws + "/bin/owned", want: "only for its owner"},
		{path: ws + "/rel-host", fail: missing},
		{path: ws + "/host-dir/tool", fail: missing},
		{path: ws + "/host-abs", fail: somewhere},
		{path: ws + "/bin/shadow", fail: missing},
		{path: ws + "/tmp", fail: private},
		{path: ws + "/loop2", fail: loop},
		{path: ws + "/bin", fail: ok}, // not a regular file
	} {
		f, err := v.Open(tt.path)
		if tt.want == "" {
			if err == nil {
				f.Close()
				t.Errorf("Open(%q) succeeded, want an error", tt.path)
			} else if tt.fail != ok {
				tt.fail.check(t, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("Open(%q): %v", tt.path, err)
			continue
		}
		b, err := io.ReadAll(f)
		f.Close()
		if err != nil || string(b) != tt.want {
			t.Errorf("Open(%q) reads %q, %v; want %q", tt.path, b, err, tt.want)
		}
	}
}

func TestNew(t *testing.T) {
	for _, m := range [][]Mount{
		{{Target: "usr", Source: "/usr"}},
		{{Target: "/usr/", Source: "/usr"}},
		{{Target: "/", Source: "/"}},
		{{Target: "/x/../usr", Source: "/usr"}},
		{{Target: "/usr", Source: "usr"}},
		{{Target: "/bin", Source: "/usr/bin", Link: "usr/bin"}},
	} {
		if _, err := New(m, sandboxUID, sandboxUID); err == nil {
			t.Errorf("New(%+v) accepted", m)
		}
	}
	// A later entry hides what an earlier one put at or beneath its
	// target, as mounting it over them does.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	v, err := New([]Mount{{Target: "/opt/a/b", Source: dir}, {Target: "/opt/a"}, {Target: "/srv", Source: "/nonexistent"}, {Target: "/srv", Source: dir}}, sandboxUID, sandboxUID)
	if err != nil {
		t.Fatal(err)
	}
	r := Resolver{View: v}
	if _, err := r.LookPath("/opt/a/b/x", "/"); !errors.Is(err, ErrPrivate) {
		t.Errorf("a hidden entry is still seen: %v", err)
	}
	if got, err := r.LookPath("/srv/x", "/"); got != "/srv/x" {
		t.Errorf("the later of two entries at one target is not the one seen: %q, %v", got, err)
	}
}

// A workspace directory swapped for a symlink to a host directory while
// the host reads through it never makes the host read the host's file.
func TestSwapRace(t *testing.T) {
	tr := newTree(t)
	v := tr.view(t, sandboxUID)
	wsDir := filepath.Join(tr.dir, "ws")
	if err := os.Mkdir(filepath.Join(wsDir, "race"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wsDir, "race/tool"), []byte("workspace tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	// On the host, spare leads to the secret; in the sandbox, nowhere.
	if err := os.Symlink("../secret", filepath.Join(wsDir, "spare")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	swaps := 0
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(wsDir, "race"), unix.AT_FDCWD, filepath.Join(wsDir, "spare"), unix.RENAME_EXCHANGE); err != nil {
				t.Error(err)
				return
			}
			swaps++
		}
	}()
	r := Resolver{View: v, Path: []string{ws + "/race"}}
	seen := map[string]int{}
	for range 3000 {
		if f, err := v.Open(ws + "/race/tool"); err == nil {
			b, _ := io.ReadAll(f)
			f.Close()
			seen[string(b)]++
		} else {
			seen["error"]++
		}
		if p, err := r.LookPath("tool", ws); err == nil && p != ws+"/race/tool" {
			t.Fatalf("LookPath = %q", p)
		}
		if p, err := r.LookPath("race/tool", ws); err == nil && p != ws+"/race/tool" {
			t.Fatalf("LookPath = %q", p)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("%d swaps; reads: %v", swaps, seen)
	if seen["host secret"] > 0 {
		t.Fatalf("the host's file was read through the workspace %d times", seen["host secret"])
	}
	if seen["workspace tool"] == 0 || swaps == 0 {
		t.Fatalf("the race did not run: %d swaps, reads %v", swaps, seen)
	}
}
