package sandbox

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/executor/sandbox/agent"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
)

// The agent's channel to the host cannot be reached from a command: there
// is no bubblewrap init holding it, and the agent (pid 1) is not dumpable,
// so its memory and fds are closed to the sandbox's uid.
func TestAgentIsOutOfReach(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	probe := `python3 - <<'EOF'
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
me = os.getpid()
for p in sorted(int(d) for d in os.listdir("/proc") if d.isdigit()):
    try:
        cmd = open("/proc/%d/cmdline" % p, "rb").read().split(b"\0")
    except OSError:
        continue
    if b"sandbox-agent" not in cmd and p != 1:
        continue
    for path, mode in (("/proc/%d/mem" % p, os.O_RDWR), ("/proc/%d/fd/1" % p, os.O_WRONLY), ("/proc/%d/fd/0" % p, os.O_RDONLY)):
        try:
            os.close(os.open(path, mode))
            print("opened", path)
        except OSError as e:
            print("refused", path, e.errno)
    for req in (PTRACE_ATTACH, PTRACE_SEIZE):
        if libc.ptrace(req, p, 0, 0) == 0:
            print("traced", p)
        else:
            print("refused ptrace", p, ctypes.get_errno())
    print("agent", p, cmd[-2].decode() if len(cmd) > 1 else "")
EOF`
	r := sh(t, sb, probe)
	if r.exit.Code != 0 {
		t.Fatalf("probe failed: %+v", r)
	}
	if strings.Contains(r.stdout, "opened") || strings.Contains(r.stdout, "traced") {
		t.Fatalf("a command reached the agent:\n%s", r.stdout)
	}
	// pid 1 is the agent itself: no other process of the sandbox sits
	// between the host's pipes and the commands.
	if !strings.Contains(r.stdout, "agent 1 sandbox-agent\n") {
		t.Fatalf("pid 1 is not the agent:\n%s", r.stdout)
	}
	if strings.Count(r.stdout, "refused ptrace") != 2 || strings.Count(r.stdout, "refused /proc/") != 3 {
		t.Fatalf("probe did not try everything:\n%s", r.stdout)
	}
}

// Nothing a command plants in the filesystem reaches the agent, and
// nothing it writes to its own directory report blocks or kills the agent:
// the next command, with a short timeout, runs as usual.
func TestCommandCannotBlockOrKillTheAgent(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	// The report pipe as the command's shell reaches it: through its
	// parent, the init shell of the command's pid namespace.
	const report = `read -r _ _ _ pp _ </proc/self/stat; r=/proc/$pp/fd/3; `
	attacks := []struct{ name, cmd string }{
		{"fifo", `for i in $(seq 1 20); do mkfifo /run/conch/cwd-$i /run/conch/cmd-$i; done`},
		{"symlink", `for i in $(seq 1 20); do ln -s /dev/zero /run/conch/cwd-$i; done`},
		{"sparse 1 TiB", `for i in $(seq 1 20); do truncate -s 1T /run/conch/cwd-$i; done`},
		{"garbage report", report + `trap - EXIT; printf 'rel\n/x\0y\n' >$r`},
		{"huge report line", report + `trap - EXIT; head -c 60000 /dev/zero | tr '\0' / >$r`},
		{"report after the shell", report + `(sleep 0.2; echo /etc >$r) & cd /tmp`},
		{"report pipe held open", report + `setsid sh -c "exec 9>$r; sleep 1000" & cd /tmp`},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			sh(t, sb, "cd /home/workspace")
			r, timedOut := run(t, sb, Options{Command: a.cmd, TrackCwd: true}, 5*time.Second)
			if timedOut {
				t.Fatalf("attack hung its own command: %+v", r)
			}
			if c := sb.Cwd(); c != wire.WorkspaceDir && c != "/tmp" {
				t.Fatalf("cwd is %q after the attack", c)
			}
			r, timedOut = run(t, sb, Options{Command: "echo hi; ls -A /run/conch", TrackCwd: true}, 2*time.Second)
			if timedOut || r.stdout != "hi\nagent\nskills\ntool\ntools\n" || r.exit.Code != 0 {
				t.Fatalf("next command: timed out %v, %+v", timedOut, r)
			}
			long := "v='" + strings.Repeat("x", 100<<10) + "'; echo ${#v}"
			if r := sh(t, sb, long); r.stdout != "102400\n" {
				t.Fatalf("long command: %+v", r)
			}
			waitIdle(t, sb)
		})
	}
	select {
	case <-sb.Done():
		t.Fatal("the sandbox ended")
	default:
	}
}

// /run, where the agent's binary and tools are, is read-only to commands.
func TestRunIsReadOnly(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	r := sh(t, sb, "touch /run/x /run/conch/x 2>&1; mkdir /run/conch/d 2>&1; true")
	if strings.Count(r.stdout, "Read-only file system") != 3 {
		t.Fatalf("/run writable: %q", r.stdout)
	}
}

