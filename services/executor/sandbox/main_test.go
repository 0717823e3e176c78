package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/executor/sandbox/agent"
	"github.com/conch-sh/conch/services/executor/sandbox/seccomp"
)

// TestMain lets the test binary serve as the sandbox agent, as the conch
// binary does in production.
func TestMain(m *testing.M) {
	if served, err := agent.Serve(os.Args[1:]); served {
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if spec := os.Getenv(uidHolderEnv); spec != "" {
		if err := runUIDHolder(spec); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	if rt != nil {
		rt.Close()
	}
	os.Exit(code)
}

var (
	rtOnce sync.Once
	rt     *Runtime
	rtErr  error
)

// filter is the seccomp filter of the tests' runtimes.
func filter(t testing.TB) []byte {
	t.Helper()
	prog, err := seccomp.Program()
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// testRuntime returns one runtime shared by the package's tests.
func testRuntime(t testing.TB) *Runtime {
	t.Helper()
	rtOnce.Do(func() {
		dir, err := os.MkdirTemp("", "conch-sandbox-test-")
		if err != nil {
			rtErr = err
			return
		}
		_ = os.Chmod(dir, 0o711)
		rt, rtErr = NewRuntime(Config{Seccomp: filter(t), StateDir: filepath.Join(dir, "state"), CgroupParent: "conch-test-" + filepath.Base(dir)})
	})
	if rtErr != nil {
		t.Fatal(rtErr)
	}
	return rt
}

// poolRuntime returns a runtime keeping size sandboxes warm, closed at the
// end of the test.
func poolRuntime(t testing.TB, size int) *Runtime {
	t.Helper()
	r := ownRuntime(t, Config{PoolSize: size})
	waitPool(t, r, size)
	return r
}

// ownRuntime returns a runtime of cfg with the package's filter, a state
// dir and a cgroup parent of its own, closed at the end of the test.
func ownRuntime(t testing.TB, cfg Config) *Runtime {
	t.Helper()
	dir, err := os.MkdirTemp("", "conch-sandbox-own-")
	if err != nil {
		t.Fatal(err)
	}
	_ = os.Chmod(dir, 0o711)
	cfg.Seccomp, cfg.StateDir, cfg.CgroupParent = filter(t), filepath.Join(dir, "state"), "conch-test/"+filepath.Base(dir)
	r, err := NewRuntime(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.Close()
		_ = os.RemoveAll(dir)
	})
	return r
}

// waitPool polls until the runtime's pool holds n sandboxes.
func waitPool(t testing.TB, r *Runtime, n int) { waitSpares(t, r.pool, n) }

// waitSpares polls until sp holds n values made ahead.
func waitSpares[T any](t testing.TB, sp *spares[T], n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		sp.mu.Lock()
		got := len(sp.ready)
		sp.mu.Unlock()
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("spare %s: %d ready, want %d", sp.what, got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var sbSeq struct {
	sync.Mutex
	n int
}

// newSandbox builds a sandbox destroyed at the end of the test.
func newSandbox(t testing.TB, spec Spec) *Sandbox {
	t.Helper()
	r := testRuntime(t)
	sbSeq.Lock()
	sbSeq.n++
	spec.ID = fmt.Sprintf("t%d-%d", os.Getpid(), sbSeq.n)
	sbSeq.Unlock()
	sb, err := r.Create(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := sb.Destroy(context.WithoutCancel(t.Context())); err != nil {
			t.Errorf("destroy: %v", err)
		}
	})
	return sb
}

// result is a finished command's output.
type result struct {
	stdout, stderr string
	exit           Exit
}

// streams keeps what a command sent to OnOutput (its add), which the
// sandbox's read loop calls while the test reads.
type streams struct {
	mu             sync.Mutex
	stdout, stderr bytes.Buffer
}

func (o *streams) add(s Stream, b []byte) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if s == Stdout {
		o.stdout.Write(b)
	} else {
		o.stderr.Write(b)
	}
}

// strings returns what came on each stream so far.
func (o *streams) strings() (stdout, stderr string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stdout.String(), o.stderr.String()
}

// run runs a command to its end or until timeout, then kills it.
func run(t testing.TB, sb *Sandbox, opts Options, timeout time.Duration) (result, bool) {
	t.Helper()
	out := new(streams)
	opts.OnOutput = out.add
	if opts.Budget == 0 {
		opts.Budget = -1
	}
	p, err := sb.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	timedOut := false
	select {
	case <-p.Done():
	case <-time.After(timeout):
		timedOut = true
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		<-p.Done()
	}
	stdout, stderr := out.strings()
	return result{stdout: stdout, stderr: stderr, exit: p.Exit()}, timedOut
}

func sh(t testing.TB, sb *Sandbox, cmd string) result {
	t.Helper()
	r, timedOut := run(t, sb, Options{Command: cmd, TrackCwd: true}, 30*time.Second)
	if timedOut {
		t.Fatalf("%q timed out", cmd)
	}
	return r
}
