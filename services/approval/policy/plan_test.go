package policy

import (
	"slices"
	"strings"
	"testing"

	"mvdan.cc/sh/v3/syntax"
)

func judgeAllowlist(e *Engine, r Resolver, cmd string, env map[string]string) Result {
	return e.Evaluate(Request{Command: cmd, Cwd: "/home/u/work", Env: env, Resolver: r,
		Settings: Settings{Security: SecurityAllowlist, Ask: AskOnMiss}})
}

// TestPlan pins the canonical re-print of judged commands: every word
// single-quoted from its judged value, programs by their resolved path,
// the five operators, heredocs with a fresh delimiter.
func TestPlan(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	for _, tc := range []struct{ cmd, plan string }{
		{"ls -la", "'/usr/bin/ls' '-la'\n"},
		{"ls 'a b' \"c'd\"", "'/usr/bin/ls' 'a b' 'c'\\''d'\n"},
		{"ls && cat x || ls; ls", "'/usr/bin/ls' && '/usr/bin/cat' 'x' || '/usr/bin/ls'\n'/usr/bin/ls'\n"},
		{"! ls | wc -l", "! '/usr/bin/ls' | HOME='/dev/null' '/usr/bin/wc' '-l'\n"},
		{"ls *.go ~/x a~b", "'/usr/bin/ls' *'.go' ~/'x' 'a~b'\n"},
		{"ls \"$X\" \"$UNSET\"", "'/usr/bin/ls' 'from env' \"${UNSET}\"\n"},
		{"cd /tmp && ls", "'cd' '/tmp' && '/usr/bin/ls'\n"},
		{"cd && ls", "'cd' '/home/u' && '/usr/bin/ls'\n"},
		{"cat <<'EOF'\nCONCH_EOF\n$(id)\nEOF", "'/usr/bin/cat' <<'CONCH_EOF_1'\nCONCH_EOF\n$(id)\nCONCH_EOF_1\n"},
		{"cat <<-'E' | wc\n\tx\n\tE\nls", "'/usr/bin/cat' <<'CONCH_EOF' | HOME='/dev/null' '/usr/bin/wc'\nx\nCONCH_EOF\n'/usr/bin/ls'\n"},
		{"sh -c 'ls #x'", "'/usr/bin/sh' '-c' ''\\''/usr/bin/ls'\\''\n'\n"},
		{"env ls", "'/usr/bin/env' 'ls'\n"},
		// Line continuations and comments are gone: the plan says what
		// the engine read (continuation.go refuses those it could read
		// otherwise than the shell).
		{"ls \\\n-l #c", "'/usr/bin/ls' '-l'\n"},
		// An unpaired backslash ends the command; the shells keep it.
		{"ls a\\", "'/usr/bin/ls' 'a\\'\n"},
	} {
		res := judgeAllowlist(e, r, tc.cmd, map[string]string{"X": "from env"})
		if res.Decision != Allow {
			t.Errorf("%q: %s %q, want allow", tc.cmd, res.Decision, res.Reason)
			continue
		}
		if res.Plan != tc.plan {
			t.Errorf("%q: plan\n%q, want\n%q", tc.cmd, res.Plan, tc.plan)
		}
		// The plan parses as the same tree in bash and POSIX mode.
		for _, lang := range []syntax.LangVariant{syntax.LangBash, syntax.LangPOSIX} {
			if _, err := syntax.NewParser(syntax.Variant(lang)).Parse(strings.NewReader(res.Plan), ""); err != nil {
				t.Errorf("%q: plan does not parse as %s: %v", tc.cmd, lang, err)
			}
		}
	}
}

// TestNoPlanUnlessJudged: security full runs the command as written, a
// refusal has nothing to run.
func TestNoPlanUnlessJudged(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	full := e.Evaluate(Request{Command: "ls $(id)", Cwd: "/", Resolver: r, Settings: Settings{Security: SecurityFull, Ask: AskOff}})
	denied := judgeAllowlist(e, r, "ls $(id)", nil)
	asked := judgeAllowlist(e, r, "rm x", nil)
	switch {
	case full.Decision != Allow || full.Plan != "":
		t.Errorf("full: %s plan %q", full.Decision, full.Plan)
	case denied.Decision != Deny || denied.Plan != "":
		t.Errorf("denied: %s plan %q", denied.Decision, denied.Plan)
	case asked.Decision != AskHuman || asked.Plan != "'/usr/bin/rm' 'x'\n":
		// An approved miss runs the judged plan too.
		t.Errorf("asked: %s plan %q", asked.Decision, asked.Plan)
	}
}

