package hostexec

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/executor/sandbox"
)

type output struct {
	mu       sync.Mutex
	out, err strings.Builder
}

func (o *output) on(st sandbox.Stream, b []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if st == sandbox.Stderr {
		o.err.Write(b)
	} else {
		o.out.Write(b)
	}
}

func run(t *testing.T, r *Runner, opts sandbox.Options) (string, string, sandbox.Exit) {
	t.Helper()
	var o output
	opts.OnOutput = o.on
	if opts.Budget == 0 {
		opts.Budget = -1
	}
	p, err := r.Start(opts)
	if err != nil {
		t.Fatalf("Start(%q): %v", opts.Command, err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		_ = p.Kill()
		t.Fatalf("%q did not end", opts.Command)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.out.String(), o.err.String(), p.Exit()
}

func TestRun(t *testing.T) {
	t.Setenv("CONCH_TEST_SECRET", "hunter2")
	dir := t.TempDir()
	if err := os.Mkdir(dir+"/sub", 0o755); err != nil {
		t.Fatal(err)
	}
	r := &Runner{Dir: dir}
	tests := []struct {
		name     string
		opts     sandbox.Options
		out, err string
		code     int
		dropped  bool
	}{
		{name: "stdout", opts: sandbox.Options{Command: "echo hello"}, out: "hello\n"},
		{name: "stderr and exit code", opts: sandbox.Options{Command: "echo oops >&2; exit 3"}, err: "oops\n", code: 3},
		{name: "starts in the runner's dir", opts: sandbox.Options{Command: "pwd; echo $HOME"}, out: dir + "\n" + dir + "\n"},
		{name: "relative workdir", opts: sandbox.Options{Command: "pwd", Workdir: "sub"}, out: dir + "/sub\n"},
		{name: "absolute workdir", opts: sandbox.Options{Command: "pwd", Workdir: "/"}, out: "/\n"},
		{name: "host environment not inherited", opts: sandbox.Options{Command: `echo "[$CONCH_TEST_SECRET]" "$PATH"`}, out: "[] " + DefaultPath + "\n"},
		{name: "request environment", opts: sandbox.Options{Command: `echo "$GREETING"`, Env: map[string]string{"GREETING": "hi there"}}, out: "hi there\n"},
		{name: "path prepend", opts: sandbox.Options{Command: `echo "$PATH"`, PathPrepend: []string{"/opt/tools"}}, out: "/opt/tools:" + DefaultPath + "\n"},
		{name: "signal", opts: sandbox.Options{Command: "sh -c 'kill -TERM $$'"}, err: "Terminated\n", code: 128 + 15},
		{name: "budget", opts: sandbox.Options{Command: "head -c 100000 /dev/zero | tr '\\0' x", Budget: 10}, out: "xxxxxxxxxx", dropped: true},
		{name: "pipes and heredoc", opts: sandbox.Options{Command: "cat <<EOF | tr a-z A-Z\nabc\nEOF"}, out: "ABC\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, x := run(t, r, tt.opts)
			if out != tt.out || errOut != tt.err || x.Code != tt.code || x.Err != nil || x.StdoutDropped != tt.dropped {
				t.Errorf("got out %q err %q exit %+v, want out %q err %q code %d dropped %v", out, errOut, x, tt.out, tt.err, tt.code, tt.dropped)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	r := &Runner{Dir: t.TempDir()}
	if _, err := r.Start(sandbox.Options{Command: "true", Workdir: "/does/not/exist"}); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("missing workdir: %v", err)
	}
}

func TestPty(t *testing.T) {
	out, _, x := run(t, &Runner{Dir: t.TempDir()}, sandbox.Options{Command: "test -t 0 && test -t 1 && echo terminal", Pty: true})
	if x.Code != 0 || !strings.Contains(out, "terminal") {
		t.Fatalf("pty: %q %+v", out, x)
	}
}

func TestStdin(t *testing.T) {
	var o output
	p, err := (&Runner{Dir: t.TempDir()}).Start(sandbox.Options{Command: "tr a-z A-Z", Budget: -1, OnOutput: o.on})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write([]byte("shout\n"), true); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if o.out.String() != "SHOUT\n" {
		t.Fatalf("stdin: %q", o.out.String())
	}
}

// alive counts processes whose command line contains marker.
func alive(marker string) int {
	out, _ := exec.Command("pgrep", "-f", marker).Output()
	return len(strings.Fields(string(out)))
}

// sleeper returns a sleep command line no other process has.
func sleeper() string { return fmt.Sprintf("sleep 300.%09d", time.Now().UnixNano()%1e9) }

func waitGone(t *testing.T, marker string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for alive(marker) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d processes of %q outlived their command", alive(marker), marker)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestNothingOutlivesTheCommand checks that children left behind, whether
// backgrounded, nohup'd, in a new session or ignoring SIGTERM, end with the
// command, and that one holding the output open does not hang it.
func TestNothingOutlivesTheCommand(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the per-command pid namespace needs root; without it setsid escapes the process group")
	}
	r := &Runner{Dir: t.TempDir()}
	for _, form := range []string{
		"%s & echo started",
		"(trap '' TERM HUP; %s) & echo started",
		"setsid %s & echo started",
		"nohup %s >/dev/null 2>&1 & echo started",
	} {
		marker := sleeper()
		out, _, x := run(t, r, sandbox.Options{Command: fmt.Sprintf(form, marker)})
		if x.Code != 0 || out != "started\n" {
			t.Fatalf("%q: %q %+v", form, out, x)
		}
		waitGone(t, marker)
	}
}

func TestKillEndsTheTree(t *testing.T) {
	marker := sleeper()
	p, err := (&Runner{Dir: t.TempDir()}).Start(sandbox.Options{Command: marker + " & " + marker + " & wait", Budget: -1})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for alive(marker) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("children never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	if x := p.Exit(); x.Code != 128+9 {
		t.Errorf("exit after kill = %+v, want 137", x)
	}
	waitGone(t, marker)
}
