package policy

import (
	"testing"
)

// TestLineContinuations holds commands whose backslash-newlines the parser
// and dash or bash read differently, or could: each is refused with the
// construct named, in every mode, and never asked. The differential fuzzer
// (FuzzEngineVersusShell) runs such commands as written under both shells.
func TestLineContinuations(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	allowlist := Settings{Security: SecurityAllowlist, Ask: AskOnMiss, AskFallback: SecurityDeny}
	full := Settings{Security: SecurityFull, Ask: AskOff, AskFallback: SecurityFull}
	fullAsk := Settings{Security: SecurityFull, Ask: AskAlways, AskFallback: SecurityFull}
	const (
		comment   = tok + "backslash-newline in a comment"
		dollar    = tok + "backslash-newline after $"
		param     = tok + "backslash-newline in a parameter expansion"
		delimiter = tok + "backslash-newline in a here-document delimiter"
		inWord    = tok + "backslash-newline in a word"
		unblank   = tok + "backslash-newline not after a blank or an operator"
		operator  = tok + "backslash-newline inside an operator"
	)
	tests := []struct {
		name     string
		cmd      string
		settings Settings
		reason   string
	}{
		// The parser ends a comment at the backslash and reads the next
		// line as more words; the shells run it as a command.
		{"a comment", "ls #\\\nid", allowlist, comment},
		{"a comment with text", "ls # see below\\\nid", allowlist, comment},
		{"a comment after true", "true #\\\nid", allowlist, comment},
		{"a comment, then another continuation", "ls #\\\n\\\nid", allowlist, comment},
		{"a comment under security full", "ls #\\\nid", full, comment},
		{"a comment under ask always", "ls #\\\nid", fullAsk, comment},
		{"a comment in sh -c", "sh -c 'ls #\\\nid'", allowlist, comment},
		// The parser reads a literal $; the shells an expansion.
		{"$( in double quotes", "ls \"$\\\n(id)\"", allowlist, dollar},
		{"${ in double quotes", "ls \"$\\\n{HOME}\"", allowlist, dollar},
		{"${ unquoted", "ls $\\\n{HOME}", allowlist, dollar},
		{"$' (ANSI-C in bash)", "ls $\\\n'x'", allowlist, dollar},
		{"$\" (a locale string in bash)", "ls $\\\n\"x\"", allowlist, dollar},
		{"a lone $", "ls $\\\n", allowlist, dollar},
		{"$( under security full", "ls \"$\\\n(id)\"", full, dollar},
		{"$( in sh -c", "sh -c 'ls \"$\\\n(id)\"'", allowlist, dollar},
		{"a variable name", "ls \"$HO\\\nME\"", allowlist, param},
		// A here-document's delimiter: judged quoted by its backslash,
		// read unquoted (body expanded) once the shell removed it.
		{"a heredoc delimiter", "cat <<\\E\\\nOF\nx\nEOF", allowlist, delimiter},
		{"an unquoted heredoc delimiter", "cat <<E\\\nOF\n$(id)\nEOF", allowlist, delimiter},
		// A quoted <<- body: dash strips the tabs after the backslash-
		// newline and may find the delimiter there; the parser does not.
		{"a quoted <<- body", "cat <<-'E'\n0\\\n\tE", full, tok + "backslash-newline in a <<- here-document"},
		// Inside a word the text on both sides makes one token.
		{"a program name", "l\\\ns", allowlist, inWord},
		{"an argument", "ls -\\\n-all", allowlist, inWord},
		{"between quoted parts", "ls 'a'\\\nb", allowlist, inWord},
		{"after a quoted blank", "ls a\\ \\\nb", allowlist, inWord},
		// Between tokens only after a blank or an operator it cannot
		// continue: the parser reads "$(\⏎(" as $( (, a shell as $((.
		{"at the start", "\\\nls", allowlist, unblank},
		{"after a heredoc's delimiter", "cat <<'E'\\\n| wc\nx\nE", allowlist, unblank},
		{"$( then (", "cat $(\\\n(ls))", full, operator},
		{"( then (", "(\\\n(ls))", full, operator},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := e.Evaluate(Request{Command: tc.cmd, Cwd: "/home/u/work", Settings: tc.settings, Resolver: r})
			if res.Decision != Deny || res.Reason != tc.reason || res.Plan != "" {
				t.Fatalf("%q = %v %q (plan %q), want deny %q", tc.cmd, res.Decision, res.Reason, res.Plan, tc.reason)
			}
		})
	}
}

// TestLineContinuationsThatRun: a command continued after a blank or an
// operator, and backslash-newlines inside quotes, run as the shells read
// them.
func TestLineContinuationsThatRun(t *testing.T) {
	t.Parallel()
	e, r := testEngine()
	for _, tc := range []struct{ cmd, plan string }{
		{"ls \\\n  -l \\\n  | wc -l", "'/usr/bin/ls' '-l' | HOME='/dev/null' '/usr/bin/wc' '-l'\n"},
		{"ls -l \\\n&& ls \\\n\t-a", "'/usr/bin/ls' '-l' && '/usr/bin/ls' '-a'\n"},
		{"ls &&\\\nls |\\\nwc -l;\\\nls", "'/usr/bin/ls' && '/usr/bin/ls' | HOME='/dev/null' '/usr/bin/wc' '-l'\n'/usr/bin/ls'\n"},
		{"ls 'a\\\nb' \"c\\\nd\"", "'/usr/bin/ls' 'a\\\nb' 'cd'\n"},
		{"cat <<'EOF'\na \\\nb\nEOF", "'/usr/bin/cat' <<'CONCH_EOF'\na \\\nb\nCONCH_EOF\n"},
		{"sh -c 'ls \\\n -a'", "'/usr/bin/sh' '-c' ''\\''/usr/bin/ls'\\'' '\\''-a'\\''\n'\n"},
	} {
		res := judgeAllowlist(e, r, tc.cmd, nil)
		if res.Decision != Allow || res.Plan != tc.plan {
			t.Errorf("%q = %v %q, plan\n%q, want allow with\n%q", tc.cmd, res.Decision, res.Reason, res.Plan, tc.plan)
		}
	}
}
