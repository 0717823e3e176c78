package policy

import (
	"strings"
	"testing"
)

// Deny rules win over every mode and every allowlist entry, through
// wrappers and nested shells; with them, security full runs only what the
// policy can judge, as its plan.
func TestDenyRules(t *testing.T) {
	t.Parallel()
	r := PathResolver{Path: []string{"/usr/bin", "/bin"}, Stat: testFS().stat}
	rules := []Entry{
		{ID: "no-rm-root", Pattern: "/usr/bin/rm", ArgPattern: "*-*r* /"},
		{ID: "no-curl", Pattern: "/usr/bin/curl"},
		{ID: "git-push", Pattern: "/usr/bin/git", ArgPattern: "push*"},
	}
	engine := New(Config{Deny: rules, Allowlist: []Entry{
		{ID: "rm", Pattern: "/usr/bin/rm"}, {ID: "curl", Pattern: "/usr/bin/curl"}, {ID: "git", Pattern: "/usr/bin/git"}, {ID: "env", Pattern: "/usr/bin/env"},
	}, Home: "/home/u"})
	full := Settings{Security: SecurityFull, Ask: AskOff, AskFallback: SecurityDeny}
	allowlist := Settings{Security: SecurityAllowlist, Ask: AskOnMiss, AskFallback: SecurityDeny}
	denied := func(id string) string { return ErrNotAllowed + " (deny rule " + id + ")" }
	tests := []struct {
		name     string
		cmd      string
		settings Settings
		want     Decision
		reason   string
	}{
		{"an allowlisted program with denied arguments", "rm -rf /", allowlist, Deny, denied("no-rm-root")},
		{"the same program with other arguments", "rm -rf ./build", allowlist, Allow, "allowlist"},
		{"denied whatever its arguments", "curl https://example.org", allowlist, Deny, denied("no-curl")},
		{"full mode", "curl https://example.org", full, Deny, denied("no-curl")},
		{"full mode, an argument pattern", "git push origin main", full, Deny, denied("git-push")},
		{"full mode, arguments not matched", "git pull", full, Allow, "no deny rule matches"},
		{"through a wrapper", "env curl x", full, Deny, denied("no-curl")},
		{"in a nested shell", "sh -c 'curl x'", full, Deny, denied("no-curl")},
		{"after another command", "ls && rm -fr /", full, Deny, denied("no-rm-root")},
		{"by absolute path", "/usr/bin/curl x", full, Deny, denied("no-curl")},
		{"full mode, what cannot be judged is refused", "$(echo curl) x", full, Deny, ErrUnsupportedToken + "$("},
		// Full mode writes files and prints: redirections and the echo
		// and printf builtins run no program, and run in the plan.
		{"full mode, echo and printf", "echo hi && printf '%s\\n' x", full, Allow, "no deny rule matches"},
		{"full mode, redirections", "ls > out 2>&1 < in", full, Allow, "no deny rule matches"},
		{"full mode, output of echo", "echo x >> log", full, Allow, "no deny rule matches"},
		{"full mode, a denied program with a redirection", "rm -rf / > log", full, Deny, denied("no-rm-root")},
		{"full mode, printf -v sets a variable", "printf -v X '%s' y", full, Deny, ErrUnsupportedToken + "printf -v"},
		{"full mode, echo of a variable", "echo $HOME", full, Deny, ErrUnsupportedToken + "$HOME"},
		{"full mode, bash's &>", "ls &> out", full, Deny, ErrUnsupportedToken + "&>"},
		{"full mode, a glob as a target", "ls > *.txt", full, Deny, ErrUnsupportedToken + ">"},
		{"full mode, a two-digit descriptor", "ls 10> out", full, Deny, ErrUnsupportedToken + "10>"},
		{"full mode, >& onto a file", "ls >&out", full, Deny, ErrUnsupportedToken + ">&"},
		{"full mode, a redirection alone", "> out", full, Deny, ErrUnsupportedToken + ">"},
		{"allowlist mode refuses echo", "echo hi", allowlist, Deny, ErrUnsupportedToken + "echo"},
		{"allowlist mode refuses redirections", "git status > out", allowlist, Deny, ErrUnsupportedToken + ">"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := engine.Evaluate(Request{Command: tc.cmd, Cwd: "/home/u", Settings: tc.settings, Resolver: r})
			if res.Decision != tc.want || !strings.Contains(res.Reason, tc.reason) {
				t.Fatalf("%q = %v %q, want %v %q", tc.cmd, res.Decision, res.Reason, tc.want, tc.reason)
			}
			if tc.want == Allow && tc.settings.Security == SecurityFull && res.Plan == "" {
				t.Fatalf("full mode with deny rules allowed %q without a plan to run", tc.cmd)
			}
		})
	}
	// Ask always still asks, with the plan; a deny is never asked.
	always := Settings{Security: SecurityFull, Ask: AskAlways, AskFallback: SecurityFull}
	if res := engine.Evaluate(Request{Command: "git pull", Cwd: "/", Settings: always, Resolver: r}); res.Decision != AskHuman || res.Plan == "" {
		t.Fatalf("ask always: %+v", res)
	}
	res := engine.Evaluate(Request{Command: "curl x", Cwd: "/", Settings: always, Resolver: r})
	if res.Decision != Deny || Fallback(res, SecurityFull).Decision != Deny {
		t.Fatalf("a denied command was asked, or allowed on no answer: %+v", res)
	}
	// Without deny rules, full mode is as before: no plan, anything runs.
	if res := New(Config{}).Evaluate(Request{Command: "ls > out", Cwd: "/", Settings: full, Resolver: r}); res.Decision != Allow || res.Plan != "" {
		t.Fatalf("full mode without deny rules: %+v", res)
	}
}

