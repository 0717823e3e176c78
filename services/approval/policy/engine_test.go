package policy

import (
	"strings"
	"testing"
)

const tok = ErrUnsupportedToken

func testEngine() (*Engine, Resolver) {
	e := New(Config{
		Allowlist: []Entry{
			{ID: "rg", Pattern: "/opt/homebrew/bin/rg"},
			{ID: "home-bin", Pattern: "~/bin/*"},
			{ID: "projects", Pattern: "~/Projects/**/bin/*"},
			{ID: "ls", Pattern: "/USR/BIN/LS"},
			{ID: "git", Pattern: "/usr/bin/git"},
			{ID: "find", Pattern: "/usr/bin/find"},
			{ID: "tar", Pattern: "/usr/bin/tar"},
			{ID: "cat", Pattern: "/usr/bin/cat"},
			{ID: "python", Pattern: "/usr/bin/python3"},
			{ID: "rsync", Pattern: "/usr/bin/rsync"},
			{ID: "curl", Pattern: "/usr/bin/curl"},
			{ID: "echo", Pattern: "/usr/bin/echo"},
			{ID: "srv", Pattern: "/srv/tools/"},
			{ID: "bad", Pattern: "rm"},
		},
		Home: "/home/u",
	})
	r := PathResolver{Path: []string{"/usr/bin", "/bin", "/opt/homebrew/bin", "/usr/local/bin"}, Stat: testFS().stat}
	return e, r
}

var (
	allow = Allow
	ask   = AskHuman
	deny  = Deny
)

