//go:build imagestest

package imagestest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/conch-sh/conch/services/internal/conchtest"
	"github.com/conch-sh/conch/services/internal/image/imagetest"
)

// repo is the repository root, relative to this package.
const repo = "../../.."

// cluster is one compose project of deploy/compose/compose.yaml.
type cluster struct {
	t       *testing.T
	engine  string
	compose []string
	project string
	env     []string
	routers []string // base URLs on loopback
	key     string
	http    *http.Client
}

func TestComposeCluster(t *testing.T) {
	c := up(t)
	ctx := t.Context()

	t.Run("the deploy guide's first gateway and chat", func(t *testing.T) {
		// As docs/how-to/deploy.md has a user do it, with the CLI.
		c.cli(t, "gateways", "create", "default", "--provider", "scripted", "--shell")
		if out := c.cli(t, "chat", "-m", "run `uname -a`"); !strings.Contains(out, "Linux") {
			t.Fatalf("conch chat printed %q, want uname's output", out)
		}
	})
	c.must(ctx, c.routers[0], "POST", "/api/v1/gateways", map[string]any{
		"name":     "persistent",
		"upstream": map[string]any{"provider": "scripted"},
		"shell":    map[string]any{"enabled": true, "allow_data_persistence": true},
	})
	c.must(ctx, c.routers[0], "POST", "/api/v1/gateways", map[string]any{
		"name":     "strict",
		"upstream": map[string]any{"provider": "scripted"},
		"shell":    map[string]any{"enabled": true},
		"exec":     map[string]any{"security": "allowlist", "ask": "on-miss"},
	})

	t.Run("shell and persistent workspace", func(t *testing.T) {
		// Written through one router's completion, read through the
		// other's: the workspace outlives the sandbox and the router.
		r := c.complete(ctx, c.routers[0], "persistent", "alice", "echo kept > /home/workspace/notes.txt && uname -s")
		if r.Outcome.ExitCode != 0 || r.Stdout != "Linux\n" {
			t.Fatalf("first completion: %+v", r)
		}
		r = c.complete(ctx, c.routers[1], "persistent", "alice", "cat /home/workspace/notes.txt")
		if r.Stdout != "kept\n" {
			t.Fatalf("second completion read %q, want the file the first wrote", r.Stdout)
		}
	})

	t.Run("file round trip through REST", func(t *testing.T) {
		content := []byte("uploaded through REST " + rand.Text() + "\n")
		c.do(ctx, c.routers[1], "PUT", "/api/v1/shell/io/upload?path="+url.QueryEscape("/in/up.txt"), content, http.StatusOK, "X-Shell-User-Id", "alice")
		r := c.complete(ctx, c.routers[0], "persistent", "alice", "cat /home/workspace/in/up.txt | tr a-z A-Z > /home/workspace/out.txt")
		if r.Outcome.ExitCode != 0 {
			t.Fatalf("completion: %+v", r)
		}
		got := c.do(ctx, c.routers[1], "GET", "/api/v1/shell/io/download?path="+url.QueryEscape("/out.txt"), nil, http.StatusOK, "X-Shell-User-Id", "alice")
		if want := strings.ToUpper(string(content)); string(got) != want {
			t.Fatalf("downloaded %q, want %q", got, want)
		}
	})

	t.Run("a template pushed and a sandbox started from it", func(t *testing.T) {
		// Built on the workspace service, unpacked and overlaid on an
		// executor in its container.
		archive := imagetest.Save(t, imagetest.Minimal(t, imagetest.Options{
			Files:   []imagetest.File{{Path: "opt", Dir: true}, {Path: "opt/marker", Body: "from the image\n"}},
			Workdir: "/app",
		}))
		c.cli(t, "templates", "create", "mini")
		if out := c.cli(t, "templates", "push", "mini", archive); !strings.Contains(out, "status:   ready") {
			t.Fatalf("push printed %q", out)
		}
		id := strings.TrimSpace(c.cli(t, "sandbox", "create", "--template", "mini"))
		if out := c.cli(t, "sandbox", "exec", id, "pwd; cat /opt/marker; echo w > file && cat file"); out != "/app\nfrom the image\nw\n" {
			t.Fatalf("the template's sandbox printed %q", out)
		}
		c.cli(t, "sandbox", "rm", id)
	})

	t.Run("approval answered over REST", func(t *testing.T) {
		command := "touch /tmp/approved-" + rand.Text()[:8]
		type answer struct {
			r   conchtest.ShellResult
			err error
		}
		done := make(chan answer, 1)
		go func() {
			r, err := c.completion(ctx, c.routers[0], "strict", "", command)
			done <- answer{r, err}
		}()
		var id string
		c.eventually(60*time.Second, "the approval is pending", func() error {
			var list struct {
				Approvals []struct {
					ID      string `json:"id"`
					Command string `json:"command"`
				} `json:"approvals"`
			}
			b, err := c.request(ctx, c.routers[1], "GET", "/api/v1/approvals?state=pending", nil, http.StatusOK)
			if err != nil {
				return err
			}
			if err := json.Unmarshal(b, &list); err != nil {
				return err
			}
			for _, a := range list.Approvals {
				if a.Command == command {
					id = a.ID
					return nil
				}
			}
			return fmt.Errorf("pending: %s", b)
		})
		c.must(ctx, c.routers[1], "POST", "/api/v1/approvals/"+id+":resolve", map[string]string{"decision": "allow-once"})
		select {
		case a := <-done:
			if a.err != nil || a.r.Outcome.ExitCode != 0 {
				t.Fatalf("approved command: %+v, %v", a.r, a.err)
			}
		case <-time.After(60 * time.Second):
			t.Fatal("the approved command did not run")
		}
	})

	t.Run("an executor killed", func(t *testing.T) {
		victim := c.container("executor-1")
		c.run(c.engine, "kill", victim)
		if state := strings.TrimSpace(c.run(c.engine, "inspect", "-f", "{{.State.Running}}", victim)); state != "false" {
			t.Fatalf("%s is still running (%s) after the kill", victim, state)
		}
		// Its registration outlives it until its lease expires; the next
		// completions must be placed on the other executor regardless.
		for i := range 3 {
			r := c.complete(ctx, c.routers[i%2], "persistent", "alice", "cat /home/workspace/notes.txt")
			if r.Stdout != "kept\n" {
				t.Fatalf("completion %d after the kill: %+v", i, r)
			}
		}
		if state := strings.TrimSpace(c.run(c.engine, "inspect", "-f", "{{.State.Running}}", victim)); state != "false" {
			t.Fatalf("%s came back (%s): the completions above may have used it", victim, state)
		}
	})

	t.Run("rolling restart of the routers", func(t *testing.T) {
		// A client that, like a load balancer, sends each request to a
		// router whose /readyz answers: a router that drains says so
		// before it stops taking requests.
		var ok, failed atomic.Int64
		var firstErr atomic.Value
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := range 2 {
			wg.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					router := c.readyRouter(ctx, w+n)
					if router == "" {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, "no router ready")
						time.Sleep(100 * time.Millisecond)
						continue
					}
					if _, err := c.completion(ctx, router, "persistent", "bob", "echo ok"); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					ok.Add(1)
				}
			})
		}
		for _, svc := range []string{"router-1", "router-2"} {
			name := c.container(svc)
			c.run(c.engine, "restart", "--time", "40", name)
			base := c.routers[0]
			if svc == "router-2" {
				base = c.routers[1]
			}
			c.eventually(90*time.Second, svc+" ready again", func() error { return c.ready(ctx, base) })
		}
		close(stop)
		wg.Wait()
		t.Logf("rolling restart: %d completions answered, %d failed", ok.Load(), failed.Load())
		if failed.Load() > 0 || ok.Load() == 0 {
			t.Fatalf("rolling restart: %d failed (first: %v), %d answered", failed.Load(), firstErr.Load(), ok.Load())
		}
	})
}

