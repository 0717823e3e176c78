package policy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestValidatePattern(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern string
		ok      bool
	}{
		{"/opt/homebrew/bin/rg", true},
		{"~/Projects/**/bin/*", true},
		{"~/.local/bin/*", true},
		{"/usr/bin/*", true},
		{"rg", false},
		{"bin/rg", false},
		{"./rg", false},
		{"~user/bin/rg", false},
		{"", false},
		{" /usr/bin/rg", false},
		{"/usr/bin/[", false},
		{"/usr/bin/rg\n", false},
	} {
		err := ValidatePattern(tc.pattern)
		if (err == nil) != tc.ok {
			t.Errorf("ValidatePattern(%q) = %v, want ok=%v", tc.pattern, err, tc.ok)
		}
		if err != nil && err.Error()[:len(ErrPatternNotBinary)] != ErrPatternNotBinary {
			t.Errorf("ValidatePattern(%q) = %q, want it to start with %q", tc.pattern, err, ErrPatternNotBinary)
		}
	}
}

func TestAllowlistMatching(t *testing.T) {
	t.Parallel()
	entries := compileEntries([]Entry{
		{ID: "a", Pattern: "~/Projects/*/bin/"},
		{ID: "b", Pattern: "/OPT/Homebrew/bin/RG"},
		{ID: "c", Pattern: "~/.local/bin/*"},
		{ID: "d", Pattern: "/srv/**/tool"},
		{ID: "bare", Pattern: "rg"},
	}, "/Users/user")
	for _, tc := range []struct {
		path, want string
	}{
		{"/Users/user/Projects/any/bin/rg", "a"},
		{"/Users/user/Projects/any/sub/bin/rg", ""},
		{"/opt/homebrew/bin/rg", "b"},
		{"/opt/homebrew/bin/rgx", ""},
		{"/Users/user/.local/bin/jq", "c"},
		{"/Users/user/.local/bin/x/jq", ""},
		{"/srv/a/b/c/tool", "d"},
		{"/srv/tool", "d"},
		{"/usr/bin/rg", ""},
		{"/x/rg", ""},
	} {
		got, _ := matchEntries(entries, tc.path, nil)
		if got != tc.want {
			t.Errorf("match(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
	if p := ExactPattern("/a/b[1]*/c"); p != `/a/b\[1\]\*/c` {
		t.Fatalf("ExactPattern = %q", p)
	}
	exact := compileEntries([]Entry{{ID: "x", Pattern: ExactPattern("/a/b[1]*/c")}}, "")
	if id, _ := matchEntries(exact, "/a/b[1]*/c", nil); id != "x" {
		t.Fatal("an exact pattern does not match its own path")
	}
	if id, _ := matchEntries(exact, "/a/b1zz/c", nil); id != "" {
		t.Fatal("an exact pattern matches as a glob")
	}
}

func TestSecurityModes(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	for _, tc := range []struct {
		s      Settings
		cmd    string
		want   Decision
		reason string
	}{
		{Settings{Security: SecurityDeny, Ask: AskAlways}, "ls", Deny, ErrNotAllowed},
		{Settings{}, "ls", Deny, ErrNotAllowed},
		{Settings{Security: SecurityFull, Ask: AskOff}, "ls > x && rm -rf $(pwd)", Allow, "security is full"},
		{Settings{Security: SecurityFull, Ask: AskAlways}, "ls", AskHuman, "ask is always"},
		{Settings{Security: SecurityFull, Ask: AskOff}, "ls 'x", Deny, "1:4: reached EOF without closing quote `'`"},
	} {
		res := e.Evaluate(Request{Command: tc.cmd, Cwd: "/", Settings: tc.s, Resolver: r})
		if res.Decision != tc.want || res.Reason != tc.reason {
			t.Errorf("%+v %q = %v %q, want %v %q", tc.s, tc.cmd, res.Decision, res.Reason, tc.want, tc.reason)
		}
	}
}

func TestEnvInjection(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	for _, env := range []map[string]string{
		{"LD_PRELOAD": "/tmp/x.so"}, {"ld_library_path": "/tmp"}, {"DYLD_INSERT_LIBRARIES": "x"},
		{"BASH_ENV": "/tmp/x"}, {"ENV": "/tmp/x"}, {"PS4": "$(id)"}, {"PATH": "/tmp"},
		{"PYTHONSTARTUP": "x"}, {"PERL5OPT": "-Mx"}, {"NODE_OPTIONS": "--require x"},
		{"GIT_SSH_COMMAND": "id"}, {"BASH_FUNC_ls%%": "() { id; }"}, {"IFS": "/"}, {"A": "x\x00y"},
		{"1A": "x"}, {"": "x"}, {"CDPATH": "/tmp"},
	} {
		res := e.Evaluate(Request{Command: "ls", Cwd: "/", Env: env, Settings: Settings{Security: SecurityFull}, Resolver: r})
		if res.Decision != Deny {
			t.Errorf("env %q: decision %v, want deny", env, res.Decision)
		}
	}
	if err := CheckEnv(map[string]string{"LANG": "C.UTF-8", "TZ": "UTC", "FOO_BAR": "x"}); err != nil {
		t.Fatalf("CheckEnv of plain variables: %v", err)
	}
}

// allow-always records the inner program, never a shell, interpreter,
// multi-call binary or wrapper (THREATS A6).
func TestRecordable(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	for _, tc := range []struct {
		cmd  string
		want []string
	}{
		{"rm -rf x", []string{"/usr/bin/rm"}},
		{"sh -c 'rm x'", []string{"/usr/bin/rm"}},
		{"bash -c 'rm x && chmod +x y'", nil},
		{"sh -c 'rm x | chmod +x y'", nil},
		{"sh -c 'env nice rm x'", []string{"/usr/bin/rm"}},
		{"rm x && chmod +x y", []string{"/usr/bin/rm", "/usr/bin/chmod"}},
		{"env nice rm x", []string{"/usr/bin/rm"}},
		{"sh script.sh", nil},
		{"perl -e 1", nil},
		{"node x.js", nil},
		{"busybox rm x", nil},
		{"sudo rm x", nil},
		{"ls | xargs rm", nil},
		{"ls | xargs grep x", nil},
		{"make", nil},
		{"awk 1", nil},
		{"./wc", []string{"/home/u/work/wc"}},
	} {
		res := e.Evaluate(Request{Command: tc.cmd, Cwd: "/home/u/work", Settings: Settings{Security: SecurityAllowlist, Ask: AskOnMiss}, Resolver: r})
		if got := res.Recordable(); !slices.Equal(got, tc.want) {
			t.Errorf("%q records %q, want %q", tc.cmd, got, tc.want)
		}
	}
}

func TestFallback(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	eval := func(cmd string, ask Ask) Result {
		return e.Evaluate(Request{Command: cmd, Cwd: "/", Settings: Settings{Security: SecurityAllowlist, Ask: ask}, Resolver: r})
	}
	for _, tc := range []struct {
		res      Result
		fallback Security
		want     Decision
		reason   string
	}{
		{eval("rm x", AskOnMiss), SecurityDeny, Deny, ErrTimeout},
		{eval("rm x", AskOnMiss), SecurityAllowlist, Deny, ErrTimeout},
		{eval("rm x", AskOnMiss), SecurityFull, Allow, "no answer in time; fallback full"},
		{eval("ls", AskAlways), SecurityAllowlist, Allow, "no answer in time; fallback allowlist"},
		{eval("ls", AskAlways), SecurityDeny, Deny, ErrTimeout},
		{eval("ls > x", AskAlways), SecurityFull, Deny, ErrTimeout},
	} {
		got := Fallback(tc.res, tc.fallback)
		if got.Decision != tc.want || got.Reason != tc.reason {
			t.Errorf("Fallback(%v, %v) = %v %q, want %v %q", tc.res.Segments, tc.fallback, got.Decision, got.Reason, tc.want, tc.reason)
		}
	}
}

func TestMapResolver(t *testing.T) {
	t.Parallel()
	e, _ := testEngine()
	r := MapResolver{Paths: map[string]string{"ls": "/usr/bin/ls", "/w/sub/tool": "/w/sub/tool", "rg": "/opt/homebrew/bin/rg"}}
	res := e.Evaluate(Request{Command: "ls && rg x && cd sub && ./tool && ../sub/tool && ./missing", Cwd: "/w", Settings: Settings{Security: SecurityAllowlist, Ask: AskOnMiss}, Resolver: r})
	if got := res.ResolvedPaths(); !slices.Equal(got, []string{"/usr/bin/ls", "/opt/homebrew/bin/rg", "/w/sub/tool"}) {
		t.Fatalf("resolved %q", got)
	}
	if last := res.Segments[len(res.Segments)-1]; last.ResolvedPath != "" || last.Decision != AskHuman {
		t.Fatalf("a binary the caller never saw resolved: %+v", last)
	}
	if res.Decision != AskHuman {
		t.Fatalf("decision %v", res.Decision)
	}
}

// A symlink is judged by what it points to: an allowlisted name that is
// really a shell or a wrapper does not run an unjudged command (THREATS A5,
// A7).
func TestSymlinkedShellsAndWrappers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"x": "/bin/sh", "e": "/usr/bin/env", "t": "/usr/bin/timeout"} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	e := New(Config{Allowlist: []Entry{{ID: "bin", Pattern: bin + "/*"}, {ID: "ls", Pattern: "/usr/bin/ls"}}})
	r := PathResolver{Path: []string{bin, "/usr/bin", "/bin"}}
	for _, tc := range []struct {
		cmd  string
		want Decision
	}{
		{"x -c 'rm -rf /'", AskHuman},
		{"x -c ls", Allow},
		{"x script.sh", AskHuman},
		{"e rm -rf /", AskHuman},
		{"e ls", Allow},
		{"t 5 rm x", AskHuman},
	} {
		res := e.Evaluate(Request{Command: tc.cmd, Cwd: dir, Resolver: r, Settings: Settings{Security: SecurityAllowlist, Ask: AskOnMiss}})
		if res.Decision != tc.want {
			t.Errorf("%q = %v (%s), want %v", tc.cmd, res.Decision, res.Reason, tc.want)
		}
		if rec := res.Recordable(); len(rec) > 0 && filepath.Dir(rec[0]) == bin {
			t.Errorf("%q records the link %s", tc.cmd, rec[0])
		}
	}
}

func TestAutoAllowSkills(t *testing.T) {
	t.Parallel()
	fs := testFS()
	fs["/opt/conch/tools/get-users"] = 0o755
	fs["/home/u/work/get-users"] = 0o755
	r := PathResolver{Path: []string{"/opt/conch/tools", "/usr/bin"}, Stat: fs.stat}
	for _, tc := range []struct {
		auto bool
		cmd  string
		want Decision
	}{
		{true, "get-users --filter active --format csv | grep 'John Doe'", Allow},
		{false, "get-users --filter active", AskHuman},
		{true, "./get-users", AskHuman},
		{true, "get-users $(id)", Deny},
	} {
		e := New(Config{AutoAllowSkills: tc.auto, SkillDirs: []string{"/opt/conch/tools"}})
		res := e.Evaluate(Request{Command: tc.cmd, Cwd: "/home/u/work", Resolver: r, Settings: Settings{Security: SecurityAllowlist, Ask: AskOnMiss}})
		if res.Decision != tc.want {
			t.Errorf("auto=%v %q = %v (%s), want %v", tc.auto, tc.cmd, res.Decision, res.Reason, tc.want)
		}
	}
}
