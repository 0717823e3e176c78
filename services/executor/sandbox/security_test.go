package sandbox

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/executor/sandbox/agent"
	"github.com/conch-sh/conch/services/executor/sandbox/wire"
)

// commandProcs lists the command lines of the sandbox's host processes
// that are not its residents: bubblewrap, the agent (the pid 1 of its pid
// namespace) and the agent's spare init and its child, when it has them.
func commandProcs(t *testing.T, sb *Sandbox) []string {
	t.Helper()
	pids, err := sb.HostPIDs()
	if err != nil {
		t.Fatal(err)
	}
	spare, spareChildLine := agent.SpareCommandLines()
	var names []string
	for _, p := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err != nil {
			continue // ended since
		}
		name := strings.TrimSuffix(strings.ReplaceAll(string(b), "\x00", " "), " ")
		if strings.HasSuffix(name, wire.AgentPath+" "+wire.AgentCommand) || name == spare || strings.HasPrefix(name, spareChildLine) {
			continue
		}
		names = append(names, name)
	}
	return names
}

// waitIdle polls until the sandbox has only its residents.
func waitIdle(t *testing.T, sb *Sandbox) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		names := commandProcs(t, sb)
		if len(names) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox still has %d processes of commands: %q", len(names), names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Class 12: nothing a command started survives its timeout or its end, and
// a child holding the output pipe never hangs the call.
func TestTimeoutKillsWholeTree(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	cases := []struct{ name, cmd string }{
		{"setsid", "setsid sleep 1000 & setsid sh -c 'sleep 1000' & sleep 1000"},
		{"double fork", "(sh -c 'sleep 1000 &' &) ; sleep 1000"},
		{"nohup", "nohup sleep 1000 >/dev/null 2>&1 & sleep 1000"},
		{"ignores SIGTERM", "trap '' TERM INT HUP; sh -c \"trap '' TERM; sleep 1000\" & sleep 1000"},
		{"new session daemon", "setsid sh -c 'exec >/dev/null 2>&1 </dev/null; while :; do sleep 1; done' & sleep 1000"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, timedOut := run(t, sb, Options{Command: c.cmd}, 500*time.Millisecond)
			if !timedOut {
				t.Fatalf("command ended by itself: %+v", r)
			}
			if r.exit.Code != 137 {
				t.Errorf("exit code = %d, want 137 (killed)", r.exit.Code)
			}
			waitIdle(t, sb)
		})
	}
	t.Run("background child keeps the pipe open", func(t *testing.T) {
		r, timedOut := run(t, sb, Options{Command: "sleep 1000 & echo started"}, 20*time.Second)
		if timedOut {
			t.Fatal("a background child holding stdout hung the call")
		}
		if r.stdout != "started\n" || r.exit.Code != 0 {
			t.Fatalf("got %+v", r)
		}
		waitIdle(t, sb)
	})
}

// Class 13: output beyond the budget is drained and dropped in the sandbox.
func TestOutputFloodIsDropped(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	cases := []struct{ name, cmd string }{
		{"yes", "yes | head -c 300000000"},
		{"binary", "head -c 100000000 /dev/urandom"},
		{"one huge line", "head -c 200000000 /dev/zero | tr '\\0' a"},
		{"stderr", "yes error | head -c 100000000 >&2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, timedOut := run(t, sb, Options{Command: c.cmd, Budget: 1000}, 60*time.Second)
			if timedOut {
				t.Fatal("flood did not finish")
			}
			if len(r.stdout) > 1000 || len(r.stderr) > 1000 {
				t.Fatalf("forwarded %d+%d bytes, budget 1000", len(r.stdout), len(r.stderr))
			}
			if !r.exit.StdoutDropped && !r.exit.StderrDropped {
				t.Fatal("nothing reported dropped")
			}
			if r.exit.Code != 0 {
				t.Fatalf("exit = %d, want 0 (the command must never block on its output)", r.exit.Code)
			}
		})
	}
}

