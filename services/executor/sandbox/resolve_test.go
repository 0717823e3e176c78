package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/executor/sandbox/fsview"
)

// The host resolves a sandbox's programs to what the sandbox's own shell
// finds: the same PATH, the same mounts, the same symlinks — never the
// host's.
func TestResolverAgreesWithTheShell(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{PathPrepend: []string{WorkspaceDir + "/pre"}})
	setup := `mkdir -p bin pre sub dirprog && printf '#!/bin/sh\necho ws\n' > bin/tool && chmod +x bin/tool && cp bin/tool pre/pretool && printf x > bin/plain &&
		ln -s /usr/bin/env bin/envlink && ln -s ../../../etc/shadow bin/shadow && ln -s /bin bin/binlink && ln -s .. up &&
		ln -s loop2 loop1 && ln -s loop1 loop2 && ln -s ` + AgentPath + ` bin/agentlink && ln -s ../../agent hostlink &&
		printf '#!/bin/sh\n' > /tmp/tmptool && chmod +x /tmp/tmptool`
	if r := sh(t, sb, setup); r.exit.Code != 0 {
		t.Fatalf("setup: %+v", r)
	}
	// A tool command, as package toolshim installs it.
	if err := os.Symlink(AgentPath, filepath.Join(sb.ToolsPath(), "mytool")); err != nil {
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
		"bin/binlink/ls", "bin/agentlink", "bin/plain", "./loop1", "./hostlink", "/bin/sh", "/etc/shadow", "/usr/bin/env",
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
		if p, err := res.LookPath(n, WorkspaceDir); err == nil {
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
	if p, err := res.LookPath("/tmp/tmptool", WorkspaceDir); !errors.Is(err, fsview.ErrPrivate) {
		t.Errorf("LookPath(/tmp/tmptool) = %q, %v; want ErrPrivate", p, err)
	}
}
