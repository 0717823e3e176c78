package agent

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"

	"github.com/conch-sh/conch/services/executor/sandbox/wire"
	"golang.org/x/sys/unix"
)

// hostAgent is an agent's spawner on the host, stopped at the end of the
// test.
func hostAgent(t *testing.T) *agent {
	t.Helper()
	a := &agent{spawn: make(chan spawnReq)}
	go a.spawner()
	t.Cleanup(func() { close(a.spawn) })
	return a
}

// runInit runs the init of m through the agent's own newInit, on the host:
// started for its command, or as a spare given its script. It returns what
// the command printed, its exit code and the directory it reported.
func runInit(t *testing.T, a *agent, m wire.StartMsg, spare bool) (stdout, stderr string, code int, cwd string) {
	t.Helper()
	sp := initSpec{args: initArgs(m, false), env: m.Env}
	if spare {
		sp = initSpec{args: spareArgs, env: []string{}, spare: true}
	}
	in, err := a.newInit(sp)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in.cwdR)
	if spare {
		if err := in.send(spareScript(m)); err != nil {
			t.Fatal(err)
		}
	}
	_ = in.stdin.Close()
	var out [2][]byte
	var wg sync.WaitGroup
	for i, r := range in.readers {
		wg.Go(func() { out[i], _ = io.ReadAll(r) })
	}
	wg.Wait()
	err = in.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if m.TrackCwd {
		cwd = readCwd(in.cwdR)
	}
	return string(out[0]), string(out[1]), in.cmd.ProcessState.ExitCode(), cwd
}

// A spare, given its script through a pipe, runs a command exactly as an
// init started with it does: the same environment, arguments, directory,
// output and status, whatever the values hold.
func TestSpareRunsLikeAFreshInit(t *testing.T) {
	dir := t.TempDir()
	odd := dir + "/it's a \"dir\" $(x) `y`\n"
	if err := os.Mkdir(odd, 0o755); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/bin:/bin", "HOME=" + dir, "A='quoted'", `B="$(touch /nope) ` + "`x`" + ` \`, "C=line one\nline two", "D=", "E=a=b=c", "F=olá ☃", "G=\\'"}
	cases := []struct {
		name string
		m    wire.StartMsg
	}{
		{"environment", wire.StartMsg{Command: "env -0 | LC_ALL=C sort -z | tr '\\0' '|'", Dir: dir, Env: env}},
		{"arguments and variables", wire.StartMsg{Command: `echo "$0|$#|$*|${__conch_dir-unset}|${__conch_pid-unset}"; set | grep -c __conch_`, Dir: dir, Env: env}},
		{"quotes and newlines in the command", wire.StartMsg{Command: "printf '%s\\n' 'it'\\''s' \"two\nlines\"; echo \"$C\"", Dir: dir, Env: env}},
		{"exit status", wire.StartMsg{Command: "echo out; echo err >&2; exit 7", Dir: dir, Env: env}},
		{"signal", wire.StartMsg{Command: "kill -9 $$", Dir: dir, Env: env}},
		{"fds", wire.StartMsg{Command: "ls /proc/self/fd | LC_ALL=C sort", Dir: dir, Env: env}},
		{"directory with every quote", wire.StartMsg{Command: "pwd", Dir: odd, Env: env, TrackCwd: true}},
		{"cwd tracked", wire.StartMsg{Command: "cd /tmp && echo moved", Dir: dir, Env: env, TrackCwd: true}},
		{"fallback", wire.StartMsg{Command: "pwd", Dir: dir + "/gone", FallbackDir: dir, Env: env, TrackCwd: true}},
		{"no such directory", wire.StartMsg{Command: "pwd", Dir: dir + "/gone", Env: env}},
		{"stdin is empty", wire.StartMsg{Command: "cat; echo end", Dir: dir, Env: env}},
		{"return at the top", wire.StartMsg{Command: "echo a; return 3; echo b", Dir: dir, Env: env, TrackCwd: true}},
		{"process ids", wire.StartMsg{Command: `echo "$$ $PPID"; sh -c 'echo $PPID'`, Dir: dir, Env: env}},
		{"trap of its own", wire.StartMsg{Command: "trap 'echo bye' EXIT; cd /tmp", Dir: dir, Env: env, TrackCwd: true}},
	}
	a := hostAgent(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if !exportable(c.m.Env) {
				t.Fatal("the environment is not exportable")
			}
			o1, e1, c1, d1 := runInit(t, a, c.m, false)
			o2, e2, c2, d2 := runInit(t, a, c.m, true)
			if o1 != o2 || e1 != e2 || c1 != c2 || d1 != d2 {
				t.Fatalf("started for its command: %q %q %d %q\nspare: %q %q %d %q", o1, e1, c1, d1, o2, e2, c2, d2)
			}
			if c.name == "environment" && !bytes.Contains([]byte(o1), []byte("|C=line one\nline two|")) {
				t.Fatalf("environment lost a value: %q", o1)
			}
		})
	}
	if _, err := os.Stat("/nope"); err == nil {
		t.Fatal("a value of the environment ran")
	}
}

func TestExportable(t *testing.T) {
	cases := []struct {
		env  []string
		want bool
	}{
		{nil, true},
		{[]string{"PATH=/bin", "LANG=C.UTF-8", "_X1=", "lower=ok"}, true},
		{[]string{"A-B=1"}, false},
		{[]string{"1A=1"}, false},
		{[]string{"=1"}, false},
		{[]string{"NOEQUALS"}, false},
		{[]string{"A.B=1"}, false},
		{[]string{"IFS=x"}, false},
		{[]string{"PWD=/tmp"}, false},
		{[]string{"OLDPWD=/tmp"}, false},
		{[]string{"PPID=1"}, false},
		{[]string{"OPTIND=2"}, false},
		{[]string{"LINENO=2"}, false},
	}
	for _, c := range cases {
		if got := exportable(c.env); got != c.want {
			t.Errorf("exportable(%q) = %v, want %v", c.env, got, c.want)
		}
	}
}