// up starts the cluster from deploy/compose/compose.yaml and waits until
// both routers report every service reachable.
func up(t *testing.T) *cluster {
	t.Helper()
	engine := os.Getenv("CONTAINER_ENGINE")
	compose := strings.Fields(os.Getenv("CONCH_COMPOSE"))
	if engine == "" || len(compose) == 0 {
		t.Fatal("CONTAINER_ENGINE and CONCH_COMPOSE must name the container engine and the compose command (make images-test sets them)")
	}
	secrets := t.TempDir()
	c := &cluster{
		t: t, engine: engine, project: "conch-it-" + strings.ToLower(rand.Text()[:8]),
		http: &http.Client{Timeout: 2 * time.Minute},
	}
	c.compose = append(compose, "-p", c.project, "-f", filepath.Join(repo, "deploy/compose/compose.yaml"))
	c.run(filepath.Join(repo, "deploy/compose/secrets.sh"), secrets)
	key, err := envValue(filepath.Join(secrets, "router.env"), "CONCH_ADMIN_KEY")
	if err != nil {
		t.Fatal(err)
	}
	c.key = key
	ports := []string{freePort(t), freePort(t)}
	c.env = []string{"CONCH_SECRETS=" + secrets, "CONCH_HTTP_PORT=" + ports[0], "CONCH_HTTP_PORT_2=" + ports[1]}
	for _, p := range ports {
		c.routers = append(c.routers, "http://127.0.0.1:"+p)
	}
	t.Cleanup(c.down)

	// The sandboxes' root filesystem, etcd's certificates and the
	// services' MinIO users first: compose implementations that ignore
	// depends_on conditions would start the executors without the
	// first, etcd without the second and the workspace, approval and
	// router services before their users.
	first := []string{"rootfs", "etcd-pki", "minio", "minio-auth"}
	c.run(c.compose[0], append(c.compose[1:], append([]string{"up", "-d"}, first...)...)...)
	for _, svc := range []string{"rootfs", "etcd-pki", "minio-auth"} {
		if code := strings.TrimSpace(c.run(c.engine, "wait", c.container(svc))); code != "0" {
			t.Fatalf("%s exited %s", svc, code)
		}
	}
	c.run(c.compose[0], append(c.compose[1:], "up", "-d")...)
	for _, r := range c.routers {
		c.eventually(3*time.Minute, "router "+r+" ready", func() error { return c.ready(t.Context(), r) })
	}
	return c
}

