package dirlock_test

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/conch-sh/conch/services/internal/platform/dirlock"
)

// holdEnv, set, makes the test binary a process that holds the directory
// it names until its stdin closes or it is killed.
const holdEnv = "DIRLOCK_TEST_HOLD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		l, err := dirlock.Acquire(dir, "holder")
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString("held\n")
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
		_ = l.Release()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// holdIn starts a process holding dir and returns it once it holds it.
func holdIn(t *testing.T, dir string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holdEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "held\n" {
		t.Fatalf("holder said %q (%v)", line, err)
	}
	return cmd
}

func TestAnotherProcessIsRefusedWithItsPID(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holder := holdIn(t, dir)

	l, err := dirlock.Acquire(dir, "conch dev")
	var held *dirlock.HeldError
	if !errors.As(err, &held) {
		if l != nil {
			_ = l.Release()
		}
		t.Fatalf("Acquire while another process holds it = %v, want a *HeldError", err)
	}
	want := &dirlock.HeldError{Dir: dir, Holder: "conch dev", PID: holder.Process.Pid}
	if *held != *want {
		t.Errorf("HeldError = %+v, want %+v", *held, *want)
	}
	if msg, want := err.Error(), dir+" is in use by another conch dev (pid "+strconv.Itoa(holder.Process.Pid)+")"; msg != want {
		t.Errorf("message = %q, want %q", msg, want)
	}
}

func TestAKilledHolderBlocksNoOne(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	holder := holdIn(t, dir)
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()

	l, err := dirlock.Acquire(dir, "conch dev")
	if err != nil {
		t.Fatalf("Acquire after the holder was killed: %v", err)
	}
	defer l.Release()
	if got := lockFile(t, dir); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q, want this process's pid %d", got, os.Getpid())
	}
}

func TestTheSameDirectoryIsHeldOnceInAProcess(t *testing.T) {
	// Not parallel: another test's child process, forked while the lock
	// file was open, holds a copy of its lock until it execs, and the
	// Acquire after Release would find it taken.
	dir := t.TempDir()
	l, err := dirlock.Acquire(dir, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	// flock locks belong to an open file, not to a process: the
	// directory is not taken twice, even by its holder.
	var held *dirlock.HeldError
	if _, err := dirlock.Acquire(dir, "etcd"); !errors.As(err, &held) || held.PID != os.Getpid() {
		t.Fatalf("second Acquire = %v, want a *HeldError naming pid %d", err, os.Getpid())
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if got := lockFile(t, dir); got != "" {
		t.Errorf("lock file after Release holds %q, want it empty", got)
	}
	l, err = dirlock.Acquire(dir, "etcd")
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	_ = l.Release()
}

func TestAStalePIDIsReplaced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, dirlock.FileName), []byte("999999999\nleft by a crash\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := dirlock.Acquire(dir, "conch dev")
	if err != nil {
		t.Fatalf("Acquire over a stale lock file: %v", err)
	}
	defer l.Release()
	if got := lockFile(t, dir); got != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q, want this process's pid %d", got, os.Getpid())
	}
}

func TestAMissingDirectoryIsAnError(t *testing.T) {
	t.Parallel()
	var held *dirlock.HeldError
	if _, err := dirlock.Acquire(filepath.Join(t.TempDir(), "missing"), "conch dev"); err == nil || errors.As(err, &held) {
		t.Fatalf("Acquire of a missing directory = %v, want an error other than HeldError", err)
	}
}

func lockFile(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, dirlock.FileName))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
