package policy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	// A stub logs its path and arguments, each run ended by \x1e, fields
	// separated by \x1f, in one write so that pipeline stages running at
	// once do not interleave; it runs nothing.
	stub := "#!/bin/sh\nsep=$(printf '\\037'); l=$0; for a in \"$@\"; do l=\"$l$sep$a\"; done\nprintf '%s\\036' \"$l\" >> \"$CONCH_EXEC_LOG\"\n"
	for _, n := range []string{"ok", "bad", "grep", "wc", "sort", "head", "jq", "tr", "cut", "uniq", "tail"} {
		if err := os.WriteFile(filepath.Join(l.bin, n), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The wrappers and shells are real, so that what they run is logged
	// by the stubs too.
	for _, n := range []string{"env", "nice", "nohup", "timeout", "xargs", "stdbuf", "sh", "bash", "dash"} {
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

// withoutProfiles removes from a plan the assignments the engine sets for
// its programs' profiles (safe bins' HOME, git's locked configuration), at
// every depth of sh -c: each level of nesting quotes the plan inside it
// once more, so each of its single quotes is escaped once more.
func withoutProfiles(plan string) string {
	for _, prefix := range []string{gitAssignments, safeBinAssignments} {
		for range maxDepth + 1 {
			plan = strings.ReplaceAll(plan, prefix, "")
			prefix = strings.ReplaceAll(prefix, "'", `'\''`)
		}
	}
	return plan
}

// judge evaluates cmd in the lab in allowlist mode.
func (l *shellLab) judge(cmd string) Result {
	return l.engine.Evaluate(Request{Command: cmd, Cwd: l.work, Resolver: PathResolver{Path: []string{l.bin}},
		Env: map[string]string{"LAB_VALUE": "--from-env"}, Settings: Settings{Security: SecurityAllowlist, Ask: AskOff}})
}

// check judges cmd and, when the engine allows it, runs the plan it would
// run under dash and under bash. It fails if a shell executed a binary the
// engine did not allow, with arguments other than those judged, or wrote a
// file; and if the plan, judged again, is not the same command.
func (l *shellLab) check(t *testing.T, cmd string) {
	res := l.judge(cmd)
	if res.Reason == ErrNotAllowed+": command could not be judged" {
		t.Fatalf("the engine panicked on %q", cmd)
	}
	if res.Decision != Allow {
		return
	}
	// The profiles' assignments are the engine's own; without them the
	// plan must judge as the same command.
	again := l.judge(withoutProfiles(res.Plan))
	if again.Decision != Allow || again.Plan != res.Plan || len(again.Segments) != len(res.Segments) {
		t.Fatalf("the plan of %q judges differently: %q -> %s %q, plan %q", cmd, res.Plan, again.Decision, again.Reason, again.Plan)
	}
	judged := map[string]bool{}
	// expanding are the programs given words the shell still expands (a
	// glob, a leading ~, a variable the request does not set): their
	// arguments are known only when they run.
	expanding := map[string]bool{}
	for i, s := range res.Segments {
		if strings.ContainsAny(strings.Join(s.Argv[1:], ""), "*?[~$") {
			expanding[s.ResolvedPath] = true
		}
		if s.ResolvedPath != again.Segments[i].ResolvedPath || !slices.Equal(s.Argv[1:], again.Segments[i].Argv[1:]) {
			t.Fatalf("the plan of %q judges segment %d as %+v, not %+v", cmd, i, again.Segments[i], s)
		}
		judged[strings.Join(append([]string{s.ResolvedPath}, s.Argv[1:]...), "\x1f")] = true
	}
	for _, sh := range []string{"dash", "bash"} {
		shell, err := exec.LookPath(sh)
		if err != nil {
			t.Fatalf("no %s to run commands with", sh)
		}
		_ = os.Remove(l.log)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		c := exec.CommandContext(ctx, shell, "-c", res.Plan)
		if sh == "bash" {
			c = exec.CommandContext(ctx, shell, "--norc", "--noprofile", "-c", res.Plan)
		}
		c.Dir = l.work
		c.Env = []string{"PATH=" + l.bin, "HOME=" + l.home, "CONCH_EXEC_LOG=" + l.log, "LAB_VALUE=--from-env"}
		_ = c.Run()
		cancel()
		b, _ := os.ReadFile(l.log)
		for _, line := range strings.Split(string(b), "\x1e") {
			if line == "" {
				continue
			}
			argv := strings.Split(line, "\x1f")
			if !l.allowed[argv[0]] {
				t.Fatalf("%s ran %s for %q (plan %q), which the engine did not allow (segments %+v)", sh, argv[0], cmd, res.Plan, res.Segments)
			}
			if !judged[line] && !expanding[argv[0]] {
				t.Fatalf("%s ran %q for %q (plan %q), which the engine did not judge (segments %+v)", sh, argv, cmd, res.Plan, res.Segments)
			}
		}
		entries, _ := os.ReadDir(l.work)
		if len(entries) > 0 {
			t.Fatalf("%s wrote %s in the work dir for %q (plan %q), which the engine allowed", sh, entries[0].Name(), cmd, res.Plan)
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
	// Parser differentials between mvdan/sh, dash and bash.
	"ok #\\\nbad", "true #\\\nbad", "ok \"$\\\n(bad)\"", "ok \"$\\\n{X}\"", "ok <<\\\n-'EOF'\nbad\nEOF\nbad",
	"ok <<-'E'\n\tbad\n\tE\nok", "ok <<'E' | ok\nx\nE\nok", "sh -c 'ok #\\\nbad'", "sh -c 'true #\\\n bad'",
	"ok \"$LAB_VALUE\"", "ok \"$UNSET\" x", "ok ~ ~/x a~b a=~", "ok a\\\n#b", "ok \\#x", "ok '\\'\nbad",
	"ok <<'E'\nE \nbad\nE", "ok <<'CONCH_EOF'\nCONCH_EOF_1\nCONCH_EOF", "! ok && ok", "ok\r\nbad", "ok;;bad",
	"jq '$ENV'", "jq '$ ENV'", "jq '$#x\nENV'", "jq 'def f: env; f'", "jq 'include \"x\"; .'", "grep -e x -e y",
	"sh -c 'sh -c \"ok #\\\\\\nbad\"'", "env ok '#' bad", "ok $'\\n'bad", "ok \\\n\\\n && ok",
	// A nested shell's plan: its command string is replaced, profiles included.
	"/bin/sh -c cd / ", "sh -c cd", "bash -c 'wc -l' && sh -c 'ok | grep x'", "sh -c 'sh -c \"cd; jq .\"'",
	"nohup sh -c cd / ", "env nice -n 1 timeout 5 sh -c 'ok' x",
}

// fuzzPieces are the tokens the generator of FuzzEngineVersusShell builds
// commands from: the constructs two shell parsers are known to read
// differently, and enough ordinary ones to make whole commands.
var fuzzPieces = []string{
	"ok", "bad", "grep x", "wc -l", "jq .", "env ", "nice ", "sh -c ", "bash -c ", "cd / ", " ", " ", "\t",
	"\\\n", "\\\n", "\n", "#", "#\\\n", "'", "\"", "$'", "$\"", "$", "${", "}", "$(", ")", "`", "$((",
	"<<'E'\n", "<<-'E'\n", "<<E\n", "<<\\\n", "-'E'", "E\n", "\tE\n", "&&", "||", "|", ";", ";;", "&",
	"(", "{", "*", "?", "[", "]", "~", "!", "=", "\\", "X=1 ", "LAB_VALUE", "\"$LAB_VALUE\"", "--", "-c",
}

// generate builds a command from fuzzPieces, driven by seed.
func generate(seed uint64, n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		seed = seed*6364136223846793005 + 1442695040888963407
		b.WriteString(fuzzPieces[(seed>>33)%uint64(len(fuzzPieces))])
	}
	return b.String()
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
	if b, _ := os.ReadFile(l.log); string(b) != filepath.Join(l.bin, "ok")+"\x1e"+filepath.Join(l.bin, "bad")+"\x1e" {
		t.Fatalf("the lab logged %q", b)
	}
}

// FuzzEngineVersusShell checks that no command the engine allows in
// allowlist mode runs a binary the allowlist does not allow, or arguments
// it did not judge: the plan of every allowed command is run by dash and by
// bash, and what they executed is compared with the engine's segments.
// Each input is a command, or, with gen set, a command built from
// fuzzPieces (comments, continuations, heredocs, quotes …) after it.
func FuzzEngineVersusShell(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add(s, uint64(0), uint8(0))
	}
	for _, tc := range policyCases {
		f.Add(tc.cmd, uint64(0), uint8(0))
	}
	for i := range uint64(64) {
		f.Add("ok ", i*0x9e3779b97f4a7c15, uint8(3+i%12))
	}
	l := newShellLab(f)
	f.Fuzz(func(t *testing.T, cmd string, gen uint64, n uint8) {
		if gen != 0 {
			cmd += generate(gen, int(n%24))
		}
		l.check(t, cmd)
	})
}

// TestGeneratedCommands runs a fixed sample of generated commands, so that
// every test run covers the generator's constructs.
func TestGeneratedCommands(t *testing.T) {
	l := newShellLab(t)
	allowed := 0
	for i := range uint64(3000) {
		cmd := "ok " + generate(i*0x9e3779b97f4a7c15+1, 2+int(i%10))
		if l.judge(cmd).Decision == Allow {
			allowed++
		}
		l.check(t, cmd)
	}
	t.Logf("%d of 3000 generated commands were allowed and run under dash and bash", allowed)
	// The sample must exercise the shells, not only the refusals.
	if allowed < 100 {
		t.Fatalf("only %d of 3000 generated commands were allowed", allowed)
	}
}