// down writes every container's logs, prints them if the test failed, and
// removes the project with its volumes.
func (c *cluster) down() {
	dir := os.Getenv("CONCH_IMAGES_TEST_LOGS")
	if dir == "" {
		dir = c.t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		c.t.Error(err)
	}
	names, _ := exec.Command(c.engine, "ps", "-a", "--filter", "label=com.docker.compose.project="+c.project, "--format", "{{.Names}}").Output()
	for _, name := range strings.Fields(string(names)) {
		logs, _ := exec.Command(c.engine, "logs", name).CombinedOutput()
		_ = os.WriteFile(filepath.Join(dir, name+".log"), logs, 0o644)
		if c.t.Failed() {
			c.t.Logf("==> logs of %s (last 60 lines)\n%s", name, tail(logs, 60))
		}
	}
	c.t.Logf("container logs in %s", dir)
	cmd := exec.Command(c.compose[0], append(c.compose[1:], "down", "-v", "-t", "40")...)
	cmd.Env = append(os.Environ(), c.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Errorf("compose down: %v\n%s", err, tail(out, 30))
	}
	// podman-compose 1.0 leaves the project's network behind.
	nets, err := exec.Command(c.engine, "network", "ls", "-q", "--filter", "label=com.docker.compose.project="+c.project).Output()
	if err != nil {
		c.t.Errorf("list networks: %v", err)
	}
	for _, n := range strings.Fields(string(nets)) {
		if out, err := exec.Command(c.engine, "network", "rm", n).CombinedOutput(); err != nil {
			c.t.Errorf("remove network %s: %v\n%s", n, err, out)
		}
	}
}

// run runs a command with the cluster's environment and returns its
// standard output; a failure ends the test.
func (c *cluster) run(name string, args ...string) string {
	c.t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), c.env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		c.t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, tail(out.Bytes(), 20), tail(errb.Bytes(), 20))
	}
	return out.String()
}

// container is the name of service svc's container, whatever the compose
// implementation names it.
func (c *cluster) container(svc string) string {
	c.t.Helper()
	out := strings.Fields(c.run(c.engine, "ps", "-a",
		"--filter", "label=com.docker.compose.project="+c.project,
		"--filter", "label=com.docker.compose.service="+svc, "--format", "{{.Names}}"))
	if len(out) != 1 {
		c.t.Fatalf("service %s has containers %v, want one", svc, out)
	}
	return out[0]
}

