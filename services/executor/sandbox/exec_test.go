package sandbox

import (
	"strings"
	"testing"
	"time"
)

func TestShellFeatures(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	cases := []struct {
		name, cmd, stdout, stderr string
		code                      int
	}{
		{"pipe", "printf 'b\\na\\nc\\n' | sort | head -2", "a\nb\n", "", 0},
		{"redirects", "echo one > f.txt && echo two >> f.txt && cat < f.txt && echo oops >&2", "one\ntwo\n", "oops\n", 0},
		{"and chain stops", "false && echo no; true && echo yes", "yes\n", "", 0},
		{"or chain", "false || echo fallback", "fallback\n", "", 0},
		{"multi-line", "x=1\nif [ $x -eq 1 ]; then\n  echo one\nfi\nfor i in a b; do echo $i; done", "one\na\nb\n", "", 0},
		{"heredoc", "cat <<EOF\nhello $HOME\nEOF\ncat <<'EOF'\nraw $HOME\nEOF", "hello /home/workspace\nraw $HOME\n", "", 0},
		{"exit code", "exit 42", "", "", 42},
		{"signal exit code", "kill -9 $$", "", "Killed\n", 137},
		{"python3", "python3 -c 'import sys; print(sum(range(10))); sys.exit(3)'", "45\n", "", 3},
		{"command substitution", "echo $(echo inner | tr a-z A-Z)", "INNER\n", "", 0},
		{"workspace home", "cd && pwd && echo $HOME && touch x && ls", "/home/workspace\n/home/workspace\nf.txt\nx\n", "", 0},
		{"utf-8", "echo 'olá ☃'", "olá ☃\n", "", 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := sh(t, sb, c.cmd)
			if r.stdout != c.stdout || r.stderr != c.stderr || r.exit.Code != c.code {
				t.Fatalf("got stdout %q stderr %q code %d, want %q %q %d", r.stdout, r.stderr, r.exit.Code, c.stdout, c.stderr, c.code)
			}
			sh(t, sb, "cd /home/workspace")
		})
	}
}

func TestCwdPersistsBetweenCommands(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	steps := []struct{ cmd, want string }{
		{"cd /tmp", ""},
		{"pwd", "/tmp\n"},
		{"mkdir -p a/b && cd a/b", ""},
		{"pwd", "/tmp/a/b\n"},
		{"cd /nonexistent 2>/dev/null; pwd", "/tmp/a/b\n"},
		{"cd ~", ""},
		{"pwd", "/home/workspace\n"},
	}
	for _, s := range steps {
		if got := sh(t, sb, s.cmd).stdout; got != s.want {
			t.Fatalf("%q printed %q, want %q", s.cmd, got, s.want)
		}
	}
	if got := sb.Cwd(); got != "/home/workspace" {
		t.Fatalf("Cwd() = %q", got)
	}
	r, _ := run(t, sb, Options{Command: "pwd", Workdir: "/tmp"}, 10*time.Second)
	if r.stdout != "/tmp\n" {
		t.Fatalf("workdir /tmp printed %q", r.stdout)
	}
	r, _ = run(t, sb, Options{Command: "pwd", Workdir: "/nope"}, 10*time.Second)
	if r.exit.Code == 0 {
		t.Fatalf("missing workdir ran: %+v", r)
	}
}

func TestLargeCommandAndStdin(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	// A 1 MiB command is far beyond one argv string (128 KiB).
	body := strings.Repeat("x", 1<<20-64)
	r := sh(t, sb, "v='"+body+"'\necho ${#v}")
	if r.stdout != "1048512\n" {
		t.Fatalf("1 MiB command printed %q %q", r.stdout, r.stderr)
	}

	var out strings.Builder
	p, err := sb.Start(Options{Command: "tr a-z A-Z", Budget: -1, OnOutput: func(_ Stream, b []byte) { out.Write(b) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write([]byte("hello\n"), true); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("stdin EOF did not end the command")
	}
	if out.String() != "HELLO\n" {
		t.Fatalf("got %q", out.String())
	}
}

func TestPty(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	r, _ := run(t, sb, Options{Command: "tty; test -t 1 && echo terminal; echo err >&2", Pty: true}, 10*time.Second)
	if !strings.Contains(r.stdout, "/dev/pts/") || !strings.Contains(r.stdout, "terminal") || !strings.Contains(r.stdout, "err") {
		t.Fatalf("pty output %q %q", r.stdout, r.stderr)
	}
	r, _ = run(t, sb, Options{Command: "test -t 1 || echo pipe"}, 10*time.Second)
	if r.stdout != "pipe\n" {
		t.Fatalf("non-pty output %q", r.stdout)
	}
}

// A terminal starts at the size asked for, and takes a new one while its
// program runs.
func TestTerminalResize(t *testing.T) {
	sb := newSandbox(t, Spec{ID: "resize"})
	out := new(streams)
	p, err := sb.Start(Options{Command: "stty size; read x; stty size", Pty: true, Rows: 40, Cols: 100, Budget: -1, OnOutput: out.add})
	if err != nil {
		t.Fatal(err)
	}
	shown := func() string { got, _ := out.strings(); return got }
	seen := func(s string) bool { return strings.Contains(shown(), s) }
	for deadline := time.Now().Add(10 * time.Second); !seen("40 100"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("first size: %q", shown())
		}
	}
	if err := p.Resize(50, 120); err != nil {
		t.Fatal(err)
	}
	if err := p.Write([]byte("\n"), false); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not end")
	}
	if !seen("50 120") {
		t.Errorf("after the resize: %q", shown())
	}
}
