package e2e

import (
	"bufio"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/conch-sh/conch/services/internal/platform/etcdx"
	"github.com/conch-sh/conch/services/internal/platform/etcdx/etcdxtest"
	"github.com/conch-sh/conch/services/internal/platform/seal/sealtest"
)

// exitDeadline is how long a test lets a conch process take to exit
// before it calls it stuck: generous, for a loaded machine, where the
// processes here take a second or two.
const exitDeadline = 30 * time.Second

// refused is what a conch process refused its data dir left.
type refused struct {
	code           int
	stdout, stderr string
}

// runRefused runs conch with args in dir and waits, up to exitDeadline,
// for it to exit on its own.
func runRefused(t *testing.T, dir string, args ...string) refused {
	t.Helper()
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, cleanEnv()
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
	case <-time.After(exitDeadline):
		_ = cmd.Process.Kill()
		<-waited
		t.Fatalf("conch %s still running after %v; it should have been refused at once:\n%s", args[0], exitDeadline, tail(stderr.String(), 2000))
	}
	return refused{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

// TestDevHoldsItsDataDir starts a second conch dev on the data dir of a
// running one: it is refused at once, naming the dir as given and the
// first one's pid, and the first keeps serving. Once the first has died
// without a chance to clean up, its lock is gone with it.
func TestDevHoldsItsDataDir(t *testing.T) {
	d := startDev(t)

	// The dir is given relative to where the second one runs: the
	// message names it as given.
	parent, name := filepath.Split(d.DataDir)
	got := runRefused(t, parent, "dev", "--http-addr", "127.0.0.1:0", "--data-dir", name)
	want := "conch dev: " + name + " is in use by another conch dev (pid " + strconv.Itoa(d.cmd.Process.Pid) + ")\n"
	if got.code != 1 || got.stderr != want || got.stdout != "" {
		t.Errorf("second conch dev: exit code %d, stdout %q, stderr %q; want exit code 1 and only %q", got.code, got.stdout, got.stderr, want)
	}

	d.waitReady(30 * time.Second)
	if code, body := d.call("GET", "/v1/models", d.Key, nil); code != http.StatusOK {
		t.Errorf("the first conch dev after the second was refused: GET /v1/models = %d %s, want 200", code, body)
	}

	if err := d.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.waited
	again := startDevIn(t, d.DataDir)
	if code, body := again.call("GET", "/v1/models", again.Key, nil); code != http.StatusOK {
		t.Errorf("conch dev on the dir of a killed one: GET /v1/models = %d %s, want 200", code, body)
	}
}

// TestEtcdHoldsItsDataDir does the same for conch etcd, which etcd's own
// locks would keep waiting, in silence.
func TestEtcdHoldsItsDataDir(t *testing.T) {
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	member := func(peer string) []string {
		return []string{"etcd", "--name", "a", "--data-dir", dir, "--listen-client", "http://" + freeAddr(t),
			"--listen-peer", "http://" + peer, "--initial-cluster", "a=http://" + peer, "--unsafe-no-fsync"}
	}
	first := exec.Command(bin, member(freeAddr(t))...)
	first.Env = cleanEnv()
	stderr, err := first.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = first.Process.Signal(syscall.SIGTERM)
		_ = first.Wait()
	})
	// It logs that it serves once it does.
	serving := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), `"etcd member serving"`) {
				close(serving)
				break
			}
		}
		for sc.Scan() { // keep the pipe drained
		}
	}()
	select {
	case <-serving:
	case <-time.After(exitDeadline):
		t.Fatalf("conch etcd not serving after %v", exitDeadline)
	}

	got := runRefused(t, t.TempDir(), member(freeAddr(t))...)
	want := "conch etcd: " + dir + " is in use by another etcd (pid " + strconv.Itoa(first.Process.Pid) + ")\n"
	if got.code != 1 || got.stderr != want {
		t.Errorf("second conch etcd: exit code %d, stderr %q; want exit code 1 and only %q", got.code, got.stderr, want)
	}
}

// stalledS3 is an S3 endpoint that takes connections and never answers:
// a conch that starts with it waits for it, whatever else is ready.
type stalledS3 struct {
	addr string
	// reached is closed once a connection came in.
	reached chan struct{}
}

