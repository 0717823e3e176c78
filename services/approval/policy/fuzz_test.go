package policy

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// shellLab is a directory where commands the engine allows really run:
// PATH holds only stub binaries that log their own path, arguments and
// input, and a few real wrappers linked in, so what a shell executes can
// be compared with what the engine decided.
type shellLab struct {
	bin, work, home, log string
	engine               *Engine
	allowed              map[string]bool
}

// The separators of the stubs' log: a run ends with \x1e, its fields are
// separated by \x1f, and its input follows its argv after \x1d.
const (
	labRunEnd   = "\x1e"
	labArgSep   = "\x1f"
	labInputSep = "\x1d"
)

func newShellLab(t testing.TB) *shellLab {
	dir := t.TempDir()
	l := &shellLab{bin: filepath.Join(dir, "bin"), work: filepath.Join(dir, "work"), home: filepath.Join(dir, "home"), log: filepath.Join(dir, "exec.log")}
	for _, d := range []string{l.bin, l.work, l.home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A stub logs its path, its arguments and what it reads on stdin (a
	// here-document's body) in one write, so that pipeline stages running
	// at once do not interleave; it runs nothing. Only builtins, so that a
	// stub costs one shell and no more.
	stub := "#!/bin/sh\nl=$0; for a in \"$@\"; do l=\"$l" + labArgSep + "$a\"; done\n" +
		"in=; while IFS= read -r x; do in=\"$in$x\n\"; done; in=\"$in$x\"\n" +
		"printf '%s" + labInputSep + "%s" + labRunEnd + "' \"$l\" \"$in\" >> \"$CONCH_EXEC_LOG\"\n"
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

// labRun is one program a stub logged: its path and arguments joined by
// labArgSep, and its input.
type labRun struct{ argv, input string }

// run runs script with sh in the lab and returns the programs the stubs
// logged, in the order they logged them, and the files it left in the
// work dir, by name, which it removes.
func (l *shellLab) run(t *testing.T, sh, script string) ([]labRun, map[string]string) {
	shell, err := exec.LookPath(sh)
	if err != nil {
		t.Fatalf("no %s to run commands with", sh)
	}
	_ = os.Remove(l.log)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	args := []string{"-c", script}
	if sh == "bash" {
		args = append([]string{"--norc", "--noprofile"}, args...)
	}
	c := exec.CommandContext(ctx, shell, args...)
	c.Dir = l.work
	c.Env = []string{"PATH=" + l.bin, "HOME=" + l.home, "CONCH_EXEC_LOG=" + l.log, "LAB_VALUE=--from-env"}
	_ = c.Run()
	var files map[string]string
	entries, _ := os.ReadDir(l.work)
	for _, e := range entries {
		if files == nil {
			files = map[string]string{}
		}
		p := filepath.Join(l.work, e.Name())
		b, _ := os.ReadFile(p)
		files[e.Name()] = string(b)
		if err := os.RemoveAll(p); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(l.log)
	var runs []labRun
	for _, entry := range strings.Split(string(b), labRunEnd) {
		if entry == "" {
			continue
		}
		argv, input, _ := strings.Cut(entry, labInputSep)
		runs = append(runs, labRun{argv: argv, input: input})
	}
	return runs, files
}

// check judges cmd and, when the engine allows it, runs under dash and
// under bash both the plan it would run and the command as written. It
// fails if the plan, judged again, is not the same command; if either run
// executed a binary the engine did not allow or wrote a file; if the plan
// ran arguments other than those judged; and if the command as written
// ran other programs, arguments or input than the plan: the engine must
// read a command as the shells do, not only run its own reading.
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
	// pinned are the programs given words the plan passes as written
	// where a shell may expand them (a brace or a ~ after = in bash, a
	// ~name in both): the engine judged those arguments unknown, and the
	// command as written may give the program others.
	pinned := map[string]bool{}
	for i, s := range res.Segments {
		expanding[s.ResolvedPath] = expanding[s.ResolvedPath] || strings.ContainsAny(strings.Join(s.Argv[1:], ""), "*?[~$")
		pinned[s.ResolvedPath] = pinned[s.ResolvedPath] || slices.ContainsFunc(s.Argv[1:], pinnedWord)
		if s.ResolvedPath != again.Segments[i].ResolvedPath || !slices.Equal(s.Argv[1:], again.Segments[i].Argv[1:]) {
			t.Fatalf("the plan of %q judges segment %d as %+v, not %+v", cmd, i, again.Segments[i], s)
		}
		judged[strings.Join(append([]string{s.ResolvedPath}, s.Argv[1:]...), labArgSep)] = true
	}
	// key is what the runs of the plan and of the command as written
	// must agree on: the program, its input and its arguments.
	key := func(r labRun) string {
		if p, _, _ := strings.Cut(r.argv, labArgSep); pinned[p] {
			return p + labInputSep + r.input
		}
		return r.argv + labInputSep + r.input
	}
	for _, sh := range []string{"dash", "bash"} {
		var keys [2][]string
		for i, script := range []string{res.Plan, cmd} {
			what := [2]string{"the plan", "the command as written"}[i]
			runs, files := l.run(t, sh, script)
			if len(files) > 0 {
				t.Fatalf("%s wrote %q in the work dir for %s of %q (plan %q), which the engine allowed", sh, files, what, cmd, res.Plan)
			}
			for _, r := range runs {
				argv := strings.Split(r.argv, labArgSep)
				if !l.allowed[argv[0]] {
					t.Fatalf("%s ran %s for %s of %q (plan %q), which the engine did not allow (segments %+v)", sh, argv[0], what, cmd, res.Plan, res.Segments)
				}
				if i == 0 && !judged[r.argv] && !expanding[argv[0]] {
					t.Fatalf("%s ran %q for the plan of %q (plan %q), which the engine did not judge (segments %+v)", sh, argv, cmd, res.Plan, res.Segments)
				}
				keys[i] = append(keys[i], key(r))
			}
			// Pipeline stages log in the order they end.
			slices.Sort(keys[i])
		}
		if !slices.Equal(keys[0], keys[1]) {
			t.Fatalf("%s ran %q for %q as written, but %q for its plan %q: the engine read it otherwise than the shell", sh, keys[1], cmd, keys[0], res.Plan)
		}
	}
}

// pinnedWord reports whether the plan passes a judged word as written
// where a shell may expand it: a ~ other than a leading one alone or
// before /, or a brace expression.
func pinnedWord(w string) bool {
	rest := w
	if w == "~" || strings.HasPrefix(w, "~/") {
		rest = w[1:]
	}
	if strings.Contains(rest, "~") {
		return true
	}
	_, after, ok := strings.Cut(w, "{")
	return ok && strings.Contains(after, "}") && (strings.Contains(after, ",") || strings.Contains(after, ".."))
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
	// Line continuations the parser and the shells read differently (the
	// command as written must run as judged, or be refused), a trailing
	// backslash, and a tilde prefix.
	"ok $\\\n{LAB_VALUE}", "ok $\\\n'x'", "ok $\\\n\"x\"", "ok \"$LAB\\\n_VALUE\"", "ok $(\\\n(bad))",
	"ok <<E\\\nOF\n$(bad)\nEOF", "ok <<\\E\\\nOF\nx\nEOF", "ok <<'E'\\\n| ok\nx\nE", "ok # x\\\nbad", "ok a#\\\nbad",
	"ok |\\\nok", "ok &&\\\nok", "ok;\\\nbad", "ok 'a\\\nb' \"c\\\nd\"", "ok <<'E'\na \\\nb\nE", "ok <<-'E'\n\tx\\\n\tE\n\tE",
	"ok a\\ \\\nb", "ok \"a\\\\\\\nb\"", "ok \\", "ok a\\", "ok \\\n\\", "ok ~/x ~", "ok ~\\\n/x", "ok \\\n~/x",
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
	"$\\\n", "~/",
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
	// is allowed, and a shell running "ok && bad" logs both, with what
	// bad reads.
	if res := l.engine.Evaluate(Request{Command: "ok", Cwd: l.work, Resolver: PathResolver{Path: []string{l.bin}},
		Settings: Settings{Security: SecurityAllowlist, Ask: AskOff}}); res.Decision != Allow {
		t.Fatalf("the lab's allowed program is not allowed: %+v", res)
	}
	for _, sh := range []string{"dash", "bash"} {
		got, _ := l.run(t, sh, "ok && bad x <<'E'\nin\nE")
		want := []labRun{{argv: filepath.Join(l.bin, "ok")}, {argv: filepath.Join(l.bin, "bad") + labArgSep + "x", input: "in\n"}}
		if !slices.Equal(got, want) {
			t.Fatalf("the lab logged %q under %s, want %q", got, sh, want)
		}
	}
}

// TestDenyRulePlansRunAsWritten: with deny rules, security full runs
// plans holding redirections, echo and printf; under dash and under bash
// each writes the files and runs the programs the command as written
// does.
func TestDenyRulePlansRunAsWritten(t *testing.T) {
	l := newShellLab(t)
	e := New(Config{Deny: []Entry{{ID: "no-bad", Pattern: filepath.Join(l.bin, "bad")}}, Home: l.home})
	full := Settings{Security: SecurityFull, Ask: AskOff, AskFallback: SecurityDeny}
	for _, cmd := range []string{
		"echo hi > out", "echo -n 'a  b' >> out; echo c >> out", "printf '%s|' a 'b c' > 'my out'",
		"printf 'x\\n' > in && ok y < in", "ok 2>&1 > out", "echo err 1>&2 2> err", "echo x 3> f >&3",
		"echo a > f >| g", "echo a 3<> f 1>&3", "echo a >&- ; echo b > f", "ok <<'E' > f\nbody\nE",
		"echo a > f | ok", "! echo a > f && ok",
	} {
		res := e.Evaluate(Request{Command: cmd, Cwd: l.work, Resolver: PathResolver{Path: []string{l.bin}}, Settings: full})
		if res.Decision != Allow {
			t.Fatalf("%q = %v %q, want allow", cmd, res.Decision, res.Reason)
		}
		for _, sh := range []string{"dash", "bash"} {
			planRuns, planFiles := l.run(t, sh, res.Plan)
			runs, files := l.run(t, sh, cmd)
			if len(files) == 0 && !strings.Contains(cmd, "ok") {
				t.Fatalf("%s: %q wrote nothing", sh, cmd)
			}
			if !maps.Equal(planFiles, files) || !slices.Equal(planRuns, runs) {
				t.Fatalf("%s: %q wrote %q and ran %q, its plan %q wrote %q and ran %q", sh, cmd, files, runs, res.Plan, planFiles, planRuns)
			}
		}
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