// A command that deletes its own directory leaves the sandbox usable: the
// next command starts in /home/workspace and says so.
func TestDeletedCwd(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	if r := sh(t, sb, "mkdir -p gone/deeper && cd gone/deeper && rm -rf /home/workspace/gone"); r.exit.Code != 0 {
		t.Fatalf("setup: %+v", r)
	}
	r := sh(t, sb, "pwd")
	want := "conch: working directory /home/workspace/gone/deeper no longer exists; starting in /home/workspace\n"
	if r.stdout != "/home/workspace\n" || r.stderr != want || r.exit.Code != 0 {
		t.Fatalf("after deleting the cwd: %+v", r)
	}
	if r := sh(t, sb, "pwd"); r.stdout != "/home/workspace\n" || r.stderr != "" {
		t.Fatalf("second command: %+v", r)
	}
	// A background command leaves the cwd as it was: the fallback holds
	// for every command until one moves the shell.
	sh(t, sb, "mkdir -p gone && cd gone && rmdir ../gone")
	r, _ = run(t, sb, Options{Command: "pwd"}, 10*time.Second)
	if r.stdout != "/home/workspace\n" || !strings.HasPrefix(r.stderr, "conch: working directory /home/workspace/gone no longer") {
		t.Fatalf("untracked command: %+v", r)
	}
	// A directory named for one command has no fallback: it must exist.
	r, _ = run(t, sb, Options{Command: "pwd", Workdir: "/home/workspace/nope"}, 10*time.Second)
	if r.exit.Code == 0 || strings.Contains(r.stderr, "conch: working directory") {
		t.Fatalf("missing workdir ran: %+v", r)
	}
}

// A spare init reads its script from a pipe, which every process of the
// sandbox could open through /proc: the agent must never hand a command a
// spare that a process of another command lived beside. Here one command
// writes a payload into every pipe it can open while others start, one
// after another and after it ended; the payload never runs.
func TestNoCommandWritesAnothersScript(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	sh(t, sb, "true") // a spare is started after each command
	// It says when it starts writing; the rest of its output (it writes
	// into its own pipes too) is dropped inside the sandbox.
	writing := make(chan struct{})
	var once sync.Once
	writer, err := sb.Start(Options{Budget: 1, OnOutput: func(Stream, []byte) { once.Do(func() { close(writing) }) },
		Command: `echo; while :; do for f in /proc/[0-9]*/fd/*; do ` +
			`[ -p "$f" ] && printf 'touch /tmp/injected\n' 2>/dev/null >"$f"; done; done`})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-writing:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer never started")
	}
	for range 30 {
		if r, timedOut := run(t, sb, Options{Command: "true", Budget: -1}, 10*time.Second); timedOut || r.exit.Code != 0 {
			t.Fatalf("command beside the writer: timed out %v, %+v", timedOut, r)
		}
	}
	if err := writer.Kill(); err != nil {
		t.Fatal(err)
	}
	<-writer.Done()
	for range 3 {
		sh(t, sb, "true")
	}
	if r := sh(t, sb, "ls /tmp"); r.stdout != "" {
		t.Fatalf("a payload ran: /tmp holds %q", r.stdout)
	}
}

// A spare killed while it waits (the OOM killer picks it first) is
// replaced: the next command runs as usual.
func TestDeadSpareIsReplaced(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	sh(t, sb, "true")
	_, spareChildLine := agent.SpareCommandLines()
	init := 0
	for deadline := time.Now().Add(10 * time.Second); init == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		pids, err := sb.HostPIDs()
		if err != nil {
			t.Fatal(err)
		}
		for _, pid := range pids {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.HasPrefix(strings.ReplaceAll(string(b), "\x00", " "), spareChildLine) {
				if ppid := parentPID(pid); ppid > 0 && syscall.Kill(pid, syscall.SIGKILL) == nil {
					init = ppid
				}
			}
		}
	}
	if init == 0 {
		t.Fatal("no spare to kill")
	}
	// The agent learns of the death when its script pipe has no reader,
	// that is once the spare's init has ended too (the OOM killer's victim
	// is gone before anyone asks for a command); until then the command
	// goes to the dying spare and reports its death, as it would had the
	// command itself been killed.
	for deadline := time.Now().Add(10 * time.Second); !ended(init); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the spare's init %d outlived its child", init)
		}
	}
	if r := sh(t, sb, "echo ok"); r.stdout != "ok\n" || r.stderr != "" || r.exit.Code != 0 {
		t.Fatalf("command after the spare died: %+v", r)
	}
}

// parentPID is pid's parent as the host sees it, or 0.
func parentPID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// ended reports whether pid has exited: gone, or a zombie, whose fds are
// closed.
func ended(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

// Input flows at the pace the process reads it: a writer far faster than
// its reader loses nothing, however much it sends.
func TestStdinIsNeverDropped(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	data := make([]byte, 100<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	out := new(streams)
	// The reader starts a second late, and reads slowly besides.
	p, err := sb.Start(Options{Command: "sleep 1; dd bs=4096 2>/dev/null | sha256sum", Budget: -1, OnOutput: out.add})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(data, true); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	sum := sha256.Sum256(data)
	if got, _ := out.strings(); got != hex.EncodeToString(sum[:])+"  -\n" || p.Exit().Code != 0 {
		t.Errorf("the process read input hashing to %q (exit %+v), want %q", got, p.Exit(), hex.EncodeToString(sum[:])+"  -\n")
	}
}

// A process that ends before reading all its input leaves the agent
// acknowledging the rest after its exit; the sandbox lives on.
func TestInputLeftAtExitKeepsTheSandbox(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	for range 20 {
		p, err := sb.Start(Options{Command: "head -c 1 >/dev/null", Budget: -1, OnOutput: func(Stream, []byte) {}})
		if err != nil {
			t.Fatal(err)
		}
		// Most of it is queued in the agent when head exits.
		_ = p.Write(make([]byte, 4<<20), true)
		<-p.Done()
	}
	if r := sh(t, sb, "echo alive"); r.stdout != "alive\n" {
		t.Fatalf("after processes left input unread: %+v", r)
	}
}
