// Package e2e is the end-to-end suite: it runs the conch binary as a
// subprocess (`conch dev`) and talks to it only through its public HTTP API.
package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/conchtest"
	"github.com/conch-sh/conch/services/internal/localcluster"
)

// conchBin is the binary under test.
var conchBin = conchtest.Binary

// dev is a running `conch dev`.
type dev struct {
	t       testing.TB
	cmd     *exec.Cmd
	URL     string
	Key     string
	DataDir string
	waited  chan error
	stderr  *lockedBuffer
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t testing.TB) string {
	t.Helper()
	addrs, err := localcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return addrs[0]
}

// modelHost is where the suite's model servers, webhooks and MCP servers
// listen: a loopback address every dev cluster of the suite allows
// (--outbound-allow), as an operator allows an on-premise model server.
// 127.0.0.1, where conch itself listens, stays refused.
const modelHost = "127.0.0.2"

// serveModel serves h on a free port of modelHost.
func serveModel(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", modelHost+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// startDev starts `conch dev` on a free port in a fresh data dir and waits
// until /readyz answers 200. env adds to the environment.
func startDev(t testing.TB, env ...string) *dev {
	t.Helper()
	return startDevIn(t, t.TempDir(), env...)
}

// startDevIn is startDev on the data dir dataDir, e.g. that of a dev
// cluster stopped before, to start it again with other settings.
func startDevIn(t testing.TB, dataDir string, env ...string) *dev {
	t.Helper()
	bin, err := conchBin()
	if err != nil {
		t.Fatal(err)
	}
	d := &dev{t: t, DataDir: dataDir, waited: make(chan error, 1), stderr: &lockedBuffer{}}
	// Port 0: conch dev picks a free port and says which in its banner, so
	// no other process can take it between a check and the bind.
	d.cmd = exec.Command(bin, "dev", "--http-addr", "127.0.0.1:0", "--data-dir", d.DataDir)
	d.cmd.Env = append(append(cleanEnv(), "CONCH_OUTBOUND_ALLOW="+modelHost), env...)
	d.cmd.Stderr = d.stderr
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	banner := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			banner <- sc.Text()
		}
		close(banner)
	}()
	go func() { d.waited <- d.cmd.Wait() }()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
			<-d.waited
		}
		if t.Failed() {
			t.Logf("conch dev stderr:\n%s", tail(d.stderr.String(), 4000))
		}
	})

	const up = "conch dev is up on "
	deadline := time.After(30 * time.Second)
	for d.URL == "" {
		select {
		case line, ok := <-banner:
			if !ok {
				t.Fatalf("conch dev exited before its banner:\n%s", tail(d.stderr.String(), 4000))
			}
			if u, found := strings.CutPrefix(line, up); found {
				d.URL = u
			}
		case <-deadline:
			t.Fatalf("no banner from conch dev after 30s:\n%s", tail(d.stderr.String(), 4000))
		}
	}
	go func() {
		for range banner { // keep the pipe drained
		}
	}()
	d.waitReady(30 * time.Second)
	key, err := os.ReadFile(filepath.Join(d.DataDir, "api-key"))
	if err != nil {
		t.Fatalf("read api-key: %v", err)
	}
	d.Key = strings.TrimSpace(string(key))
	return d
}

// cleanEnv is the test's environment without conch settings, so a developer's
// own CONCH_* variables do not leak into the cluster under test.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "CONCH_") {
			env = append(env, kv)
		}
	}
	return env
}

func (d *dev) waitReady(timeout time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case err := <-d.waited:
			d.t.Fatalf("conch dev exited before ready: %v\n%s", err, tail(d.stderr.String(), 4000))
		default:
		}
		resp, err := http.Get(d.URL + "/readyz")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, b)
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("conch dev not ready after %v: %s", timeout, last)
}

// stop sends SIGTERM and returns how long the process took to exit.
func (d *dev) stop(timeout time.Duration) (time.Duration, error) {
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	select {
	case err := <-d.waited:
		return time.Since(start), err
	case <-time.After(timeout):
		return time.Since(start), fmt.Errorf("conch dev still running %v after SIGTERM", timeout)
	}
}

