package sandbox

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// buildProbe compiles testdata/syscallprobe.c. It is static and not
// position-independent: the i386 entry takes 32-bit pointers, and the
// sandbox need not have the probe's libraries.
func buildProbe(t *testing.T) string {
	t.Helper()
	src, err := filepath.Abs("testdata/syscallprobe.c")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "syscallprobe")
	out, err := exec.CommandContext(t.Context(), "gcc", "-O1", "-static", "-no-pie", "-o", bin, src).CombinedOutput()
	if err != nil {
		t.Fatalf("compile the probe (gcc is required): %v\n%s", err, out)
	}
	return bin
}

// probeResults maps "<entry> <call>" to the probe's outcome for it.
func probeResults(t *testing.T, out string) map[string]string {
	t.Helper()
	res := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 4 {
			continue
		}
		key := f[0] + " " + f[1]
		if _, dup := res[key]; !dup {
			res[key] = f[2] + " " + f[3]
		}
	}
	return res
}

// Class 19 through both system call entries: the filter refuses what it
// must whether a call comes through the 64-bit entry or the i386 one.
func TestSeccompInsideSandbox(t *testing.T) {
	t.Parallel()
	probe := buildProbe(t)

	// The same probe on the host shows that the i386 entry works on this
	// machine, so a death inside is the filter's doing.
	host, err := exec.CommandContext(t.Context(), probe).Output()
	if err != nil {
		t.Fatalf("probe on the host: %v", err)
	}
	hres := probeResults(t, string(host))
	if !strings.HasPrefix(hres["x86_64 getpid"], "ok ") {
		t.Fatalf("on the host x86_64 getpid: %q, want ok (output %q)", hres["x86_64 getpid"], host)
	}
	// A kernel without IA-32 emulation kills every i386 call itself: there
	// the entry is no way around the filter, and the filter cannot be told
	// apart from the kernel.
	i386 := strings.HasPrefix(hres["i386 getpid"], "ok ") && strings.HasPrefix(hres["i386 write"], "ok ")
	if !i386 {
		t.Logf("this kernel has no i386 system call entry (the host's probe: %q); only the 64-bit entry is checked", hres["i386 getpid"])
	}

	sb := newSandbox(t, Spec{})
	bin, err := os.ReadFile(probe)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(sb.WorkspacePath(), "syscallprobe")
	if err := os.WriteFile(dst, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dst, sb.HostUID(), sb.HostUID()); err != nil {
		t.Fatal(err)
	}
	// On a terminal, so that TIOCSTI would inject were it allowed.
	r, timedOut := run(t, sb, Options{Command: "./syscallprobe", Pty: true}, 30*time.Second)
	if timedOut || r.exit.Code != 0 {
		t.Fatalf("probe: timed out %v, %+v", timedOut, r)
	}
	got := probeResults(t, strings.ReplaceAll(r.stdout, "\r", ""))

	sigsys := fmt.Sprintf("signal %d", unix.SIGSYS)
	errno := func(e unix.Errno) string { return fmt.Sprintf("err %d", e) }
	want := map[string]string{
		"x86_64 getpid":          "ok",
		"x86_64 write":           "ok 0",
		"x86_64 unshare_user":    errno(unix.EPERM),
		"x86_64 unshare_mount":   errno(unix.EPERM),
		"x86_64 keyctl":          errno(unix.EPERM),
		"x86_64 ptrace":          errno(unix.EPERM),
		"x86_64 perf_event_open": errno(unix.EPERM),
		"x86_64 personality":     errno(unix.EPERM),
		"x86_64 kcmp":            errno(unix.EPERM),
		"x86_64 io_uring_setup":  errno(unix.EPERM),
		"x86_64 tiocsti":         errno(unix.EPERM),
		"x86_64 clone3":          errno(unix.ENOSYS),
	}
	// Through the i386 entry nothing is allowed, not even getpid: the
	// process is killed before its call is looked at.
	for _, c := range []string{"getpid", "write", "unshare_user", "unshare_mount", "keyctl", "ptrace", "perf_event_open", "personality", "kcmp", "io_uring_setup", "tiocsti", "clone3"} {
		want["i386 "+c] = sigsys
	}
	for k, w := range want {
		if strings.HasPrefix(k, "i386 ") && !i386 {
			continue
		}
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("%s: no result (output %q)", k, r.stdout)
		case w == "ok" && !strings.HasPrefix(g, "ok "), w != "ok" && g != w:
			t.Errorf("%s: %q, want %q", k, g, w)
		}
	}
}

// A command holds no capability in any set, and cannot gain one by exec.
func TestCommandsHaveNoCapabilities(t *testing.T) {
	t.Parallel()
	sb := newSandbox(t, Spec{})
	for _, pty := range []bool{false, true} {
		t.Run(fmt.Sprintf("pty=%v", pty), func(t *testing.T) {
			r, timedOut := run(t, sb, Options{Command: "grep -E '^(Cap|NoNewPrivs)' /proc/self/status", Pty: pty}, 30*time.Second)
			if timedOut || r.exit.Code != 0 {
				t.Fatalf("timed out %v, %+v", timedOut, r)
			}
			got := map[string]string{}
			for _, line := range strings.Split(strings.ReplaceAll(r.stdout, "\r", ""), "\n") {
				if k, v, ok := strings.Cut(line, ":"); ok {
					got[k] = strings.TrimSpace(v)
				}
			}
			want := map[string]string{
				"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
				"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1",
			}
			for k, w := range want {
				if got[k] != w {
					t.Errorf("%s = %q, want %q (status %q)", k, got[k], w, r.stdout)
				}
			}
		})
	}
}