// TestBypassClasses holds cases of each class of the allowlist bypasses
// found from outside; the differential test runs such commands for real.
func TestBypassClasses(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	for _, tc := range []struct {
		class, cmd string
		env        map[string]string
		want       Decision
		reason     string // substring
	}{
		// 1. Parser differentials: what the engine may read otherwise
		// than the shell is refused; a program it did not judge never
		// appears.
		{"parser", "ls #\\\nid", nil, deny, ErrUnsupportedToken + "backslash-newline in a comment"},
		{"parser", "true #\\\nid", nil, deny, ErrUnsupportedToken + "backslash-newline in a comment"},
		{"parser", "cat <<\\\n-'EOF'\nid\nEOF\nid", nil, deny, "unclosed here-document"},
		{"parser", "sh -c 'ls #\\\nid'", nil, deny, ErrUnsupportedToken + "backslash-newline in a comment"},
		{"parser", "ls \"$\\\n(id)\"", nil, deny, ErrUnsupportedToken + "backslash-newline after $"},
		{"parser", "cat<<'E'#x\nE\nid", nil, deny, ErrUnsupportedToken + "# inside a word"},
		{"parser", "cat <<\"E\"#x\nE\nid", nil, deny, ErrUnsupportedToken + "# inside a word"},
		{"parser", "sh -c \"cat<<'E'#x\nE\nid\"", nil, deny, ErrUnsupportedToken + "# inside a word"},
		{"parser", "ls a#b 'c'#d ;#x\nls #y", nil, allow, ""},
		// 2. jq reading the environment or modules.
		{"jq", "jq '$ ENV'", nil, ask, "$ not followed by a name"},
		{"jq", "jq '$#x\nENV'", nil, ask, "$ not followed by a name"},
		{"jq", "jq 'def f: env; f'", nil, ask, "uses env"},
		{"jq", "jq 'def f: $ENV.HOME; f'", nil, ask, "uses $ENV"},
		{"jq", "jq '\"\\($ENV)\"'", nil, ask, "uses $ENV"},
		{"jq", "jq '{$__loc__}'", nil, ask, "uses $__loc__"},
		{"jq", "jq 'include \"x\"; .'", nil, ask, "import or include"},
		{"jq", "jq 'input_filename'", nil, ask, "uses input_filename"},
		{"jq", "jq '.env | .ENV'", nil, allow, "allowlist"},
		// 3. git running programs.
		{"git", "sh -c 'git \"$1\" \"$2\"' sh -c 'alias.x=!id'", nil, deny, ErrUnsupportedToken + "$1"},
		{"git", "git \"$X\" log", map[string]string{"X": "--exec-path=/tmp"}, ask, "git --exec-path=/tmp is not judged"},
		{"git", "ls | xargs git", nil, deny, "xargs builds commands"},
		{"git", "git grep -Oid x", nil, ask, "git grep -Oid runs a program"},
		{"git", "git grep --open-files-in-pager=id x", nil, ask, "runs a program"},
		{"git", "git clone -u id x", nil, ask, "git clone -u runs a program"},
		{"git", "git clone --u=id x", nil, ask, "git clone --u=id runs a program"},
		{"git", "git clone --conf=alias.x=!id x", nil, ask, "runs a program"},
		{"git", "git rebase -xid main", nil, ask, "git rebase -xid runs a program"},
		{"git", "git rebase -ix id main", nil, ask, "runs a program"},
		{"git", "git log --format=x --outp=.git/config", nil, ask, "writes configuration"},
		{"git", "git x", nil, ask, "git x is not a git command the policy judges"},
		{"git", "git -c alias.x=!id x", nil, ask, "git -c is not judged"},
		{"git", "git --git-dir=evil log", nil, ask, "is not judged"},
		{"git", "git --config-env=core.pager=X log", nil, ask, "is not judged"},
		{"git", "git status", nil, allow, "allowlist"},
		// 4. The request's env.
		{"env", "grep x", map[string]string{"POSIXLY_CORRECT": "1"}, deny, "POSIXLY_CORRECT may not be set"},
		{"env", "git status", map[string]string{"GIT_SEQUENCE_EDITOR": "id"}, deny, "GIT_SEQUENCE_EDITOR may not be set"},
		{"env", "ls", map[string]string{"http_proxy": "x"}, deny, "http_proxy may not be set"},
		{"env", "ls", map[string]string{"LESSOPEN": "|id"}, deny, "LESSOPEN may not be set"},
		{"env", "ls", map[string]string{"MY_TOOL_CMD": "id"}, deny, "MY_TOOL_CMD may not be set"},
		{"env", "ls", map[string]string{"LANG": "C.UTF-8", "LC_ALL": "C", "TZ": "UTC", "BUILD_ID": "7"}, allow, "allowlist"},
		// 5. Program runners.
		{"runner", "prlimit --nproc=1 id", nil, ask, "prlimit runs programs"},
		{"runner", "setarch x86_64 id", nil, ask, "runs programs"},
		{"runner", "find . -name x -execdir id ';'", nil, deny, "find -execdir"},
		{"runner", "env -- xargs id", nil, deny, "xargs builds commands"},
		{"runner", "tar xIf id a.tar", nil, ask, "tar xIf runs another program"},
		{"runner", "tar -xI id -f a.tar", nil, ask, "tar -xI runs another program"},
		{"runner", "tar --to-c=id -xf a.tar", nil, ask, "runs another program"},
		{"runner", "tar xf a.tar", nil, allow, "allowlist"},
	} {
		res := judgeAllowlist(e, r, tc.cmd, tc.env)
		if res.Decision != tc.want || !strings.Contains(res.Reason, tc.reason) {
			t.Errorf("%s: %q: %s %q, want %s containing %q", tc.class, tc.cmd, res.Decision, res.Reason, tc.want, tc.reason)
		}
		for _, seg := range res.Segments {
			if seg.Decision == Allow && seg.Argv[0] == "id" {
				t.Errorf("%s: %q: allows id: %+v", tc.class, tc.cmd, res.Segments)
			}
		}
	}
}

