// Package miniotest starts a real MinIO server process for tests.
//
// The binary is $CONCH_MINIO_BIN (set by .ci/run), else .cache/bin/minio at
// the repository root, else it is built there with `go install`, as
// .ci/run does. Tests never skip for want of it.
package miniotest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Version is the MinIO module version .ci/run installs.
const Version = "v0.0.0-20260212201848-7aac2a2c5b7c"

// Server is a running MinIO.
type Server struct {
	// Endpoint is host:port.
	Endpoint string
	// AccessKey and SecretKey are the root credentials.
	AccessKey, SecretKey string
	cmd                  *exec.Cmd
}

// Binary returns the MinIO server binary, building it on first use if
// there is none, for tests that run MinIO their own way.
var Binary = sync.OnceValues(func() (string, error) {
	if b := os.Getenv("CONCH_MINIO_BIN"); b != "" {
		return b, nil
	}
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, ".cache", "bin", "minio")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.Command("go", "install", "github.com/minio/minio@"+Version)
	cmd.Env = append(os.Environ(), "GOBIN="+filepath.Dir(bin), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build minio: %v\n%s", err, out)
	}
	return bin, nil
})

// repoRoot finds the directory holding go.work above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("miniotest: no go.work above the working directory")
		}
		dir = parent
	}
}

// Start starts MinIO on a free loopback port with its data in a temp dir
// and stops it when the test ends.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, stop, err := Launch(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(stop)
	return s
}

// Pid is the MinIO process's id, for benchmarks that measure its CPU time
// or memory.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Launch starts MinIO with its data in dir, for a TestMain that shares one
// server between tests; stop kills it.
func Launch(dir string) (s *Server, stop func(), err error) {
	// The free ports picked may be taken by a parallel test before MinIO
	// binds them; try again on new ones.
	for range 5 {
		s, stop, err = launch(dir)
		if err == nil || !strings.Contains(err.Error(), "already in use") {
			return s, stop, err
		}
	}
	return s, stop, err
}

func launch(dir string) (s *Server, stop func(), err error) {
	bin, err := Binary()
	if err != nil {
		return nil, nil, err
	}
	s = &Server{AccessKey: "conchtest", SecretKey: randomHex(16)}
	if s.Endpoint, err = freeAddr(); err != nil {
		return nil, nil, err
	}
	console, err := freeAddr()
	if err != nil {
		return nil, nil, err
	}
	s.cmd = exec.Command(bin, "server", "--quiet", "--address", s.Endpoint, "--console-address", console, dir)
	s.cmd.Env = append(os.Environ(),
		"MINIO_ROOT_USER="+s.AccessKey, "MINIO_ROOT_PASSWORD="+s.SecretKey,
		"MINIO_BROWSER=off", "MINIO_UPDATE=off", "MINIO_CI_CD=1")
	out := &strings.Builder{}
	var mu sync.Mutex
	s.cmd.Stdout = lockedWriter{&mu, out}
	s.cmd.Stderr = lockedWriter{&mu, out}
	if err := s.cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start minio: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	stop = func() {
		_ = s.cmd.Process.Kill()
		<-exited
	}
	output := func() string {
		mu.Lock()
		defer mu.Unlock()
		return out.String()
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-exited:
			return nil, nil, fmt.Errorf("minio exited: %v\n%s", err, output())
		default:
		}
		if s.ready() {
			return s, stop, nil
		}
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("minio not ready after 60s:\n%s", output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Bucket returns a fresh bucket name, for per-test isolation.
func Bucket() string { return "t-" + randomHex(8) }

// ready reports whether the server answers S3 calls: its health endpoint
// turns ready before the object layer is initialised.
func (s *Server) ready() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+s.Endpoint+"/minio/health/ready", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false
	}
	c, err := minio.New(s.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.AccessKey, s.SecretKey, "")})
	if err != nil {
		return false
	}
	_, err = c.BucketExists(ctx, "readiness-probe")
	return err == nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