// With deny rules, security full runs the plan: redirections, echo and
// printf are in it in their order, programs by path, targets quoted.
func TestDenyRulesPlanRedirections(t *testing.T) {
	t.Parallel()
	r := PathResolver{Path: []string{"/usr/bin", "/bin"}, Stat: testFS().stat}
	engine := New(Config{Deny: []Entry{{ID: "no-curl", Pattern: "/usr/bin/curl"}}})
	full := Settings{Security: SecurityFull, Ask: AskOff, AskFallback: SecurityDeny}
	for _, tc := range []struct{ cmd, plan string }{
		{"echo hi && printf '%s\\n' x", "'echo' 'hi' && 'printf' '%s\\n' 'x'\n"},
		{"ls > 'my out' 2>&1 < in", "'/usr/bin/ls' > 'my out' 2>&1 < 'in'\n"},
		{"ls 2>&1 >out", "'/usr/bin/ls' 2>&1 > 'out'\n"},
		{"echo x >> log 3<> f >&- >| g", "'echo' 'x' >> 'log' 3<> 'f' >&- >| 'g'\n"},
		{"cat <<'E' > out | wc -l\nx\nE", "'/usr/bin/cat' <<'CONCH_EOF' > 'out' | HOME='/dev/null' '/usr/bin/wc' '-l'\nx\nCONCH_EOF\n"},
	} {
		res := engine.Evaluate(Request{Command: tc.cmd, Cwd: "/", Settings: full, Resolver: r})
		if res.Decision != Allow || res.Plan != tc.plan {
			t.Errorf("%q = %v %q, plan\n%q, want allow with\n%q", tc.cmd, res.Decision, res.Reason, res.Plan, tc.plan)
		}
	}
}

// An allowlist entry's argPattern narrows it: the program runs only with
// arguments that match.
func TestAllowlistArgPattern(t *testing.T) {
	t.Parallel()
	r := PathResolver{Path: []string{"/usr/bin"}, Stat: testFS().stat}
	e := New(Config{Allowlist: []Entry{{ID: "git-read", Pattern: "/usr/bin/git", ArgPattern: "status*"}}})
	s := Settings{Security: SecurityAllowlist, Ask: AskOnMiss, AskFallback: SecurityDeny}
	for cmd, want := range map[string]Decision{"git status": Allow, "git status --short": Allow, "git push": AskHuman, "git": AskHuman} {
		if res := e.Evaluate(Request{Command: cmd, Cwd: "/", Settings: s, Resolver: r}); res.Decision != want {
			t.Errorf("%q = %v (%s), want %v", cmd, res.Decision, res.Reason, want)
		}
	}
}

func TestArgPatterns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		pattern, args string
		want          bool
	}{
		{"push*", "push origin main", true},
		{"push*", "pull", false},
		{"*-rf /", "-rf /", true},
		{"*-rf /", "-rf /tmp", false},
		{"-[rR]f *", "-Rf x", true},
		{"-[!r]f *", "-rf x", false},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{`a\*`, "a*", true},
		{`a\*`, "ab", false},
		{"x.y", "xzy", false},
		{"(a|b)", "(a|b)", true},
		{"ünï*", "ünïcode", true},
		{"", "", true},
		{"", "x", false},
	}
	for _, tc := range tests {
		re, err := compileArgPattern(tc.pattern)
		if err != nil {
			t.Fatalf("%q: %v", tc.pattern, err)
		}
		if got := re.MatchString(tc.args); got != tc.want {
			t.Errorf("%q on %q = %v, want %v", tc.pattern, tc.args, got, tc.want)
		}
	}
	for _, bad := range []string{`a\`, "[ab", "a\x00"} {
		if ValidateArgPattern(bad) == nil {
			t.Errorf("%q was taken", bad)
		}
	}
}