// policyCases cover every class of THREATS.md part A. reason is the exact
// reason for a deny, and a substring of it otherwise.
var policyCases = []struct {
	class   string
	cmd     string
	want    Decision
	reason  string
	resolve []string
}{
	// Plain allowlist matches on the resolved path.
	{"allow", "rg -n TODO", allow, "allowlist", []string{"/opt/homebrew/bin/rg"}},
	{"allow", "/opt/homebrew/bin/rg TODO", allow, "allowlist", nil},
	{"allow", "ls -la", allow, "allowlist", []string{"/usr/bin/ls"}},
	{"allow", "LS -la", ask, "not found", nil},
	{"allow", "mytool --flag", ask, "mytool: not found", nil},
	{"allow", "~/bin/mytool", deny, tok + "~", nil},
	{"allow", "/home/u/bin/mytool", allow, "allowlist", nil},
	{"allow", "/home/u/Projects/a/bin/rg x", allow, "allowlist", nil},
	{"allow", "/srv/tools/deploy", allow, "allowlist", nil},
	{"allow", "git status", allow, "allowlist", nil},
	{"allow", "ls 'a b' \"c d\"", allow, "allowlist", nil},
	{"allow", "ls *.go", allow, "allowlist", nil},
	{"allow", `ls "$HOME"`, allow, "allowlist", nil},
	{"allow", "ls ~/x", allow, "allowlist", nil},
	{"allow", "ls # a comment; rm -rf /", allow, "allowlist", nil},
	{"allow", "rm -rf /", ask, "not in the allowlist", nil},
	{"allow", "chmod +x run.sh", ask, "not in the allowlist", nil},
	{"allow", "nosuchprogram", ask, "not found", nil},
	{"allow", "true", allow, "allowlist", nil},
	{"allow", ":", allow, "allowlist", nil},
	{"allow", "pwd", allow, "allowlist", nil},
	{"allow", "! ls", allow, "allowlist", nil},

	// 1. Safe bins.
	{"safebin", "grep -n foo", allow, "allowlist", []string{"/usr/bin/grep"}},
	{"safebin", "grep -inw foo", allow, "allowlist", nil},
	{"safebin", "grep -e foo -e bar", allow, "allowlist", nil},
	{"safebin", "grep -A3 foo", allow, "allowlist", nil},
	{"safebin", "grep --max-count=3 foo", allow, "allowlist", nil},
	{"safebin", "grep --color=auto foo", allow, "allowlist", nil},
	{"safebin", "jq -r .name", allow, "allowlist", nil},
	{"safebin", "jq --arg x 1 '.a + $x'", allow, "allowlist", nil},
	{"safebin", "cut -d, -f1,2", allow, "allowlist", nil},
	{"safebin", "sort -nr -k2", allow, "allowlist", nil},
	{"safebin", "uniq -c", allow, "allowlist", nil},
	{"safebin", "head -5", allow, "allowlist", nil},
	{"safebin", "head -n 5", allow, "allowlist", nil},
	{"safebin", "tail -n5", allow, "allowlist", nil},
	{"safebin", "tr a-z A-Z", allow, "allowlist", nil},
	{"safebin", "tr -d '\\r'", allow, "allowlist", nil},
	{"safebin", "wc -l", allow, "allowlist", nil},
	{"safebin", "sort -o out.txt", ask, "sort: -o writes a file", nil},
	{"safebin", "sort -no out.txt", ask, "sort: -o writes a file", nil},
	{"safebin", "sort --output=out.txt", ask, "writes a file", nil},
	{"safebin", "sort --compress-program=sh", ask, "runs a program", nil},
	{"safebin", "sort --compress-prog=sh", ask, "unknown or abbreviated flag --compress-prog", nil},
	{"safebin", "sort --out=x", ask, "unknown or abbreviated", nil},
	{"safebin", "sort -T /tmp", ask, "temporary files", nil},
	{"safebin", "sort --files0-from=list", ask, "reads a file", nil},
	{"safebin", "grep -f patterns.txt", ask, "reads patterns from a file", nil},
	{"safebin", "grep -if patterns.txt", ask, "reads patterns from a file", nil},
	{"safebin", "grep -r foo", ask, "reads files", nil},
	{"safebin", "grep -Rn foo .", ask, "reads files", nil},
	{"safebin", "grep --recursive foo", ask, "reads files", nil},
	{"safebin", "grep --rec foo", ask, "unknown or abbreviated", nil},
	{"safebin", "grep foo /etc/passwd", ask, "looks like a file argument", nil},
	{"safebin", "grep -e foo /etc/shadow", ask, "looks like a file argument", nil},
	{"safebin", "grep -- foo -r", ask, "looks like a file argument", nil},
	{"safebin", "grep --include=*.go foo", deny, tok + "*", nil},
	{"safebin", "grep --include=x.go foo", ask, "selects files", nil},
	{"safebin", "head -n 5 /etc/passwd", ask, "looks like a file argument", nil},
	{"safebin", "tail -f log", ask, "follows files", nil},
	{"safebin", "cut -f1 data.csv", ask, "looks like a file argument", nil},
	{"safebin", "wc -l notes.txt", ask, "looks like a file argument", nil},
	{"safebin", "wc --files0-from=-", ask, "reads a file", nil},
	{"safebin", "tr a b c", ask, "looks like a file argument", nil},
	{"safebin", "uniq in out", ask, "looks like a file argument", nil},
	{"safebin", "jq . data.json", ask, "looks like a file argument", nil},
	{"safebin", "jq -n env", ask, "reads the environment", nil},
	{"safebin", "jq -n '$ENV.HOME'", ask, "reads the environment", nil},
	{"safebin", "jq -n 'env.AWS_SECRET'", ask, "reads the environment", nil},
	{"safebin", "jq --rawfile x /etc/passwd .", ask, "reads a file", nil},
	{"safebin", "jq --slurpfile x /etc/passwd .", ask, "reads a file", nil},
	{"safebin", "jq -f prog.jq", ask, "from a file", nil},
	{"safebin", "jq -L /tmp 'import \"x\" as x; .'", ask, "modules", nil},
	{"safebin", "jq 'include \"x\"; .'", ask, "include", nil},
	{"safebin", "jq 'input_filename'", ask, "input_filename", nil},
	{"safebin", "grep -X foo", ask, "unknown flag -X", nil},
	{"safebin", "grep \"$PAT\"", deny, tok + "$PAT", nil},
	{"safebin", "grep foo*", deny, tok + "*", nil},
	{"safebin", "grep {a,b}", deny, tok + "{", nil},
	{"safebin", "grep ~", deny, tok + "~", nil},
	{"safebin", "/usr/local/bin/jq .", ask, "not in the allowlist", nil},
	{"safebin", "/usr/bin/jq .", allow, "allowlist", nil},

	// 2. Expansion after the check.
	{"expansion", "$CMD", deny, tok + "$CMD", nil},
	{"expansion", "${CMD}", deny, tok + "${", nil},
	{"expansion", `"$CMD" -la`, deny, tok + "$CMD", nil},
	{"expansion", "ls $HOME", deny, tok + "$HOME", nil},
	{"expansion", "ls $IFS/etc", deny, tok + "$IFS", nil},
	{"expansion", "l${IFS}s", deny, tok + "${", nil},
	{"expansion", "/usr/bin/l?", deny, tok + "?", nil},
	{"expansion", "/usr/bin/l*", deny, tok + "*", nil},
	{"expansion", "/usr/bin/[l]s", deny, tok + "[", nil},
	{"expansion", "~/bin/mytool", deny, tok + "~", nil},
	{"expansion", "{ls,-la}", deny, tok + "{", nil},
	{"expansion", "ls ${x:-$(id)}", deny, tok + "${", nil},
	{"expansion", "ls \"${x:-y}\"", deny, tok + "${", nil},
	{"expansion", "ls $((1+1))", deny, tok + "$((", nil},
	{"expansion", "ls @(a|b)", deny, tok + "@(", nil},

	// 3. Chains, pipes and substitutions hidden in quoting.
	{"hidden", "ls $(rm -rf /)", deny, tok + "$(", nil},
	{"hidden", "ls `rm -rf /`", deny, tok + "`", nil},
	{"hidden", `ls "$(id)"`, deny, tok + "$(", nil},
	{"hidden", "ls \"`id`\"", deny, tok + "`", nil},
	{"hidden", "ls 'a;rm -rf /'", allow, "allowlist", nil},
	{"hidden", `ls "a && rm -rf /"`, allow, "allowlist", nil},
	{"hidden", "ls $'\\x3b rm'", deny, tok + "$'", nil},
	{"hidden", `ls $"x"`, deny, tok + `$"`, nil},
	{"hidden", "cat <(id)", deny, tok + "<(", nil},
	{"hidden", "ls >(id)", deny, tok + ">(", nil},
	{"hidden", "cat <<EOF\n$(id)\nEOF", deny, tok + "<<", nil},
	{"hidden", "cat <<'EOF'\n$(id)\nEOF", allow, "allowlist", nil},
	{"hidden", "cat <<\"EOF\"\nx\nEOF", allow, "allowlist", nil},
	{"hidden", "cat <<< 'x'", deny, tok + "<<<", nil},
	{"hidden", "ls > out", deny, tok + ">", nil},
	{"hidden", "ls >> out", deny, tok + ">>", nil},
	{"hidden", "ls 2> err", deny, tok + "2>", nil},
	{"hidden", "cat < /etc/shadow", deny, tok + "<", nil},
	{"hidden", "ls &> out", deny, tok + "&>", nil},
	{"hidden", "ls >&2", deny, tok + ">&", nil},
	{"hidden", "ls &", deny, tok + "&", nil},
	{"hidden", "(ls)", deny, tok + "(", nil},
	{"hidden", "{ ls; }", deny, tok + "{", nil},
	{"hidden", "((x=1))", deny, tok + "((", nil},
	{"hidden", "[[ -f x ]]", deny, tok + "[[", nil},
	{"hidden", "if true; then rm -rf /; fi", deny, tok + "if", nil},
	{"hidden", "for f in a; do rm $f; done", deny, tok + "for", nil},
	{"hidden", "while true; do ls; done", deny, tok + "while", nil},
	{"hidden", "case x in x) ls;; esac", deny, tok + "case", nil},
	{"hidden", "ls |& grep x", deny, tok + "|&", nil},
	{"hidden", "coproc ls", deny, tok + "coproc", nil},
	{"hidden", "time ls", deny, tok + "time", nil},
	{"hidden", "let x=1", deny, tok + "let", nil},

	// Chains and pipelines: every segment must pass.
	{"chain", "ls && git status", allow, "allowlist", nil},
	{"chain", "ls || git status", allow, "allowlist", nil},
	{"chain", "ls; git status", allow, "allowlist", nil},
	{"chain", "ls && rm -rf /", ask, "rm", nil},
	{"chain", "ls || rm -rf /", ask, "rm", nil},
	{"chain", "ls | grep foo | wc -l", allow, "allowlist", nil},
	{"chain", "cat notes.txt | sort | uniq -c", allow, "allowlist", nil},
	{"chain", "ls | sh", ask, "script or stdin", nil},
	{"chain", "ls | rm", ask, "rm", nil},
	{"chain", "git log | grep -f /etc/passwd", ask, "reads patterns", nil},

	// 4. Splitting tricks.
	{"split", "ls\nrm -rf /", ask, "rm", nil},
	{"split", "ls\rrm -rf /", deny, tok + `\r`, nil},
	{"split", "ls\x00rm", deny, tok + `\x00`, nil},
	{"split", "ls \\\n-la", allow, "allowlist", nil},
	{"split", "l\\\ns", deny, tok + "backslash-newline in a word", nil},
	{"split", "ls #\\\nrm -rf /", deny, tok + "backslash-newline in a comment", nil},
	{"split", "ls\x1b[2K", deny, tok + `\x1b`, nil},
	{"split", "ls \x7f", deny, tok + `\x7f`, nil},
	{"split", "ls #\nrm -rf /", ask, "rm", nil},
	{"split", strings.Repeat("ls && ", 300) + "ls", deny, ErrNotAllowed + ": more than 256 commands", nil},
	{"split", strings.Repeat("a", MaxCommandBytes+1), deny, ErrNotAllowed + ": command longer than 1048576 bytes", nil},
	{"split", "ls 'unterminated", deny, "1:4: reached EOF without closing quote `'`", nil},
	{"split", "ls &&", deny, "1:4: `&&` must be followed by a statement", nil},
	{"split", "", deny, ErrNotAllowed + ": empty command", nil},

	// 5. Wrappers.
	{"wrapper", "env ls", allow, "allowlist", []string{"/usr/bin/env", "/usr/bin/ls"}},
	{"wrapper", "env rm -rf /", ask, "rm", nil},
	{"wrapper", "env LD_PRELOAD=/tmp/x.so ls", ask, "env sets LD_PRELOAD=", nil},
	{"wrapper", "env -i ls", ask, "env -i is not judged", nil},
	{"wrapper", "env -S 'rm -rf /'", ask, "not judged", nil},
	{"wrapper", "env", ask, "not in the allowlist", nil},
	{"wrapper", "nice -n 10 ls", allow, "allowlist", nil},
	{"wrapper", "nice -n10 rm x", ask, "rm", nil},
	{"wrapper", "nohup ls", allow, "allowlist", nil},
	{"wrapper", "nohup rm x", ask, "rm", nil},
	{"wrapper", "timeout 5 ls", allow, "allowlist", nil},
	{"wrapper", "timeout -s KILL 5 rm x", ask, "rm", nil},
	{"wrapper", "timeout 5", ask, "timeout needs", nil},
	{"wrapper", "stdbuf -oL grep foo", allow, "allowlist", nil},
	{"wrapper", "stdbuf -oL rm x", ask, "rm", nil},
	{"wrapper", "xargs ls", deny, "Command not allowed by exec policy (xargs builds commands from what it reads at run time, which the policy cannot judge)", nil},
	{"wrapper", "xargs rm", deny, "Command not allowed by exec policy (xargs builds commands from what it reads at run time, which the policy cannot judge)", nil},
	{"wrapper", "ls | xargs grep foo", deny, "Command not allowed by exec policy (xargs builds commands from what it reads at run time, which the policy cannot judge)", nil},
	{"wrapper", "xargs -I{} rm {}", deny, "Command not allowed by exec policy (xargs builds commands from what it reads at run time, which the policy cannot judge)", nil},
	{"wrapper", "ls {a,b}", allow, "allowlist", nil},
	{"wrapper", "grep {a,b}x", deny, tok + "{", nil},
	{"wrapper", "xargs -I X rm X", deny, "Command not allowed by exec policy (xargs builds commands from what it reads at run time, which the policy cannot judge)", nil},
	{"wrapper", "xargs", deny, "Command not allowed by exec policy (xargs builds commands from what it reads at run time, which the policy cannot judge)", nil},
	{"wrapper", "command ls", allow, "allowlist", nil},
	{"wrapper", "command rm x", ask, "rm", nil},
	{"wrapper", "command -p rm", deny, tok + "command -p", nil},
	{"wrapper", "exec ls", allow, "allowlist", nil},
	{"wrapper", "exec rm x", ask, "rm", nil},
	{"wrapper", "sh -c 'ls && git status'", allow, "allowlist", nil},
	{"wrapper", "bash -c 'rm -rf /'", ask, "rm", nil},
	{"wrapper", "sh -c 'ls > /etc/passwd'", deny, tok + ">", nil},
	{"wrapper", "sh -c \"$X\"", deny, tok + "$X", nil},
	{"wrapper", "sh -c 'sh -c \"sh -c ls\"'", allow, "allowlist", nil},
	{"wrapper", "sh -c 'sh -c \"sh -c \\\"sh -c \\\\\\\"sh -c ls\\\\\\\"\\\"\"'", deny, ErrNotAllowed + ": shells nested too deep", nil},
	{"wrapper", "sh script.sh", ask, "script or stdin", nil},
	{"wrapper", "bash -l -c ls", ask, "bash -l is not judged", nil},
	{"wrapper", "bash -i", ask, "bash -i", nil},
	{"wrapper", "python3 -c 'import os; os.system(\"id\")'", ask, "runs inline code", nil},
	{"wrapper", "python3 -Ic 'x'", ask, "runs inline code", nil},
	{"wrapper", "python3 tool.py", allow, "allowlist", nil},
	{"wrapper", "perl -e 'exec \"sh\"'", ask, "perl -e runs inline code", nil},
	{"wrapper", "node -e 'x'", ask, "inline code", nil},
	{"wrapper", "node --eval=x", ask, "inline code", nil},
	{"wrapper", "php -r 'system(1);'", ask, "inline code", nil},
	{"wrapper", "ruby -e 'x'", ask, "inline code", nil},
	{"wrapper", "awk 'BEGIN{system(\"id\")}'", ask, "not in the allowlist", nil},
	{"wrapper", "busybox sh -c id", ask, "busybox runs programs", nil},
	{"wrapper", "sudo ls", ask, "sudo runs programs", nil},
	{"wrapper", "setsid ls", ask, "setsid runs programs", nil},
	{"wrapper", "find . -name '*.go'", allow, "allowlist", nil},
	{"wrapper", "find . -exec rm {} \\;", deny, "Command not allowed by exec policy (find -exec runs a command on names found at run time, which the policy cannot judge)", nil},
	{"wrapper", "find . -exec ls {} +", deny, "Command not allowed by exec policy (find -exec runs a command on names found at run time, which the policy cannot judge)", nil},
	{"wrapper", "find . -execdir sh -c id ';'", deny, "Command not allowed by exec policy (find -execdir runs a command on names found at run time, which the policy cannot judge)", nil},
	{"wrapper", "find . -exec grep foo {} \";\"", deny, "Command not allowed by exec policy (find -exec runs a command on names found at run time, which the policy cannot judge)", nil},
	{"wrapper", "find . -exec", deny, "Command not allowed by exec policy (find -exec runs a command on names found at run time, which the policy cannot judge)", nil},
	{"wrapper", "git -c core.pager=id log", ask, "git -c is not judged", nil},
	{"wrapper", "git --upload-pack=id fetch", ask, "git --upload-pack=id is not judged", nil},
	{"wrapper", "git --upload-p=id fetch", ask, "git --upload-p=id is not judged", nil},
	{"wrapper", "git config core.pager 'sh -c id'", ask, "git config is not a git command the policy judges", nil},
	{"wrapper", "git submodule foreach rm -rf .", ask, "git submodule is not a git command the policy judges", nil},
	{"wrapper", "git rebase --exec 'rm -rf /' main", ask, "git rebase --exec runs a program", nil},
	{"wrapper", "git rebase -x id main", ask, "git rebase -x runs a program", nil},
	{"wrapper", "git bisect run ./evil.sh", ask, "git bisect is not a git command the policy judges", nil},
	{"wrapper", "git log --oneline", allow, "allowlist", nil},
	{"wrapper", "tar --to-command=id -xf a.tar", ask, "runs another program", nil},
	{"wrapper", "tar -I id -xf a.tar", ask, "runs another program", nil},
	{"wrapper", "tar -xf a.tar", allow, "allowlist", nil},
	{"wrapper", "rsync -e 'sh -c id' a b", ask, "runs another program", nil},
	{"wrapper", "rsync -ave ssh a b", ask, "runs another program", nil},
	{"wrapper", "rsync -av a b", allow, "allowlist", nil},
	{"wrapper", "curl -K cfg", ask, "runs another program", nil},

	// 7. PATH and name hijack.
	{"hijack", "./wc -l", ask, "/home/u/work/wc is not in the allowlist", []string{"/home/u/work/wc"}},
	{"hijack", "wc -l", allow, "allowlist", []string{"/usr/bin/wc"}},
	{"hijack", "cd evil && ls", allow, "allowlist", []string{"/usr/bin/ls"}},
	{"hijack", "cd evil && ./ls", ask, "/home/u/work/evil/ls is not in the allowlist", nil},
	{"hijack", "cd evil; ./grep x", ask, "not", nil},
	{"hijack", "cd /home/u/bin && ./mytool", allow, "allowlist", []string{"/home/u/bin/mytool"}},
	{"hijack", "cd /home/u/bin || ./mytool", ask, "not found", nil},
	{"hijack", "cd /home/u/bin | ./mytool", ask, "not found", nil},
	{"hijack", "cd /nonexistent; ls", allow, "allowlist", nil},
	{"hijack", "cd $HOME", deny, tok + "$HOME", nil},
	{"hijack", "cd ~", deny, tok + "~", nil},
	{"hijack", "cd", allow, "allowlist", nil},
	{"hijack", "cd -", deny, tok + "cd -", nil},
	{"hijack", "PATH=/home/u/work/evil ls", deny, tok + "PATH=", nil},
	{"hijack", "PATH=.:$PATH", deny, tok + "PATH=", nil},
	{"hijack", "/home/u/work/evil/ls", ask, "not in the allowlist", nil},
	{"hijack", "evil/grep foo", ask, "not in the allowlist", nil},
	{"hijack", "../work/evil/grep foo", ask, "not in the allowlist", nil},
	{"hijack", "/opt/homebrew/bin/../../../home/u/work/wc", ask, "/home/u/work/wc is not in the allowlist", nil},
	{"hijack", "/usr/bin//ls", allow, "allowlist", nil},

	// 8. Builtins and definitions.
	{"builtin", "eval ls", deny, tok + "eval", nil},
	{"builtin", "source x.sh", deny, tok + "source", nil},
	{"builtin", ". x.sh", deny, tok + ".", nil},
	{"builtin", "ls() { rm -rf /; }; ls", deny, tok + "ls()", nil},
	{"builtin", "function ls { rm; }", deny, tok + "ls()", nil},
	{"builtin", "()0", deny, tok + "function", nil},
	{"builtin", "trap 'rm -rf /' EXIT", deny, tok + "trap", nil},
	{"builtin", "export LD_PRELOAD=/tmp/x", deny, tok + "export", nil},
	{"builtin", "alias ls=rm", deny, tok + "alias", nil},
	{"builtin", "set -x", deny, tok + "set", nil},
	{"builtin", "echo hi", deny, tok + "echo", nil},
	{"builtin", "printf x", deny, tok + "printf", nil},
	{"builtin", "builtin ls", deny, tok + "builtin", nil},
	{"builtin", "enable -n ls", deny, tok + "enable", nil},
	{"builtin", "hash -p /tmp/x ls", deny, tok + "hash", nil},
	{"builtin", "declare -x A=1", deny, tok + "declare", nil},
	{"builtin", "readonly A", deny, tok + "readonly", nil},
	{"builtin", "read x", deny, tok + "read", nil},
	{"builtin", "ulimit -c 0", deny, tok + "ulimit", nil},
	{"builtin", "kill -9 1", deny, tok + "kill", nil},
	{"builtin", "test -f x", deny, tok + "test", nil},

	// 9. Environment injection through prefixes.
	{"envinj", "LD_PRELOAD=/tmp/x.so ls", deny, tok + "LD_PRELOAD=", nil},
	{"envinj", "BASH_ENV=/tmp/x sh -c ls", deny, tok + "BASH_ENV=", nil},
	{"envinj", "PS4='$(id)' bash -x -c ls", deny, tok + "PS4=", nil},
	{"envinj", "A=1", deny, tok + "A=", nil},
	{"envinj", "PYTHONSTARTUP=x python3", deny, tok + "PYTHONSTARTUP=", nil},
}

