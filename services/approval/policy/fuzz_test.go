package policy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// shellLab is a directory where commands the engine allows really run:
// PATH holds only stub binaries that log their own path, and a few real
// wrappers linked in, so what a shell executes can be compared with what
// the engine decided.
type shellLab struct {
	bin, work, home, log string
	engine               *Engine
	allowed              map[string]bool
}

func newShellLab(t testing.TB) *shellLab {
	dir := t.TempDir()
	l := &shellLab{bin: filepath.Join(dir, "bin"), work: filepath.Join(dir, "work"), home: filepath.Join(dir, "home"), log: filepath.Join(dir, "exec.log")}
	for _, d := range []string{l.bin, l.work, l.home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	stub := "#!/bin/sh\nprintf '%s\\n' \"$0\" >> \"$CONCH_EXEC_LOG\"\n"
	for _, n := range []string{"ok", "bad", "grep", "wc", "sort", "head", "jq", "tr", "cut", "uniq", "tail"} {
		if err := os.WriteFile(filepath.Join(l.bin, n), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"env", "nice", "nohup", "timeout", "xargs", "stdbuf"} {
		real, err := exec.LookPath(n)
		if err != nil {
			continue
		}
		if err := os.Symlink(real, filepath.Join(l.bin, n)); err != nil {
			t.Fatal(err)
		}
	}
	l.engine = New(Config{Allowlist: []Entry{{ID: "ok", Pattern: filepath.Join(l.bin, "ok")}}, SafeBinDirs: []string{l.bin}, Home: l.home})
	l.allowed = map[string]bool{filepath.Join(l.bin, "ok"): true}
	for _, n := range DefaultSafeBins {
		l.allowed[filepath.Join(l.bin, n)] = true
	}
	return l
}

// check runs cmd when the engine allows it and fails if the shell executed
// a binary the engine did not allow or wrote a file.
func (l *shellLab) check(t *testing.T, cmd string) {
	res := l.engine.Evaluate(Request{Command: cmd, Cwd: l.work, Resolver: PathResolver{Path: []string{l.bin}},
		Settings: Settings{Security: SecurityAllowlist, Ask: AskOff}})
	if res.Reason == ErrNotAllowed+": command could not be judged" {
		t.Fatalf("the engine panicked on %q", cmd)
	}
	if res.Decision != Allow {
		return
	}
	for _, sh := range []string{"bash", "sh"} {
		shell, err := exec.LookPath(sh)
		if err != nil {
			t.Fatalf("no %s to run commands with", sh)
		}
		_ = os.Remove(l.log)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		c := exec.CommandContext(ctx, shell, "-c", cmd)
		if sh == "bash" {
			c = exec.CommandContext(ctx, shell, "--norc", "--noprofile", "-c", cmd)
		}
		c.Dir = l.work
		c.Env = []string{"PATH=" + l.bin, "HOME=" + l.home, "CONCH_EXEC_LOG=" + l.log}
		_ = c.Run()
		cancel()
		b, _ := os.ReadFile(l.log)
		for _, p := range strings.Fields(string(b)) {
			if !l.allowed[p] {
				t.Fatalf("%s ran %s for %q, which the engine allowed (segments %+v)", sh, p, cmd, res.Segments)
			}
		}
		entries, _ := os.ReadDir(l.work)
		if len(entries) > 0 {
			t.Fatalf("%s wrote %s in the work dir for %q, which the engine allowed", sh, entries[0].Name(), cmd)
		}
	}
}

var fuzzSeeds = []string{
	"ok", "bad", "ok && bad", "ok; bad", "ok || bad", "ok | grep x", "ok | bad", "env ok", "env bad",
	"xargs ok", "xargs bad", "nice -n 1 ok", "timeout 5 ok", "ok $(bad)", "ok `bad`", "ok > f", "ok\nbad",
	"ok \\\nbad", "cd / && ok", "cd .. ; ok", "b\\ad", "'ok'", "\"ok\"", "o\"k\"", "$'bad'", "ok #; bad",
	"ok *", "grep -f f", "sort -o f", "head -n 1", "ok <<'E'\n$(bad)\nE", "ok <<E\n$(bad)\nE",
	"e\\\nnv bad", "{ok,bad}", "ok|&bad", "ok & bad", "(bad)", "ok && ok | wc -l", "bad() { ok; }; bad",
	"command bad", "exec bad", "ok 2>f", "env -- bad", "nohup -- ok", "stdbuf -oL ok", "ok ;; bad",
}

func TestShellAgreesWithEngine(t *testing.T) {
	l := newShellLab(t)
	for _, s := range fuzzSeeds {
		l.check(t, s)
	}
	// The lab itself must be able to see what runs: the allowed program
	// is allowed, and a shell running "ok && bad" logs both.
	if res := l.engine.Evaluate(Request{Command: "ok", Cwd: l.work, Resolver: PathResolver{Path: []string{l.bin}},
		Settings: Settings{Security: SecurityAllowlist, Ask: AskOff}}); res.Decision != Allow {
		t.Fatalf("the lab's allowed program is not allowed: %+v", res)
	}
	_ = os.Remove(l.log)
	c := exec.CommandContext(t.Context(), "bash", "--norc", "--noprofile", "-c", "ok && bad")
	c.Dir, c.Env = l.work, []string{"PATH=" + l.bin, "HOME=" + l.home, "CONCH_EXEC_LOG=" + l.log}
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("lab shell: %v %s", err, out)
	}
	if b, _ := os.ReadFile(l.log); strings.Join(strings.Fields(string(b)), " ") != filepath.Join(l.bin, "ok")+" "+filepath.Join(l.bin, "bad") {
		t.Fatalf("the lab logged %q", b)
	}
}

// FuzzEngineVersusShell checks that no command the engine allows in
// allowlist mode runs a binary the allowlist does not allow: every allowed
// command is run by bash and by sh, and the binaries they executed are
// compared with the engine's decision.
func FuzzEngineVersusShell(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s)
	}
	for _, tc := range policyCases {
		f.Add(tc.cmd)
	}
	l := newShellLab(f)
	f.Fuzz(func(t *testing.T, cmd string) {
		l.check(t, cmd)
	})
}