func serveStalledS3(t *testing.T) *stalledS3 {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &stalledS3{addr: lis.Addr().String(), reached: make(chan struct{})}
	var (
		mu    sync.Mutex
		conns []net.Conn
		once  sync.Once
	)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			once.Do(func() { close(s.reached) })
		}
	}()
	t.Cleanup(func() {
		_ = lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return s
}

// TestDevStopsWhileStarting sends SIGTERM to a conch dev still waiting at
// start, for its object store or for the lock of an etcd it did not start
// on its etcd data (an older conch dev's, which took no lock of its own):
// it exits, never up, and leaves no process behind.
func TestDevStopsWhileStarting(t *testing.T) {
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// wait makes what conch dev, on dataDir, waits for, and returns
		// the settings that make it wait and whether it is waiting.
		wait func(t *testing.T, dataDir string) (env []string, waiting func(pid int) bool)
	}{
		{"for its object store", func(t *testing.T, _ string) ([]string, func(int) bool) {
			s3 := serveStalledS3(t)
			return []string{"CONCH_S3_ENDPOINT=" + s3.addr, "CONCH_S3_ACCESS_KEY=stalled", "CONCH_S3_SECRET_KEY=stalled-secret-key"},
				func(int) bool {
					select {
					case <-s3.reached:
						return true
					default:
						return false
					}
				}
		}},
		{"for etcd's lock", func(t *testing.T, dataDir string) ([]string, func(int) bool) {
			dir := filepath.Join(dataDir, "etcd")
			holdEtcdBackend(t, dir)
			// Its etcd takes the dir just before it starts.
			return nil, func(pid int) bool {
				b, _ := os.ReadFile(filepath.Join(dir, "conch.lock"))
				return strings.TrimSpace(string(b)) == strconv.Itoa(pid)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dataDir := t.TempDir()
			env, waiting := tt.wait(t, dataDir)
			cmd := exec.Command(bin, "dev", "--http-addr", "127.0.0.1:0", "--data-dir", dataDir)
			cmd.Env = append(cleanEnv(), env...)
			var stdout, stderr lockedBuffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waited := make(chan error, 1)
			go func() { waited <- cmd.Wait() }()
			t.Cleanup(func() {
				if cmd.ProcessState == nil {
					_ = cmd.Process.Kill()
					<-waited
				}
				if t.Failed() {
					t.Logf("conch dev stderr:\n%s", tail(stderr.String(), 4000))
				}
			})

			for deadline := time.Now().Add(exitDeadline); !waiting(cmd.Process.Pid); {
				select {
				case err := <-waited:
					t.Fatalf("conch dev exited (%v) before it waited", err)
				default:
				}
				if time.Now().After(deadline) {
					t.Fatalf("conch dev not waiting after %v", exitDeadline)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			select {
			case <-waited:
			case <-time.After(exitDeadline):
				t.Fatalf("conch dev still running %v after SIGTERM while starting", exitDeadline)
			}
			if strings.Contains(stdout.String(), "is up") {
				t.Errorf("conch dev said it was up:\n%s", stdout.String())
			}
			if left := processesMentioning(dataDir); len(left) > 0 {
				t.Errorf("processes left behind: %v", left)
			}
		})
	}
}

// holdEtcdBackend makes etcd data in dir and holds the lock on its
// backend, as an etcd running on it would, until the test ends.
func holdEtcdBackend(t *testing.T, dir string) {
	t.Helper()
	e, err := etcdx.StartEmbedded(t.Context(), etcdx.EmbeddedOptions{Dir: dir, UnsafeNoFsync: true})
	if err != nil {
		t.Fatal(err)
	}
	e.Close()
	db, err := os.OpenFile(filepath.Join(dir, "member", "snap", "db"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := unix.Flock(int(db.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
}

// TestASecondSignalEndsTheDrain stops a router that would drain for an
// hour: the first SIGTERM begins the drain, the second ends the process.
func TestASecondSignalEndsTheDrain(t *testing.T) {
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	cli := etcdxtest.StartForTest(t)
	addr := freeAddr(t)
	cmd := exec.Command(bin, "router", "--http-addr", addr, "--drain-delay", "1h")
	cmd.Env = append(cleanEnv(),
		"CONCH_ETCD_ENDPOINTS="+strings.Join(cli.Endpoints(), ","),
		"CONCH_INTERNAL_SECRET=drain-secret-0123456789",
		"CONCH_ADMIN_KEY=drain-admin-key-0123456789",
		"CONCH_RESPONSES_DIR="+t.TempDir(),
		"CONCH_SECRETS_KEY="+sealtest.KeyText(t),
	)
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-waited
		}
		if t.Failed() {
			t.Logf("conch router stderr:\n%s", tail(stderr.String(), 4000))
		}
	})
	for deadline := time.Now().Add(exitDeadline); ; {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		select {
		case err := <-waited:
			t.Fatalf("conch router exited before it served: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("conch router not serving /healthz after %v: %v", exitDeadline, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// It says when it begins to drain; it would drain for an hour.
	for deadline := time.Now().Add(exitDeadline); !strings.Contains(stderr.String(), `"msg":"http server draining"`); {
		if time.Now().After(deadline) {
			t.Fatalf("conch router not draining %v after SIGTERM", exitDeadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
			t.Errorf("after the second SIGTERM: %v, want the router ended by the signal", err)
		}
	case <-time.After(exitDeadline):
		t.Fatalf("conch router still draining %v after a second SIGTERM", exitDeadline)
	}
}