func TestEvaluateAllowlistOnMiss(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	settings := Settings{Security: SecurityAllowlist, Ask: AskOnMiss, AskFallback: SecurityDeny}
	classes := map[string]int{}
	for _, tc := range policyCases {
		classes[tc.class]++
		t.Run(tc.class+"/"+tc.cmd, func(t *testing.T) {
			t.Parallel()
			res := e.Evaluate(Request{Command: tc.cmd, Cwd: "/home/u/work", Settings: settings, Resolver: r})
			if res.Decision != tc.want {
				t.Fatalf("decision = %v (%q), want %v; segments %+v", res.Decision, res.Reason, tc.want, res.Segments)
			}
			switch tc.want {
			case Deny:
				if res.Reason != tc.reason {
					t.Fatalf("reason = %q, want %q", res.Reason, tc.reason)
				}
			case AskHuman:
				if !strings.Contains(res.Reason, tc.reason) {
					t.Fatalf("reason = %q, want it to contain %q", res.Reason, tc.reason)
				}
			}
			if tc.resolve != nil {
				got := res.ResolvedPaths()
				if strings.Join(got, " ") != strings.Join(tc.resolve, " ") {
					t.Fatalf("resolved = %q, want %q", got, tc.resolve)
				}
			}
		})
	}
	if len(policyCases) < 150 {
		t.Fatalf("only %d cases", len(policyCases))
	}
}