// Class 14: resource bombs are contained and the sandbox stays usable.
func TestResourceBombsAreContained(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{Limits: Limits{MemoryBytes: 64 << 20, Pids: 64, WorkspaceBytes: 8 << 20, WorkspaceFiles: 1000, TmpBytes: 4 << 20}})
	t.Run("fork bomb", func(t *testing.T) {
		// The host's view, not the sandbox's: a process of the sandbox
		// outside its pids group would not show inside, but counts here.
		stop, most := make(chan struct{}), make(chan int)
		go func() {
			n := 0
			for {
				n = max(n, processesOf(sb.uid))
				select {
				case <-stop:
					most <- n
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
		}()
		_, _ = run(t, sb, Options{Command: "bomb() { bomb | bomb & }; bomb; sleep 3; echo survived"}, 10*time.Second)
		close(stop)
		if n := <-most; n > 64 {
			t.Errorf("the host saw %d processes of the sandbox's uid during the bomb, over its pids limit 64", n)
		}
		waitIdle(t, sb)
		if got := sh(t, sb, "echo alive").stdout; got != "alive\n" {
			t.Fatalf("sandbox unusable after fork bomb: %q", got)
		}
	})
	t.Run("threads count as pids", func(t *testing.T) {
		r := sh(t, sb, `python3 -c '
import threading, time
n = 0
try:
    for i in range(1000):
        threading.Thread(target=time.sleep, args=(5,), daemon=True).start(); n += 1
except RuntimeError:
    pass
print(n)'`)
		n, err := strconv.Atoi(strings.TrimSpace(r.stdout))
		if err != nil || n >= 64 {
			t.Fatalf("started %q threads (stderr %q), want fewer than the pids limit 64", r.stdout, r.stderr)
		}
	})
	t.Run("memory bomb", func(t *testing.T) {
		r := sh(t, sb, `python3 -c 'b = []
while True: b.append(bytearray(1 << 20))'`)
		if r.exit.Code != 137 {
			t.Fatalf("exit = %d (stderr %q), want 137 (killed by the memory limit)", r.exit.Code, r.stderr)
		}
		if !r.exit.OOMKilled {
			t.Error("the kill was not attributed to the memory limit")
		}
		if got := sh(t, sb, "echo alive").stdout; got != "alive\n" {
			t.Fatalf("sandbox unusable after memory bomb: %q", got)
		}
	})
	t.Run("disk fill", func(t *testing.T) {
		r := sh(t, sb, "dd if=/dev/zero of=big bs=1M count=64 2>&1; ls -l big | awk '{print $5}'; rm -f big")
		if !strings.Contains(r.stdout, "No space left") {
			t.Fatalf("workspace quota not enforced: %q", r.stdout)
		}
		r = sh(t, sb, "dd if=/dev/zero of=/tmp/big bs=1M count=64 2>&1; rm -f /tmp/big")
		if !strings.Contains(r.stdout, "No space left") {
			t.Fatalf("/tmp quota not enforced: %q", r.stdout)
		}
	})
	t.Run("many small files", func(t *testing.T) {
		r := sh(t, sb, "mkdir many && cd many && i=0; while [ $i -lt 5000 ]; do touch f$i || { echo failed at $i; break; }; i=$((i+1)); done 2>&1 | tail -1; cd .. && rm -rf many")
		if !strings.Contains(r.stdout, "failed at") {
			t.Fatalf("file quota not enforced: %q", r.stdout)
		}
	})
	t.Run("sparse file", func(t *testing.T) {
		r := sh(t, sb, "truncate -s 100G sparse && dd if=/dev/zero of=sparse bs=1M count=64 conv=notrunc 2>&1; rm -f sparse")
		if !strings.Contains(r.stdout, "No space left") {
			t.Fatalf("filling a sparse file escaped the quota: %q", r.stdout)
		}
	})
}

// Class 15: nothing of the host is visible inside.
func TestHostSecretsAreInvisible(t *testing.T) {
	t.Setenv("CONCH_TEST_SECRET", "hunter2-host-secret")
	sb := newSandbox(t, Spec{})
	cases := []struct {
		name, cmd string
		check     func(result) error
	}{
		{"environment", "env; cat /proc/1/environ /proc/self/environ 2>/dev/null | tr '\\0' '\\n'", func(r result) error {
			if strings.Contains(r.stdout, "hunter2") || strings.Contains(r.stdout, "CONCH_") {
				return fmt.Errorf("host env visible: %q", r.stdout)
			}
			return nil
		}},
		{"shadow and root", "cat /etc/shadow; ls /root; ls /etc", func(r result) error {
			if strings.Contains(r.stdout, "shadow") || strings.Contains(r.stdout, "ssh") || strings.Contains(r.stdout, "root:") {
				return fmt.Errorf("secret files visible: %q", r.stdout)
			}
			return nil
		}},
		{"only sandbox processes", "ls /proc | grep -c '^[0-9]'", func(r result) error {
			if n, _ := strconv.Atoi(strings.TrimSpace(r.stdout)); n == 0 || n > 6 {
				return fmt.Errorf("%q processes visible, want only the sandbox's", r.stdout)
			}
			return nil
		}},
		{"host pid", "ls /proc/" + strconv.Itoa(os.Getpid()) + " 2>&1", func(r result) error {
			if !strings.Contains(r.stdout, "No such file") {
				return fmt.Errorf("the executor's process is visible: %q", r.stdout)
			}
			return nil
		}},
		{"service account tokens and state", "ls /var/run/secrets /run/secrets /var/lib 2>&1; ls /run; cat /proc/1/cmdline | tr '\\0' ' '", func(r result) error {
			if strings.Contains(r.stdout, "kubernetes") || strings.Contains(r.stdout, "conch-sandbox-test") || strings.Contains(r.stdout, "conch-executor") {
				return fmt.Errorf("host state visible: %q", r.stdout)
			}
			return nil
		}},
		{"identity", "id -u; hostname; cat /proc/self/status | grep -E '^(CapEff|NoNewPrivs)'", func(r result) error {
			if !strings.HasPrefix(r.stdout, "1000\nsandbox\n") || !strings.Contains(r.stdout, "CapEff:\t0000000000000000") || !strings.Contains(r.stdout, "NoNewPrivs:\t1") {
				return fmt.Errorf("not an unprivileged sandbox user: %q", r.stdout)
			}
			return nil
		}},
		{"read-only system", "touch /usr/x /bin/x /etc/x /x 2>&1; echo done", func(r result) error {
			if strings.Count(r.stdout, "Read-only file system") < 3 {
				return fmt.Errorf("system dirs writable: %q", r.stdout)
			}
			return nil
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.check(sh(t, sb, c.cmd)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Class 16: terminal injection, leaked descriptors, the agent's binary.
func TestTerminalAndDescriptors(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	tiocsti := `python3 -c '
import fcntl, termios, os, sys
for req in (termios.TIOCSTI, termios.TIOCSTI | (1 << 32)):
    try:
        fcntl.ioctl(sys.stdin.fileno(), req, b"x")
        print("injected")
    except OSError as e:
        print("refused", e.errno)
'`
	for _, ptyMode := range []bool{false, true} {
		t.Run(fmt.Sprintf("TIOCSTI pty=%v", ptyMode), func(t *testing.T) {
			r, _ := run(t, sb, Options{Command: tiocsti, Pty: ptyMode}, 20*time.Second)
			if strings.Contains(r.stdout, "injected") || strings.Count(r.stdout, "refused") != 2 {
				t.Fatalf("TIOCSTI not refused: %q %q", r.stdout, r.stderr)
			}
		})
	}
	t.Run("only stdio inherited", func(t *testing.T) {
		r := sh(t, sb, `python3 -c 'import os
fds = os.listdir("/proc/self/fd")
print(" ".join(sorted(f for f in fds if os.path.exists("/proc/self/fd/" + f) and not os.readlink("/proc/self/fd/" + f).startswith("/proc"))))'`)
		if r.stdout != "0 1 2\n" {
			t.Fatalf("a command has fds %q, want 0 1 2", r.stdout)
		}
	})
	t.Run("agent binary", func(t *testing.T) {
		r := sh(t, sb, "for p in /proc/[0-9]*; do cat $p/exe >/dev/null 2>&1 && echo readable ${p#/proc/} $(readlink $p/exe); done; echo x >> /run/conch/agent 2>&1; cp /bin/true /run/conch/agent 2>&1; echo end")
		if strings.Contains(r.stdout, "/run/conch/agent\n") || strings.Contains(r.stdout, "readable 2 ") {
			t.Fatalf("agent binary exposed: %q", r.stdout)
		}
		if !strings.Contains(r.stdout, "Read-only file system") && !strings.Contains(r.stdout, "Permission denied") {
			t.Fatalf("agent binary writable: %q", r.stdout)
		}
	})
}

// Class 18: no network but loopback; nothing of the host is reachable.
func TestNoNetwork(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("host-service\n"))
			_ = c.Close()
		}
	}()
	port := lis.Addr().(*net.TCPAddr).Port
	sb := newSandbox(t, Spec{})
	connect := `python3 -c '
import socket, sys
s = socket.socket(); s.settimeout(2)
try:
    s.connect((sys.argv[1], int(sys.argv[2]))); print("connected", s.recv(100))
except OSError as e:
    print("refused", e)
' `
	for _, target := range []string{"127.0.0.1 " + strconv.Itoa(port), "169.254.169.254 80", "1.1.1.1 443", "10.0.0.1 2379"} {
		t.Run(target, func(t *testing.T) {
			r := sh(t, sb, connect+target)
			if !strings.HasPrefix(r.stdout, "refused") {
				t.Fatalf("reached %s: %q %q", target, r.stdout, r.stderr)
			}
		})
	}
	t.Run("interfaces", func(t *testing.T) {
		r := sh(t, sb, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
		if r.stdout != "lo\n" {
			t.Fatalf("interfaces %q, want only lo", r.stdout)
		}
	})
}

// Class 19: no nested namespaces, mounts or cgroup writes.
func TestNoNamespacesMountsOrCgroups(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	cases := []struct{ name, cmd string }{
		{"user namespace", "unshare -U true"},
		{"user namespace via python", `python3 -c 'import os; os.unshare(os.CLONE_NEWUSER)'`},
		{"mount namespace", "unshare -m true"},
		{"mount", "mount -t tmpfs none /tmp"},
		{"remount", "mount -o remount,rw /usr"},
		{"chroot", "chroot / true"},
		{"cgroup write", "mkdir -p /sys/fs/cgroup/x || echo 1 > /sys/fs/cgroup/pids.max"},
		{"ptrace", `python3 -c 'import ctypes; l = ctypes.CDLL(None); assert l.ptrace(16, 1, 0, 0) == 0'`},
		{"keyring", `python3 -c 'import ctypes; l = ctypes.CDLL(None); assert l.syscall(250, 0, 0, 0, 0) >= 0'`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := sh(t, sb, c.cmd)
			if r.exit.Code == 0 {
				t.Fatalf("%q succeeded: %q %q", c.cmd, r.stdout, r.stderr)
			}
		})
	}
}

// processesOf counts the host's processes whose real uid is uid (from
// their status: a process that is not dumpable shows its /proc directory
// as root's).
func processesOf(uid int) int {
	entries, _ := os.ReadDir("/proc")
	want := "Uid:\t" + strconv.Itoa(uid) + "\t"
	n := 0
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		if b, err := os.ReadFile("/proc/" + e.Name() + "/status"); err == nil && strings.Contains(string(b), want) {
			n++
		}
	}
	return n
}