// ready is nil when router's /readyz answers 200.
func (c *cluster) ready(ctx context.Context, router string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", router+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz %d: %s", resp.StatusCode, b)
	}
	return nil
}

// readyRouter is the first router, from the n-th on, whose /readyz
// answers, or "".
func (c *cluster) readyRouter(ctx context.Context, n int) string {
	for i := range c.routers {
		r := c.routers[(n+i)%len(c.routers)]
		if c.ready(ctx, r) == nil {
			return r
		}
	}
	return ""
}

// eventually polls check until it returns nil or timeout passes.
func (c *cluster) eventually(timeout time.Duration, what string, check func() error) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s: not within %s: %v", what, timeout, err)
		}
		select {
		case <-c.t.Context().Done():
			c.t.Fatalf("%s: %v", what, c.t.Context().Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// request sends an authenticated request and returns the body of a
// response with status want.
func (c *cluster) request(ctx context.Context, router, method, path string, body []byte, want int, headers ...string) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, router+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != want {
		return nil, fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, b)
	}
	return b, nil
}

// do is request for a call that has to succeed.
func (c *cluster) do(ctx context.Context, router, method, path string, body []byte, want int, headers ...string) []byte {
	c.t.Helper()
	b, err := c.request(ctx, router, method, path, body, want, headers...)
	if err != nil {
		c.t.Fatal(err)
	}
	return b
}

// must sends body as JSON and needs a 200.
func (c *cluster) must(ctx context.Context, router, method, path string, body any) []byte {
	c.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.do(ctx, router, method, path, b, http.StatusOK)
}

// completion asks gateway, through router, to run command for user (none:
// an in-memory workspace) and returns the one shell call's result.
func (c *cluster) completion(ctx context.Context, router, gateway, user, command string) (conchtest.ShellResult, error) {
	req := map[string]any{
		"model":    gateway,
		"messages": []map[string]string{{"role": "user", "content": "run: " + command}},
	}
	if user != "" {
		req["user"] = user
	}
	body, err := json.Marshal(req)
	if err != nil {
		return conchtest.ShellResult{}, err
	}
	b, err := c.request(ctx, router, "POST", "/v1/chat/completions", body, http.StatusOK)
	if err != nil {
		return conchtest.ShellResult{}, err
	}
	var out struct {
		Conch struct {
			Calls []struct {
				Result string `json:"result"`
			} `json:"server_tool_calls"`
		} `json:"conch"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Conch.Calls) != 1 {
		return conchtest.ShellResult{}, fmt.Errorf("completion without exactly one shell call: %s", b)
	}
	var r conchtest.ShellResult
	if err := json.Unmarshal([]byte(out.Conch.Calls[0].Result), &r); err != nil {
		return conchtest.ShellResult{}, fmt.Errorf("shell result: %w: %s", err, out.Conch.Calls[0].Result)
	}
	if r.Outcome.Type != "exit" {
		return r, fmt.Errorf("shell call did not run: %+v", r)
	}
	return r, nil
}

// complete is completion for a call that has to succeed.
func (c *cluster) complete(ctx context.Context, router, gateway, user, command string) conchtest.ShellResult {
	c.t.Helper()
	r, err := c.completion(ctx, router, gateway, user, command)
	if err != nil {
		c.t.Fatal(err)
	}
	return r
}

// cli runs bin/conch (CONCH_BIN) against the first router with the admin
// key, as a user of docs/how-to/deploy.md would, and returns its output.
func (c *cluster) cli(t *testing.T, args ...string) string {
	t.Helper()
	bin := os.Getenv("CONCH_BIN")
	if bin == "" {
		t.Fatal("CONCH_BIN must name bin/conch (make images-test sets it)")
	}
	cmd := exec.CommandContext(t.Context(), bin, args...)
	cmd.Env = append(os.Environ(), "CONCH_URL="+c.routers[0], "CONCH_API_KEY="+c.key)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("conch %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, p, _ := net.SplitHostPort(l.Addr().String())
	return p
}

// envValue reads one variable of an env file.
func envValue(file, name string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+"="); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s: no %s", file, name)
}

// tail is the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}