// With ask off, nothing the allowlist misses runs and the refusal is the
// policy's string; with ask always, even allowed commands ask.
func TestEvaluateAskModes(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	for _, tc := range policyCases {
		off := e.Evaluate(Request{Command: tc.cmd, Cwd: "/home/u/work", Resolver: r,
			Settings: Settings{Security: SecurityAllowlist, Ask: AskOff}})
		always := e.Evaluate(Request{Command: tc.cmd, Cwd: "/home/u/work", Resolver: r,
			Settings: Settings{Security: SecurityAllowlist, Ask: AskAlways}})
		switch tc.want {
		case Allow:
			if off.Decision != Allow || always.Decision != AskHuman {
				t.Errorf("%q: off=%v always=%v, want allow and ask", tc.cmd, off.Decision, always.Decision)
			}
		case AskHuman:
			if off.Decision != Deny || off.Reason != ErrNotAllowed || always.Decision != AskHuman {
				t.Errorf("%q: off=%v %q always=%v, want deny %q and ask", tc.cmd, off.Decision, off.Reason, always.Decision, ErrNotAllowed)
			}
		case Deny:
			if off.Decision != Deny || always.Decision != Deny || off.Reason != tc.reason {
				t.Errorf("%q: off=%v always=%v, want deny in both", tc.cmd, off.Decision, always.Decision)
			}
		}
	}
}