// TestPlanLocksGit: an allowed git runs with no system or global config
// and with every program-running key overridden at command scope.
func TestPlanLocksGit(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	res := judgeAllowlist(e, r, "git log -1", nil)
	for _, want := range []string{"GIT_CONFIG_GLOBAL='/dev/null'", "GIT_CONFIG_NOSYSTEM='1'", "'core.hooksPath'", "'safe.bareRepository'", "'/usr/bin/git' 'log' '-1'"} {
		if !strings.Contains(res.Plan, want) {
			t.Errorf("plan %q lacks %q", res.Plan, want)
		}
	}
}

// TestAllowAlwaysRecordsRealFiles: allow-always records the file a link
// points to, judged by what it is; a link to a shell, a runner or a
// multi-call binary records nothing — also when the links were resolved by
// the caller (the executor) and reach the approval service as a map.
func TestAllowAlwaysRecordsRealFiles(t *testing.T) {
	t.Parallel()
	e, _ := testEngine()
	m := MapResolver{Paths: map[string]string{}, Real: map[string]string{
		"/home/u/work/link":   "/usr/bin/sh",
		"/home/u/work/lim":    "/usr/bin/prlimit",
		"/home/u/work/bb":     "/usr/bin/busybox",
		"/home/u/work/mytool": "/opt/tools/mytool-1.2",
		"/usr/bin/rm":         "/usr/bin/rm",
	}}
	for p := range m.Real {
		m.Paths[p] = p
	}
	m.Paths["rm"] = "/usr/bin/rm"
	for _, tc := range []struct {
		cmd  string
		want []string
	}{
		{"./link -c 'rm x'", []string{"/usr/bin/rm"}},
		{"./link script.sh", nil},
		{"./lim rm x", nil},
		{"./bb rm x", nil},
		{"./mytool --x", []string{"/opt/tools/mytool-1.2"}},
		{"rm x", []string{"/usr/bin/rm"}},
	} {
		res := judgeAllowlist(e, m, tc.cmd, nil)
		if got := res.Recordable(); !slices.Equal(got, tc.want) {
			t.Errorf("%q records %q, want %q (segments %+v)", tc.cmd, got, tc.want, res.Segments)
		}
	}
	// A link to sh is judged as the shell it is: what it runs is judged.
	if res := judgeAllowlist(e, m, "./link -c 'rm x; id'", nil); res.Decision != AskHuman || !strings.Contains(res.Reason, "/usr/bin/rm is not in the allowlist") {
		t.Errorf("a link to sh ran as a plain program: %s %q", res.Decision, res.Reason)
	}
}
