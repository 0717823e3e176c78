package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/executor/sandbox/fsview"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
)

// The host resolves a sandbox's programs to what the sandbox's own shell
// finds: the same PATH, the same mounts, the same symlinks — never the
// host's.
func TestResolverAgreesWithTheShell(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{PathPrepend: []string{wire.WorkspaceDir + "/pre"}})
	setup := `mkdir -p bin pre sub dirprog && printf '#!/bin/sh\necho ws\n' > bin/tool && chmod +x bin/tool && cp bin/tool pre/pretool && printf x > bin/plain &&
		ln -s /usr/bin/env bin/envlink && ln -s ../../../etc/shadow bin/shadow && ln -s /bin bin/binlink && ln -s .. up &&
		ln -s loop2 loop1 && ln -s loop1 loop2 && ln -s ` + wire.AgentPath + ` bin/agentlink && ln -s ../../agent hostlink &&
		printf '#!/bin/sh\n' > /tmp/tmptool && chmod +x /tmp/tmptool`
	if r := sh(t, sb, setup); r.exit.Code != 0 {
		t.Fatalf("setup: %+v", r)
	}
	// A tool command, as package toolshim installs it.
	if err := os.Symlink(wire.AgentPath, filepath.Join(sb.ToolsPath(), "mytool")); err != nil {
		t.Fatal(err)
	}
	// On the host, hostlink leads from the workspace to the agent binary
	// the runtime keeps beside the sandboxes' state.
	if _, err := os.Stat(filepath.Join(sb.WorkspacePath(), "hostlink")); err != nil {
		t.Fatalf("hostlink does not lead anywhere on the host: %v", err)
	}

	names := []string{
		"sh", "env", "ls", "readlink", "python3", "mytool", "pretool", "nosuch", "dirprog", "loop1", "hostlink",
		"bin/tool", "./bin/../bin/tool", "sub/../bin/tool", "up/workspace/bin/tool", "bin/envlink", "bin/shadow",
		"bin/binlink/ls", "bin/agentlink", "bin/plain", "./loop1", "./hostlink", "/bin/sh", "/etc/shadow",
		"/run/conch/agent", "/run/conch/tools/mytool", "/run/x", "/run/conch/x", "/usr/bin/env",
	}
	// The shell's answer: the real path of what it would run, or "-".
	var script strings.Builder
	script.WriteString(`for n in`)
	for _, n := range names {
		script.WriteString(" '" + n + "'")
	}
	script.WriteString(`; do case $n in
		*/*) if [ -f "$n" ] && [ -x "$n" ]; then readlink -f -- "$n"; else echo -; fi;;
		*) p=$(command -v -- "$n") && [ -f "$p" ] && readlink -f -- "$p" || echo -;;
	esac; done`)
	r := sh(t, sb, script.String())
	shell := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if r.exit.Code != 0 || len(shell) != len(names) {
		t.Fatalf("the shell's answers: %+v", r)
	}

	res := sb.Resolver(nil)
	for i, n := range names {
		host := "-"
		if p, err := res.LookPath(n, wire.WorkspaceDir); err == nil {
			host = res.RealPath(p)
		}
		if host != shell[i] {
			t.Errorf("%s: the host resolves %q, the sandbox's shell %q", n, host, shell[i])
		}
	}
	if shell[0] == "-" || shell[len(names)-1] == "-" {
		t.Errorf("the shell found no system program: %v", shell)
	}

	// What lies in the sandbox's own /tmp is neither found nor missing.
	if p, err := res.LookPath("/tmp/tmptool", wire.WorkspaceDir); !errors.Is(err, fsview.ErrPrivate) {
		t.Errorf("LookPath(/tmp/tmptool) = %q, %v; want ErrPrivate", p, err)
	}
}

// A command no sandbox runs is judged by what a new sandbox would find: the
// runtime's root filesystem, not the host's.
func TestRuntimeResolverSeesTheRootFS(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "usr", "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, mode := range map[string]os.FileMode{"sh": 0o755, "only-here": 0o755, "not-exec": 0o644} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	state := t.TempDir()
	if err := os.Chmod(state, 0o711); err != nil {
		t.Fatal(err)
	}
	r, err := NewRuntime(Config{Seccomp: filter(t), StateDir: filepath.Join(state, "state"), CgroupParent: "conch-test-" + filepath.Base(state), RootFS: root})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	res, err := r.Resolver(nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ name, want string }{
		{"only-here", "/usr/bin/only-here"},
		{"sh", "/usr/bin/sh"},
		{"/bin/only-here", "/usr/bin/only-here"}, // through the root filesystem's own link
		{"ls", ""},                               // the host's, not the root filesystem's
		{"not-exec", ""},                         // not executable
		{"./script", ""},                         // nothing in a new workspace
		{"/etc/passwd", ""},
	}
	for _, tt := range tests {
		got, err := res.LookPath(tt.name, wire.WorkspaceDir)
		if tt.want == "" {
			if err == nil {
				t.Errorf("LookPath(%q) = %q, want not found", tt.name, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("LookPath(%q) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	// The view is made once.
	again, err := r.Resolver([]string{"/opt/tools"})
	if err != nil || again.View != res.View || again.Path[0] != "/opt/tools" {
		t.Errorf("second Resolver = %+v, %v; want the same view with the path prepended", again, err)
	}
}