// call makes an HTTP request and returns status and body.
func (d *dev) call(method, path, key string, body any, headers ...string) (int, []byte) {
	d.t.Helper()
	code, _, b := d.do(method, path, key, body, headers...)
	return code, b
}

// do makes an HTTP request with body as JSON and returns status, headers
// and body.
func (d *dev) do(method, path, key string, body any, headers ...string) (int, http.Header, []byte) {
	d.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			d.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	return d.send(method, path, key, r, headers...)
}

// send makes an HTTP request with body as it is and returns status,
// headers and body.
func (d *dev) send(method, path, key string, body io.Reader, headers ...string) (int, http.Header, []byte) {
	d.t.Helper()
	req, err := http.NewRequestWithContext(d.t.Context(), method, d.URL+path, body)
	if err != nil {
		d.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		d.t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// pendingApproval is a pending approval as GET /api/v1/approvals lists it.
type pendingApproval struct {
	ID, Command, Host, Cwd string
	ResolvedPaths          []string `json:"resolved_paths"`
}

// allowWhenPending waits in the background, up to 30s, for the pending
// approval of command, passes it to check and allows it once. The channel
// gets the status of the :resolve call, 0 when none was pending in time.
func allowWhenPending(t *testing.T, d *dev, command string, check func(pendingApproval)) <-chan int {
	return answerWhenPending(t, d, command, "allow-once", check)
}

// answerWhenPending is allowWhenPending with the decision given.
func answerWhenPending(t *testing.T, d *dev, command, decision string, check func(pendingApproval)) <-chan int {
	answered := make(chan int, 1)
	get := func(method, path string, body any) (int, []byte) {
		var r io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			r = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(t.Context(), method, d.URL+path, r)
		if err != nil {
			return 0, nil
		}
		req.Header.Set("Authorization", "Bearer "+d.Key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, nil
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	go func() {
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) && t.Context().Err() == nil {
			_, body := get("GET", "/api/v1/approvals?state=pending", nil)
			var list struct {
				Approvals []pendingApproval `json:"approvals"`
			}
			_ = json.Unmarshal(body, &list)
			for _, a := range list.Approvals {
				if a.Command == command {
					check(a)
					code, _ := get("POST", "/api/v1/approvals/"+a.ID+":resolve", map[string]string{"decision": decision})
					answered <- code
					return
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		answered <- 0
	}()
	return answered
}

// persistentSandbox creates a sandbox with user's persistent workspace
// through the REST API and returns its id.
func persistentSandbox(t *testing.T, d *dev, user string) string {
	t.Helper()
	return newSandbox(t, d, map[string]any{"user": user, "persistent": true})
}

// newSandbox creates a sandbox of the request body through the REST API
// and returns its id.
func newSandbox(t *testing.T, d *dev, body map[string]any) string {
	t.Helper()
	code, resp := d.call("POST", "/api/v1/sandboxes", d.Key, body)
	var sb struct{ ID string }
	if err := json.Unmarshal(resp, &sb); code != http.StatusOK || err != nil || sb.ID == "" {
		t.Fatalf("create sandbox = %d %s", code, resp)
	}
	return sb.ID
}

// runCommand asks gateway's scripted model to run command with the tool
// of that type, for user when set, and returns the completion's body;
// headers are added to the request.
func runCommand(t *testing.T, d *dev, gateway, tool, user, command string, headers ...string) string {
	t.Helper()
	body := map[string]any{
		"model":    gateway,
		"messages": []map[string]string{{"role": "user", "content": "run: " + command}},
		"tools":    []map[string]string{{"type": tool}},
	}
	if user != "" {
		body["user"] = user
	}
	code, resp := d.call("POST", "/v1/chat/completions", d.Key, body, headers...)
	if code != http.StatusOK {
		t.Fatalf("chat %q = %d %s", command, code, resp)
	}
	return string(resp)
}
